"""The gate policy: what a candidate must show to replace the baseline (configs/gates/*.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from workbench.mechanisms.errors import InputError
from workbench.mechanisms.yaml_io import StrictModel, format_validation_error, read_yaml

__all__ = ["LATENCY_METRICS", "MEMORY_METRICS", "SECTIONS", "CapacityGate", "FidelityGate",
           "GatePolicy",
           "HealthGate", "LatencyGate", "MemoryGate", "QualityGate", "SLOGate", "SuiteDefault",
           "Ungated", "load_gate_policy", "split_confidence"]

# Metrics a latency gate may name: (LevelResult field, statistic) pairs, plus throughput.
LATENCY_METRICS = {
    "ttft_p50_ms": ("ttft_ms", "p50"), "ttft_p95_ms": ("ttft_ms", "p95"),
    "ttft_p99_ms": ("ttft_ms", "p99"), "tpot_p50_ms": ("tpot_ms", "p50"),
    "tpot_p95_ms": ("tpot_ms", "p95"), "tpot_p99_ms": ("tpot_ms", "p99"),
    "e2el_p50_ms": ("e2el_ms", "p50"), "e2el_p99_ms": ("e2el_ms", "p99"),
    "ttft_max_ms": ("ttft_ms", "max"), "tpot_max_ms": ("tpot_ms", "max"),
    "itl_p50_ms": ("itl_ms", "p50"), "itl_p99_ms": ("itl_ms", "p99"),
    "e2el_p95_ms": ("e2el_ms", "p95"), "e2el_max_ms": ("e2el_ms", "max"),
    "output_throughput": ("output_throughput", None),
    "request_throughput": ("request_throughput", None),
    # per-request SLO judgement (the load profile's slo): share met, and met per second
    "slo_attainment": ("slo", "attainment"), "goodput_rps": ("slo", "goodput_rps"),
}
# Headroom figures a memory gate may name (headroom.Headroom fields).
MEMORY_METRICS = ("kv_cache_tokens", "max_concurrent_sequences", "weights_bytes",
                  "peak_engine_rss_bytes", "peak_gpu_memory_bytes", "weights_loaded_bytes",
                  "device_memory_free_bytes", "device_margin")


def split_confidence(confidence: float, looks: int) -> float:
    """The level each of `looks` looks is judged at: the policy's alpha shared evenly."""
    return round(1 - (1 - confidence) / max(1, looks), 6)


class QualityGate(StrictModel):
    """Non-inferiority of the candidate on a suite, overall and per slice: the paired
    interval of (candidate - baseline) must lie above -max_drop."""

    suite: str
    metric: str = Field(default="score", description="score (the suite's per-item score), "
                        "or a per-item check: refused, schema_valid, parses, ...")
    max_drop: float = Field(ge=0, le=1, description="Largest tolerated loss, overall")
    slice_max_drop: float | None = Field(
        default=None, ge=0, le=1, description="Largest tolerated loss in any slice"
    )
    min_slice_items: int = Field(default=10, ge=1, description="Smaller slices are reported "
                                                               "as too small to decide")
    min_recovery: float | None = Field(
        default=None, gt=0, le=2, description="candidate / baseline mean, overall, at least")
    min_value: float | None = Field(
        default=None, ge=0, le=1, description="The candidate's own mean, at least (a floor, "
        "judged on its interval; the baseline is held to it too)")
    max_value: float | None = Field(
        default=None, ge=0, le=1, description="The candidate's own mean, at most (a ceiling, "
        "judged on its interval; the baseline is held to it too)")


class SuiteDefault(StrictModel):
    """The gate every suite of a kind gets when no gate of the policy names it."""

    metric: str = Field(default="score", description="The per-item score, or a check")
    max_drop: float = Field(ge=0, le=1, description="Largest tolerated loss, overall")
    slice_max_drop: float | None = Field(default=None, ge=0, le=1,
                                         description="Largest tolerated loss in any slice")
    min_slice_items: int = Field(default=10, ge=1)

    def for_suite(self, suite: str) -> QualityGate:
        return QualityGate(suite=suite, **self.model_dump())


class SuiteDefaults(StrictModel):
    """Policy-wide defaults: each suite a run measures, of these kinds, is gated like this
    unless a gate of its section names it or `ungated` lists it."""

    quality: SuiteDefault | None = None
    safety: SuiteDefault | None = None
    structured: SuiteDefault | None = None
    traffic: SuiteDefault | None = None


