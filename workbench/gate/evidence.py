"""What the gates judge (one candidate's evidence against its baseline) and what each gate
says back (pass, fail, inconclusive or not_applicable, with the figures it saw).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from workbench.gate.paired import (
    Status,
)
from workbench.loadtest.results import LoadResult
from workbench.serve.engine import ServerInfo
from workbench.suites.results import SuiteResult

__all__ = ["Evidence", "GateId", "GateOutcome", "LoadView"]


@dataclass(frozen=True)
class GateId:
    """Which gate: a value the record, the sweep and CI read by its parts. Its text form
    (str) is the gate's name in tables, for example
    - quality:arithmetic[addition] (a slice), quality:arithmetic:floor (a floor),
    - safety:advbench.refused (a per-item metric), health:(pooled),
    - fidelity:heldout-text:kl_mean, latency:tpot_p50_ms:max_ratio@c4, slo@c4,
    - memory:weights_bytes:max_ratio,
    - in a run gating several load profiles, the profile before the level:
      latency:tpot_p50_ms:max_ratio@batch/r4, slo@batch/r4, capacity:at_slo:min_ratio@batch."""

    section: str  # quality | safety | structured | health | fidelity | latency | slo | memory
    subject: str = ""  # the suite (or, for latency and memory, the figure)
    metric: str | None = None  # a paired gate's per-item metric other than the score
    slice: str | None = None
    check: str | None = None  # floor, recovery, kl_mean, max_ratio, ...
    level: str | None = None  # a load level
    # the load profile, in a run that gates several (docs/load.md); None: the run's only one
    profile: str | None = None

    def __str__(self) -> str:
        text = self.section + (f":{self.subject}" if self.subject else "")
        text += f".{self.metric}" if self.metric else ""
        text += f"[{self.slice}]" if self.slice is not None else ""
        text += f":{self.check}" if self.check else ""
        where = "/".join(p for p in (self.profile, self.level) if p)
        return text + (f"@{where}" if where else "")

    @classmethod
    def parse(cls, name: str) -> GateId:
        """The parts of a name as records before schema 5 stored it (text only); newer
        records keep the parts themselves."""
        m = _LEGACY_NAME.fullmatch(name)
        if m is None:
            return cls(name)
        section, subject, slice_, check, level = m.groups()
        metric = None
        if section in ("quality", "safety", "structured") and subject and "." in subject:
            subject, metric = subject.rsplit(".", 1)
        return cls(section, subject or "", metric, slice_, check, level)


_LEGACY_NAME = re.compile(r"([a-z]+)(?::([^\[:@]+))?(?:\[([^\]]*)\])?(?::([\w]+))?(?:@(.+))?")


@dataclass(frozen=True)
class GateOutcome:
    gate: str  # str(id): the name tables and JUnit show
    status: Status
    detail: str
    threshold: float | None = None
    value: float | None = None
    evidence: dict = field(default_factory=dict)
    id: GateId | None = None  # None only in records written before schema 5
    # an absolute gate judged on the baseline too: its status there ("fail": no candidate
    # of this model can be expected to pass it; docs/gates.md); None for relative gates
    baseline_status: Status | None = None
    # judged and shown, not counted in the decision (the policy marks it so, e.g. CPU
    # latency whose intervals cannot decide)
    informational: bool = False

    @classmethod
    def of(cls, gate: GateId, status: Status, detail: str, threshold: float | None = None,
           value: float | None = None, evidence: dict | None = None,
           baseline_status: Status | None = None, informational: bool = False
           ) -> GateOutcome:
        return cls(str(gate), status, detail, threshold, value, evidence or {}, gate,
                   baseline_status, informational)

    @property
    def identity(self) -> GateId:
        return self.id if self.id is not None else GateId.parse(self.gate)


@dataclass(frozen=True)
class LoadView:
    """One load profile's results on both sides, and where their per-request data lies."""

    base: LoadResult | None
    cand: LoadResult | None
    raw_dirs: tuple[Path, Path] | None = None


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
    # (baseline, candidate) server facts for the comparability gate (a side None: not
    # measured, fail closed); None: judged without that gate (gate arithmetic alone)
    servers: tuple[ServerInfo | None, ServerInfo | None] | None = None
    # the run's own load profile (base_load, cand_load) by name, and each further profile
    # it gates (load.also); with none further, load gates' names carry no profile
    profile: str = ""
    further: dict[str, LoadView] = field(default_factory=dict)

    def load_views(self) -> list[tuple[str | None, Evidence]]:
        """The evidence as each gated load profile's load gates see it: (its name, the
        evidence with that profile's results as the load); the name is None in a run that
        gates one profile, so its gates keep the names they always had."""
        if not self.further:
            return [(None, self)]
        views: list[tuple[str | None, Evidence]] = [(self.profile, self)]
        for name, view in self.further.items():
            views.append((name, replace(self, base_load=view.base, cand_load=view.cand,
                                        raw_dirs=view.raw_dirs, profile=name, further={})))
        return views
