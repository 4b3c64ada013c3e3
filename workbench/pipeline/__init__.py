"""Pipeline: the commands as recipes that call the stages in order (evaluate, quantize, gate,
log).

docs/architecture.md places this package among the others.
"""
