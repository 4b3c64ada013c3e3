"""Record: the decision record (JSON contract, Markdown, JUnit, CI summary), assembled from the
stage results.

docs/architecture.md places this package among the others.
"""
