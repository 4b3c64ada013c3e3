"""Stopping a candidate that has already failed: after each of its suites, the gates whose
evidence is then complete are judged by the very code that judges them at the end, and a
fail that no later suite can turn back ends the measurement (docs/gates.md, "Stopping
early").

Past doubt means: the gate fails at the level its look is judged at, and, under Holm's
adjustment, its one-sided p-value is at most alpha over every test the final judgement
will count. Holm rejects any test whose p-value is at most alpha/m (its first step: every
smaller p-value passes its own, looser step too), so such a fail survives the adjustment
whatever the later suites show; m is counted from the baseline judged against itself, an
upper bound on the tests of any candidate. A gate without a p-value (a fidelity bound, a
recovery ratio) compares a figure its suite has fixed. The intervals are the same at the
end: every comparison is a bootstrap seeded alike (paired.Comparisons). Only failing is
ever decided early: a promotion needs every gate, so nothing is promoted before the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from workbench.config.gate_policy import GatePolicy, HealthGate
from workbench.gate.evidence import Evidence, GateId, GateOutcome
from workbench.gate.gates import POOLED, evaluate_gates
from workbench.gate.paired import Comparisons
from workbench.gate.traffic import pair_traffic
from workbench.measure.watch import StoppedEarly, SuiteRun
from workbench.suites.results import SuiteResult

__all__ = ["LOAD_SECTIONS", "Decisive", "EarlyStop", "decisiveness", "mark_not_measured",
           "past_doubt", "planned_outcomes", "planned_tests", "suite_order"]

JUDGED = ("pass", "fail", "inconclusive")  # a status that read the suite's items
# The gates whose evidence is one suite's items (and the gate's own figures of it)
SUITE_SECTIONS = frozenset({"quality", "safety", "structured", "traffic", "health",
                            "fidelity"})
LOAD_SECTIONS = frozenset({"latency", "slo", "capacity"})
# headroom figures sampled while the load test ran: without it, not comparable
PEAK_FIGURES = frozenset({"peak_engine_rss_bytes", "peak_gpu_memory_bytes",
                          "device_memory_free_bytes", "device_margin"})


def _evidence(base: dict[str, SuiteResult], cand: dict[str, SuiteResult], device: str,
              fidelity: dict) -> Evidence:
    """The suites alone: no load, no headroom, no servers (those gates are not judged
    early)."""
    return Evidence(base_suites=base, cand_suites=cand, base_load=None, cand_load=None,
                    device=device, fidelity=fidelity)


def _p_fail(outcome: GateOutcome) -> float | None:
    p = outcome.evidence.get("p_fail")
    return p if isinstance(p, float) and not math.isnan(p) else None


def planned_outcomes(policy: GatePolicy, base: dict[str, SuiteResult], device: str,
                     seed: int) -> list[GateOutcome]:
    """The baseline's suites judged against themselves: every suite gate the plan will
    judge, with every check and slice a candidate's judgement can have."""
    base, _ = pair_traffic(base, {})
    return evaluate_gates(policy, _evidence(base, base, device, {}), seed)


def planned_tests(planned: list[GateOutcome], policy: GatePolicy, device: str,
                  load_profiles: int) -> int:
    """How many tests Holm's adjustment can count at the end, at most: every counted suite
    gate the plan will judge, a p-value or not (a candidate's judgement has the baseline's
    checks and slices; a slice with nothing to lose against itself is counted too, since a
    candidate's could have a test), and each SLO attainment test on each gated load
    profile. Counting more only makes the bound stricter."""
    suite_tests = sum(1 for o in planned if o.identity.section in SUITE_SECTIONS
                      and not o.informational)
    slo_tests = sum(load_profiles for g in policy.slo
                    if device in g.devices and g.min_attainment is not None)
    return suite_tests + slo_tests


def past_doubt(outcome: GateOutcome, measured: set[str], bound: float) -> bool:
    """Whether a gate's fail is final: a counted gate on one suite that both models have
    answered in full, failing at its look's level with a p-value (if it has one) at most
    `bound` (alpha over the planned tests under Holm)."""
    gate = outcome.identity
    if outcome.status != "fail" or outcome.informational:
        return False
    if gate.section not in SUITE_SECTIONS or gate.subject == POOLED \
            or gate.subject not in measured:
        return False
    if (gate.metric or "").startswith("judge_"):  # the judge reads answers once both are in
        return False
    p = _p_fail(outcome)
    return p is None or p <= bound


