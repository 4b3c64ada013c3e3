"""Config: the run's YAML validated into typed objects (the model, candidates, engine, suites,
load, gates policy, tracking).

docs/architecture.md places this package among the others.
"""
