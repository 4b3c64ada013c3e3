"""Plan: every input of a run checked before anything starts, and the run's plan built from
them.

docs/architecture.md places this package among the others.
"""