@dataclass(frozen=True)
class Decisive:
    """How often a suite's gates decided earlier runs: of the records that judged them,
    how many failed one (a suite that often fails is worth running early)."""

    runs: int = 0
    failed: int = 0

    @property
    def rate(self) -> float:
        """The share of runs it failed, pulled towards a half where there are few."""
        return (self.failed + 1) / (self.runs + 2)


def decisiveness(records: Iterable[dict]) -> dict[str, Decisive]:
    """Per suite, from stored decision records (decision.json as dicts, any schema): the
    runs whose counted gates on it were judged, and those in which one failed."""
    tally: dict[str, list[int]] = {}
    for record in records:
        judged: dict[str, bool] = {}
        gates = record.get("gates") if isinstance(record, dict) else None
        for g in gates if isinstance(gates, list) else []:
            if not isinstance(g, dict):
                continue
            gate = _stored_id(g)
            if gate.section not in SUITE_SECTIONS or gate.subject == POOLED \
                    or g.get("informational") or g.get("status") not in JUDGED:
                continue
            judged[gate.subject] = judged.get(gate.subject, False) or g["status"] == "fail"
        for suite, failed in judged.items():
            runs_failed = tally.setdefault(suite, [0, 0])
            runs_failed[0] += 1
            runs_failed[1] += failed
    return {suite: Decisive(runs, failed) for suite, (runs, failed) in tally.items()}


def _stored_id(gate: dict) -> GateId:
    """A stored gate's id: its parts where the record keeps them (schema 5 on: a suite's
    name may hold a dot), else parsed from its name."""
    parts = gate.get("id")
    if isinstance(parts, dict):
        try:
            return GateId(**parts)
        except TypeError:
            pass
    return GateId.parse(str(gate.get("gate", "")))


def suite_order(runs: list[SuiteRun], base: dict[str, SuiteResult],
                planned: list[GateOutcome], history: dict[str, Decisive] | None = None
                ) -> list[SuiteRun]:
    """The cheapest decisive first: by the baseline's seconds for each run (the items the
    candidate will answer; items where a cached result has no time) over the counted
    gates that judge it (the ways it can fail) times how often it failed earlier runs
    (history; a half where it has none); runs no gate judges last, each group in the
    config's order. The order decides when a stop can come, never a result."""
    gates: dict[str, int] = {}
    for o in planned:
        if not o.informational and o.identity.section in SUITE_SECTIONS:
            gates[o.identity.subject] = gates.get(o.identity.subject, 0) + 1
    history = history or {}

    def cost(run: SuiteRun) -> tuple[int, float]:
        name = run[1]
        result = base.get(name)
        seconds = (result.seconds or float(result.n)) if result is not None else math.inf
        judged = gates.get(name, 0) * history.get(name, Decisive()).rate
        return (0, seconds / judged) if judged else (1, 0.0)

    return sorted(runs, key=cost)


