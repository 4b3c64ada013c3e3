"""Quantise: a candidate's checkpoint built from its recipe and calibration data (llm-
compressor, in its own environment), cached by content.

docs/architecture.md places this package among the others.
"""