class Ungated(StrictModel):
    """A suite the policy chooses not to judge, and why (the record repeats the reason)."""

    suite: str
    reason: str = Field(min_length=3, description="Why it is measured but not judged")


class HealthGate(StrictModel):
    """Generation health (suites/scorers/generation_health.py) is non-inferior to the
    baseline's: on each suite that generates text, and over all their items pooled."""

    max_drop: float = Field(ge=0, le=1, description="Largest tolerated loss of the healthy "
                                                    "share, per generating suite")
    pooled_max_drop: float | None = Field(
        default=None, ge=0, le=1, description="The same over every generating suite's items "
                                              "together (more items: a tighter interval)")
    min_value: float | None = Field(default=None, ge=0, le=1,
                                    description="The candidate's own healthy share, at least")
    suites: list[str] | None = Field(default=None, description="Only these suites (default: "
                                     "every suite of the run that generates text)")


class FidelityGate(StrictModel):
    """How closely the candidate follows the baseline: token-level KL and top-1 agreement
    on a fidelity suite, agreement of greedy continuations on it, or the share of items
    whose correctness flipped on any suite."""

    suite: str
    max_kl_mean: float | None = Field(default=None, gt=0)
    min_top1_agreement: float | None = Field(default=None, gt=0, le=1)
    max_flip_rate: float | None = Field(default=None, ge=0, le=1,
                                        description="(lost + gained) / paired items")
    min_identical_share: float | None = Field(
        default=None, ge=0, le=1, description="Share of items whose greedy continuation is "
                                              "identical to the baseline's")
    min_prefix_agreement: float | None = Field(
        default=None, ge=0, le=1, description="Mean share of each greedy continuation "
                                              "generated before the first token that differs")

    @model_validator(mode="after")
    def _something(self) -> FidelityGate:
        bounds = (self.max_kl_mean, self.min_top1_agreement, self.max_flip_rate,
                  self.min_identical_share, self.min_prefix_agreement)
        if all(b is None for b in bounds):
            raise ValueError("give max_kl_mean, min_top1_agreement, max_flip_rate, "
                             "min_identical_share or min_prefix_agreement")
        return self


class SLOGate(StrictModel):
    """The candidate holds the load profile's SLO (p99 TTFT and TPOT, no error) at a level,
    and serves enough of its requests within it."""

    level: str | None = Field(default=None, description="e.g. c8 or r4; default the heaviest")
    min_attainment: float | None = Field(default=None, ge=0, le=1)
    devices: list[Literal["cpu", "cuda"]] = Field(default=["cpu", "cuda"])
    profiles: list[str] | None = Field(
        default=None, min_length=1, description="Only these load profiles of the run "
        "(default: every profile it gates; docs/load.md, 'Several load classes')")


class LatencyGate(StrictModel):
    """A candidate/baseline ratio of one load-test figure, at every load level."""

    metric: Literal[tuple(LATENCY_METRICS)]  # type: ignore[valid-type]
    max_ratio: float | None = Field(default=None, gt=0)
    min_ratio: float | None = Field(default=None, gt=0)
    devices: list[Literal["cpu", "cuda"]] = Field(
        default=["cpu", "cuda"],
        description="Devices whose measurements this gate judges",
    )
    profiles: list[str] | None = Field(
        default=None, min_length=1, description="Only these load profiles of the run "
        "(default: every profile it gates; docs/load.md, 'Several load classes')")
    informational: bool = Field(
        default=False, description="Judged and shown, not counted in the decision (for "
        "devices whose latency intervals are too wide to decide; docs/gates.md)")

    @model_validator(mode="after")
    def _one_bound(self) -> LatencyGate:
        if (self.max_ratio is None) == (self.min_ratio is None):
            raise ValueError("give exactly one of max_ratio or min_ratio")
        return self


class MemoryGate(StrictModel):
    """A candidate/baseline ratio of one memory-headroom figure: e.g. at least as many
    KV-cache tokens (min_ratio 1.0), or weights at most half the size (max_ratio 0.5)."""

    metric: Literal[MEMORY_METRICS]  # type: ignore[valid-type]
    max_ratio: float | None = Field(default=None, gt=0)
    min_ratio: float | None = Field(default=None, gt=0)
    at_endpoints: Literal["fail", "not_applicable"] = Field(
        default="fail", description="When a side is measured at an endpoint that cannot give "
        "this figure (weights on disk, peak process or GPU memory): fail closed, or judge "
        "the gate not applicable")

    @model_validator(mode="after")
    def _one_bound(self) -> MemoryGate:
        if (self.max_ratio is None) == (self.min_ratio is None):
            raise ValueError("give exactly one of max_ratio or min_ratio")
        return self