@dataclass
class EarlyStop:
    """The candidate's watch (measure/watch.py: SuiteWatch) for one run: its suites in the
    cheapest decisive order, and a stop once they have failed it past doubt.

    restrict: the half of each suite's items the decision reads (a tune trial's; identity
    otherwise); fidelity: token-level fidelity of the given fidelity suites, read from both
    models' stored log-probabilities."""

    policy: GatePolicy  # the policy at the look's level (GatePolicy.for_look)
    base: dict[str, SuiteResult]
    device: str
    seed: int
    load_profiles: int
    restrict: Callable[[str, SuiteResult], SuiteResult]
    fidelity: Callable[[set[str]], dict]
    history: dict[str, Decisive] = field(default_factory=dict)  # earlier runs' records
    _compared: Comparisons = field(init=False)
    _base: dict[str, SuiteResult] = field(init=False)
    _cand: dict[str, SuiteResult] = field(default_factory=dict, init=False)
    # the baseline's side of each traffic suite the candidate answered, scored against
    # itself (gate/traffic.py), kept with the candidate's so comparisons stay cached
    _paired: dict[str, SuiteResult] = field(default_factory=dict, init=False)
    _bound: float = field(init=False)
    _level: str = field(init=False)
    _planned: list[GateOutcome] = field(init=False)

    def __post_init__(self) -> None:
        self._compared = Comparisons(self.policy.confidence, self.policy.bootstrap_resamples,
                                     self.seed)
        self._base = {name: self.restrict(name, r) for name, r in self.base.items()}
        self._planned = planned_outcomes(self.policy, self._base, self.device, self.seed)
        alpha = (1 - self.policy.confidence) / 2
        tests = planned_tests(self._planned, self.policy, self.device, self.load_profiles)
        holm = self.policy.multiple_comparisons == "holm"
        self._bound = alpha / max(tests, 1) if holm else alpha
        self._level = (f"alpha {alpha:.3g} over {tests} tests: p <= {self._bound:.2g}"
                       if holm else f"alpha {alpha:.3g}")

    def order(self, runs: list[SuiteRun]) -> list[SuiteRun]:
        return suite_order(runs, self.base, self._planned, self.history)

    def after(self, done: dict[str, SuiteResult], left: list[str]) -> StoppedEarly | None:
        for name, result in done.items():
            if name not in self._cand:  # restricted (and paired) once: comparisons are kept
                self._cand[name] = self.restrict(name, result)
                if name in self._base:
                    paired_base, paired = pair_traffic({name: self._base[name]},
                                                       {name: self._cand[name]})
                    self._paired[name], self._cand[name] = paired_base[name], paired[name]
        measured = set(self._cand) & set(self._base)
        ev = _evidence({**self._base, **self._paired}, self._cand, self.device,
                       self.fidelity(measured))
        outcomes = evaluate_gates(self.policy, ev, self.seed, self._compared)
        failed = [o for o in outcomes if past_doubt(o, measured, self._bound)]
        if not failed:
            return None
        return StoppedEarly(after=list(done)[-1], gates=[o.gate for o in failed],
                            evidence=[o.detail.split(";")[0] for o in failed],
                            level=self._level, not_measured=left)


def _not_measured(outcome: GateOutcome, stopped: StoppedEarly) -> GateOutcome:
    return replace(outcome, status="not_measured", detail=(
        f"not measured: the candidate was stopped after {stopped.after}, where "
        f"{', '.join(stopped.gates)} failed past doubt ({stopped.level}); --measure-all "
        "measures everything"), value=None, evidence={})


def _left_out(outcome: GateOutcome, stopped: StoppedEarly) -> bool:
    gate = outcome.identity
    if gate.section in LOAD_SECTIONS:
        return stopped.load_not_measured
    if gate.section == "memory":
        return stopped.load_not_measured and gate.subject in PEAK_FIGURES
    if gate.section not in SUITE_SECTIONS:
        return False
    return gate.subject == POOLED or gate.subject in stopped.not_measured


def _generating(base: dict[str, SuiteResult], names: list[str]) -> list[str]:
    return [n for n in names if (r := base.get(n)) is not None and r.generates]


def mark_not_measured(outcomes: list[GateOutcome], stopped: StoppedEarly | None,
                      base: dict[str, SuiteResult], health: HealthGate | None
                      ) -> list[GateOutcome]:
    """The final judgement of a candidate stopped early: each gate whose evidence the stop
    left out (a suite never run, the pooled health of a part, the load test) is not
    measured rather than failed closed, and the health gates of the generating suites never
    run (and their pooled one) are listed too, also where the suites measured generate
    nothing. Without a stop, the outcomes as they are."""
    if stopped is None:
        return outcomes
    left_generating = [n for n in _generating(base, stopped.not_measured)
                       if health is None or not health.suites or n in health.suites]
    if health is not None and left_generating:  # "no suite generates" is not so
        outcomes = [o for o in outcomes if o.gate != "health"]
    out = [_not_measured(o, stopped) if _left_out(o, stopped) else o for o in outcomes]
    names = {o.gate for o in out}
    missing = [GateId("health", run) for run in left_generating] if health is not None else []
    gated = [n for n in _generating(base, list(base))
             if health is not None and (not health.suites or n in health.suites)]
    if health is not None and health.pooled_max_drop is not None and len(gated) > 1:
        missing.append(GateId("health", POOLED))
    out += [_not_measured(GateOutcome.of(gate, "not_measured", ""), stopped)
            for gate in missing if str(gate) not in names]
    return out
