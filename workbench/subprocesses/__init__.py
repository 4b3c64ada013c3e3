"""Subprocesses: programs run by the workbench inside the engine's or the quantiser's
environment; they import nothing of the workbench.

docs/architecture.md places this package among the others.
"""
