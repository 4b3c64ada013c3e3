"""Mechanisms: what every stage uses and that knows nothing of models or gates (errors, files,
digests, processes, YAML, caches).

docs/architecture.md places this package among the others.
"""