class CapacityGate(StrictModel):
    """The candidate's capacity at the SLO (the heaviest load it held, searched: the load
    profile's `capacity`) against the baseline's: e.g. min_ratio 0.85, no more than the
    search's resolution below it (docs/gates.md: 1.0 cannot pass an A/A whose brackets
    overlap)."""

    min_ratio: float = Field(gt=0, description="Lowest tolerated candidate/baseline ratio")
    devices: list[Literal["cpu", "cuda"]] = Field(default=["cpu", "cuda"])
    informational: bool = Field(default=False, description="Judged and shown, not counted")
    profiles: list[str] | None = Field(
        default=None, min_length=1, description="Only these load profiles of the run "
        "(default: every profile it gates; docs/load.md, 'Several load classes')")


SECTIONS = ("quality", "safety", "structured", "traffic")  # the paired sections, by kind

Objective = Literal["cost", "throughput", "weights", "kv_capacity"]
QualityMeasure = Literal["worst_lower_bound", "top1_agreement"]


class SweepPolicy(StrictModel):
    """How `workbench sweep` ranks candidates that passed: quality retained (the worst
    lower bound of a gated suite's paired delta) against one efficiency objective."""

    objective: Objective = Field(
        default="cost", description="cost: $ per million output tokens at the heaviest load "
        "level meeting the SLO (lower is better); throughput: output tokens/s at that level; "
        "weights: weights on disk (lower); kv_capacity: KV-cache tokens (higher)")
    quality: QualityMeasure = Field(
        default="worst_lower_bound", description="worst_lower_bound: the lowest lower bound "
        "of a gated quality/safety/structured suite's paired delta; top1_agreement: the "
        "first fidelity suite's top-1 agreement with the baseline (for policies that gate "
        "no paired suite)")


