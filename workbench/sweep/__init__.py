"""Sweep: many candidates through evaluate's stages, ranked on one table and one Pareto front;
fanned out on Ray.

docs/architecture.md places this package among the others.
"""
