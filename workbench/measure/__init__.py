"""Measure: one side (baseline or candidate) served and measured (suites, load test, headroom),
cached by content.

docs/architecture.md places this package among the others.
"""