class GatePolicy(StrictModel):
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    bootstrap_resamples: int = Field(default=10000, ge=1000)
    inconclusive_blocks: bool = Field(default=True, description="An inconclusive gate makes "
                                      "the decision inconclusive (exit 1); false: it is reported "
                                      "and does not block")
    multiple_comparisons: Literal["none", "holm"] = Field(
        default="holm", description="holm: a test fails only when its one-sided p-value of "
        "'acceptable', Holm-adjusted across every paired test and floor of the policy, is "
        "below alpha, so an acceptable candidate is rejected with chance at most alpha in "
        "all; a pass needs no adjustment (every gate must pass: docs/gates.md). none: each "
        "test at alpha on its own")
    second_look: bool = Field(
        default=False, description="A candidate the profile's sample leaves inconclusive, "
        "with no gate failed and an open gate that more items could decide, is measured "
        "again on every item (profile full) and judged on them. Both looks are then judged "
        "at half the policy's alpha each (Bonferroni over two looks), so promoting a "
        "candidate worse than a margin stays at most alpha (docs/gates.md, 'Two looks')")
    second_look_max_minutes: float | None = Field(
        default=None, gt=0, description="A second look is not taken when it would take "
        "longer than this on this machine, by the first look's own rates (each suite's "
        "seconds times its items at full over its items in the sample, plus each side's "
        "engine start, load test and stop once per load round); the decision stays "
        "inconclusive and says why. Unset: no bound")
    defaults: SuiteDefaults = Field(default_factory=SuiteDefaults, description="The gate of "
                                    "every quality, safety or structured suite no gate names")
    ungated: list[Ungated] = Field(default_factory=list, description="Suites measured but "
                                   "deliberately not judged, each with its reason")
    quality: list[QualityGate] = Field(default_factory=list)
    safety: list[QualityGate] = Field(default_factory=list, description="Paired like quality, "
                                      "on safety suites (score: the right refusal behaviour)")
    structured: list[QualityGate] = Field(default_factory=list)
    traffic: list[QualityGate] = Field(default_factory=list, description=(
        "Paired like quality, on a team's own traffic: score is the answer's chrF against "
        "the baseline's answer (the baseline's own is 1); or a per-item check: "
        "agreement_exact, length_kept, healthy, schema_valid (docs/traffic.md)"))
    health: HealthGate | None = Field(default=None, description="Generation health of every "
                                      "suite that generates text, paired with the baseline")
    fidelity: list[FidelityGate] = Field(default_factory=list)
    latency: list[LatencyGate] = Field(default_factory=list)
    slo: list[SLOGate] = Field(default_factory=list)
    memory: list[MemoryGate] = Field(default_factory=list)
    capacity: list[CapacityGate] = Field(default_factory=list, description="Capacity at the "
                                         "SLO, candidate/baseline (needs a load profile with "
                                         "capacity)")
    sweep: SweepPolicy = Field(default_factory=SweepPolicy,
                               description="How a sweep ranks the candidates that passed")

    def paired(self, measured: Mapping[str, str] | None = None) -> list[tuple[str, QualityGate]]:
        """Every paired non-inferiority gate with its section name: those the policy
        names, then, given the suites a run measured (name -> kind), the default gate of
        each suite of a defaulted kind that no gate names and `ungated` does not list."""
        named = [(section, g) for section in SECTIONS for g in getattr(self, section)]
        return named + [(kind, rule.for_suite(suite))
                        for suite, kind, rule in self.defaulted(measured or {})]

    def defaulted(self, measured: Mapping[str, str]) -> list[tuple[str, str, SuiteDefault]]:
        """(suite, kind, default) for each measured suite the defaults gate."""
        named = {g.suite for section in SECTIONS for g in getattr(self, section)} \
            | {u.suite for u in self.ungated}
        out = []
        for suite, kind in sorted(measured.items()):
            rule = getattr(self.defaults, kind, None) if kind in SECTIONS else None
            if rule is not None and suite not in named:
                out.append((suite, kind, rule))
        return out

    def gated_by(self, measured: Mapping[str, str]) -> dict[str, str]:
        """How each measured suite is judged, in words (validate and the record say it)."""
        out = {}
        defaulted = {s for s, _, _ in self.defaulted(measured)}
        ungated = {u.suite: u.reason for u in self.ungated}
        fidelity = {g.suite for g in self.fidelity}
        for suite, kind in sorted(measured.items()):
            gates = [f"{sec} gate (max_drop {g.max_drop})" for sec, g in self.paired()
                     if g.suite == suite]
            if suite in defaulted:
                gates.append(f"the policy's {kind} default")
            if suite in fidelity:
                gates.append("fidelity gate")
            if suite in ungated:
                out[suite] = f"ungated: {ungated[suite]}"
            elif gates:
                out[suite] = ", ".join(gates)
            elif kind in SECTIONS:
                out[suite] = ("not gated: no gate names it and the policy sets no "
                              f"defaults.{kind}")
            else:
                out[suite] = f"not gated: no {kind} gate names it"
        return out

    def for_look(self, looks: int) -> GatePolicy:
        """This policy as each of `looks` looks at the data judges: alpha split evenly
        between them (Bonferroni), so the confidence of every interval rises."""
        if looks <= 1:
            return self
        return self.model_copy(update={"confidence": split_confidence(self.confidence,
                                                                      looks)})

    def unknown_profiles(self, known: Mapping[str, object]) -> list[tuple[str, str]]:
        """(where, name) of each load profile a load gate's `profiles` names that is not
        in `known` (one known but not gated in a run leaves the gate not applicable)."""
        named = [*((f"latency[{i}].profiles", g.profiles) for i, g in enumerate(self.latency)),
                 *((f"slo[{i}].profiles", g.profiles) for i, g in enumerate(self.slo)),
                 *((f"capacity[{i}].profiles", g.profiles)
                   for i, g in enumerate(self.capacity))]
        return [(where, name) for where, profiles in named for name in profiles or []
                if name not in known]

    def judges_something(self) -> bool:
        defaults = any(getattr(self.defaults, k) is not None for k in SECTIONS)
        return bool(self.paired() or defaults or self.fidelity or self.latency or self.slo
                    or self.memory or self.health)


def load_gate_policy(path: Path) -> GatePolicy:
    """The policy, refusing one that would judge nothing: an empty file, a list, no gates
    (a run judged by no gate would end "0 gates judged")."""
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else type(raw).__name__
        raise InputError(f"{path}: expected a mapping of gate sections (quality, safety, "
                         f"latency, ...), got {got}")
    try:
        policy = GatePolicy.model_validate(raw)
    except ValidationError as err:
        problems = format_validation_error(path, err, GatePolicy)
        raise InputError(problems[0], problems) from None
    if not policy.judges_something():
        raise InputError(f"{path}: declares no gate (give at least one of quality, safety, "
                         "structured, traffic, health, fidelity, latency, slo, memory)")
    return policy
