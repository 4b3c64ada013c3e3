"""What the gates judge (one candidate's evidence against its baseline) and what each gate
says back (pass, fail, inconclusive or not_applicable, with the figures it saw).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from workbench.gate.paired import (
    Status,
)
from workbench.loadtest.results import LoadResult
from workbench.suites.results import SuiteResult

__all__ = ["Evidence", "GateOutcome"]


@dataclass(frozen=True)
class GateOutcome:
    gate: str
    status: Status
    detail: str
    threshold: float | None = None
    value: float | None = None
    evidence: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Evidence:
    """Everything the gates judge, for one candidate against its baseline."""

    base_suites: dict[str, SuiteResult]
    cand_suites: dict[str, SuiteResult]
    base_load: LoadResult | None
    cand_load: LoadResult | None
    device: str
    base_headroom: dict = field(default_factory=dict)
    cand_headroom: dict = field(default_factory=dict)
    fidelity: dict = field(default_factory=dict)  # suite -> FidelityResult dict
    # where each model's per-request load data lies (its load/ folder): intervals for
    # latency ratios; None: judge the point ratios
    raw_dirs: tuple[Path, Path] | None = None
    # role -> figures its endpoint could not give (serve.ENDPOINT_UNMEASURED); empty when
    # both models were served here
    unmeasured: dict[str, list[str]] = field(default_factory=dict)
