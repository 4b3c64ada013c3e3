"""Suites: scoring suites loaded from data and run item by item against a served model.

docs/architecture.md places this package among the others.
"""
