"""Gate: baseline and candidate compared item by item and judged against the declared policy.

docs/architecture.md places this package among the others.
"""
