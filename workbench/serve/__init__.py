"""Serve: the engine (vLLM) as a managed subprocess, or a deployed endpoint, behind one face.

docs/architecture.md places this package among the others.
"""
