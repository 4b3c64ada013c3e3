"""Load test: a declared workload driven against a served model; latency, throughput, SLO and
memory headroom.

docs/architecture.md places this package among the others.
"""
