"""Tune: when a candidate is rejected, search for the cheapest variant of its recipe that
the policy promotes, keeping the blocks the layer sensitivity ranks first in 16-bit.

docs/architecture.md places this package among the others; docs/tune.md says how.
"""
