"""Scorers: how one response (or one item's log-probabilities) is scored; pure functions, no engine.

docs/architecture.md places this package among the others."""
