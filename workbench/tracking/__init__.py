"""Tracking: a run logged to MLflow (params, metrics, per-item files, nested runs, registry).

docs/architecture.md places this package among the others.
"""
