"""Record stage: the decision record (JSON for machines, Markdown for people)."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from typing import Literal

from typing_extensions import TypedDict

from workbench.gate.comparability import ComparabilitySection
from workbench.gate.evidence import GateOutcome
from workbench.gate.verdict import PolicySection
from workbench.measure.pair import Role
from workbench.mechanisms.errors import EXIT_PROMOTE, EXIT_REJECT
from workbench.mechanisms.host import cpu_model, cpu_vector_isa, native_bf16
from workbench.record.sections import (
    CostSection,
    DeviceSection,
    EarlyStopJson,
    EndpointSection,
    EngineSection,
    FidelityJson,
    HeadroomJson,
    JudgeJson,
    LoadJson,
    MlflowSection,
    ModelSection,
    QuantizationSection,
    RolloutSection,
    ServedDenseJson,
    StandInJson,
    SuitePair,
)
from workbench.serve.device import CPU_IN_FLIGHT
from workbench.suites.split import SplitJson

__all__ = ["SCHEMA_VERSION", "SEVERITY", "DecisionRecord", "FurtherLoad", "Role", "Sampling",
           "counted", "gate_counts", "host_facts", "quantization_metrics", "record_metrics",
           "worst_first"]

# 16: on a CPU, the engine session the suites computed in (device.suite_binding);
# 15: the judge model that read a traffic suite's answers, and by which rubric (judge);
# 14: a candidate served as its weights dequantised where the device has no kernel for its
# format (served_dense; its speed and memory gates not_measured, with the reason);
# 13: a candidate stopped early (early_stop; the gates it left out are not_measured);
# 12: the Rollout section (twelve fields, each model's fleet for a declared peak), the
# engine's batch, the cost per accepted token, the registry's champion before this run (a
# promotion's rollback target), further load profiles gated in the same run (further_load;
# their gates name the profile: GateId.profile);
# 11: the dtype the engine served in (`auto` resolved per device) and whether the CPU has
# native bf16, the quantiser's compute and stored dtypes, the stand-in format evaluated in
# place of one this device has no kernel for;
# 10: the device's GPUs, the suites' requests in flight and batch-invariant kernels; each
# side's headroom on a GPU (its own processes' memory, what is left of the device) and
# KV figures the engine may leave unreported (null);
# 9: each load level's engine telemetry series and over-saturation verdict;
# 8: sampling.split, the half of the items a tune trial or confirmation was judged on;
# 7: the policy's looks (a second look at every item, each look at its share of alpha);
# 6: absolute gates judged on intervals and on the baseline (baseline_status), informational
# gates, the policy's coverage and baseline misses, comparability; 5: each gate names itself
# by its parts (id), not only as text; 4: endpoints, hub commit, per-device cost,
# unmeasurable figures null; 3: every section typed below the top level; 2: policy, plots,
# kernels. record/migrate.py reads every one of them.
SCHEMA_VERSION = 16


class Sampling(TypedDict):
    temperature: float
    api: str
    seed: int
    profile: str
    max_tokens: dict[str, int]  # generating suite -> its max_tokens
    guided_decoding: str
    # judged on one half of every suite's items (a tune trial's search half, or the chosen
    # trial's confirmation half: suites/split.py); None: every item of the sample
    split: SplitJson | None



class FurtherLoad(TypedDict):
    """A further load profile the run gated (load.also): each side's load and cost, as
    `load` and `cost` hold them for the run's own profile."""

    load: dict[Role, LoadJson]
    cost: dict[Role, CostSection]


@dataclass
class DecisionRecord:
    """The decision and all its evidence. Every section is typed (sections.py), so the
    published schema describes the record to its leaves; a section still holds plain
    JSON, which is what the renderers, CI scripts and stored records read."""

    decision: Literal["promote", "reject", "inconclusive"]
    candidate: str
    model: ModelSection
    device: DeviceSection
    gates: list[GateOutcome]
    suites: dict[str, SuitePair]
    load: dict[Role, LoadJson]
    engine: EngineSection
    quantization: QuantizationSection
    data_digests: dict[str, str]  # suite -> sha256 of its data
    seeds: dict[str, int]
    library_versions: dict[str, str]
    run_dir: str
    created_at: str
    fidelity: dict[str, FidelityJson] = field(default_factory=dict)
    sampling: Sampling = field(default_factory=lambda: Sampling())  # type: ignore[typeddict-item]
    headroom: dict[Role, HeadroomJson] = field(default_factory=dict)
    cost: dict[Role, CostSection] = field(default_factory=dict)
    reused: dict[str, bool] = field(default_factory=dict)  # what came from caches
    plots: dict[str, str] = field(default_factory=dict)  # title -> PNG path in the run folder
    policy: PolicySection = field(default_factory=lambda: PolicySection())  # type: ignore[typeddict-item]
    mlflow: MlflowSection = field(default_factory=lambda: MlflowSection())
    endpoints: dict[Role, EndpointSection] = field(default_factory=dict)  # sides not served here
    comparability: ComparabilitySection = field(default_factory=lambda: ComparabilitySection(
        checks=[], prefix_cache_at_start={}, candidate_args=[]))
    # 11-13: the format evaluated in place of the candidate's own, where this device had
    # no kernel for it (since 14 such a candidate is served dense); None: as declared
    stand_in: StandInJson | None = None
    # 12: the twelve things a rollout goes by (record/rollout.py); None in older records
    rollout: RolloutSection | None = None
    # 12: each further load profile the run gated, by name (load.also); the run's own is
    # `load` and `cost`
    further_load: dict[str, FurtherLoad] = field(default_factory=dict)
    # 13: why the candidate was measured no further, when a gate failed past doubt
    # before its plan was done (gate/early.py); None: measured in full
    early_stop: EarlyStopJson | None = None
    # 14: the candidate's weights served dequantised, where this device has no kernel for
    # its format; None: served as it is
    served_dense: ServedDenseJson | None = None
    # 15: the judge model of the traffic suites, where the config declared one
    judge: JudgeJson | None = None
    schema_version: int = SCHEMA_VERSION
    # the schema versions a stored record was migrated through before it was judged again
    migrated_from: list[int] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_PROMOTE if self.decision == "promote" else EXIT_REJECT

    def to_dict(self) -> dict:
        return {**asdict(self), "exit_code": self.exit_code}


SEVERITY = {"fail": 0, "inconclusive": 1, "not_measured": 2, "pass": 3, "not_applicable": 4}


def worst_first(gates: list[GateOutcome]) -> list[GateOutcome]:
    return sorted(gates, key=lambda g: SEVERITY[g.status])


def host_facts(device: str, facts: dict, here: bool = True) -> dict:
    """The host, and the device facts the candidate's engine ran with (ServerInfo's); here:
    that engine ran on this host (not at an endpoint, whose cores are not the run's)."""
    return {"kind": device, "cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "vector_isa": cpu_vector_isa(), "platform": platform.platform(),
            "python": platform.python_version(), "gpus": facts.get("gpus"),
            "suite_in_flight": facts.get("suite_in_flight", CPU_IN_FLIGHT),
            "batch_invariant": facts.get("batch_invariant_why", "off"),
            "serve_dtype": facts.get("serve_dtype", "bfloat16"), "native_bf16": native_bf16(),
            **({"suite_binding": facts.get("binding", "vllm")}
               if device == "cpu" and here else {})}


def record_metrics(rec: DecisionRecord) -> dict[str, float]:
    """The record's own figures flattened for MLflow: the decision, the artifact, cost,
    token-level fidelity and each quality delta (the models' measurements add theirs)."""
    out: dict[str, float] = {"decision_code": rec.exit_code}
    looks = rec.policy.get("looks")
    if looks:  # a column in the runs table: which decisions took a second look
        out["looks"] = looks["taken"]
    out.update(quantization_metrics(rec.quantization))
    costs = [("", rec.cost), *((f"{name}.", f["cost"]) for name, f in rec.further_load.items())]
    for profile, cost in costs:
        for role, c in cost.items():
            out.update({f"{role}.{profile}cost.{k}": float(v) for k, v in c.items()
                        if k.startswith("usd_") and isinstance(v, (int, float))})
    for name, f in rec.fidelity.items():
        for k in ("kl_mean", "kl_p95", "top1_agreement"):
            out[f"fidelity.{name}.{k}"] = f[k]
        for k in ("identical_share", "prefix_agreement", "first_divergence_p50"):
            if k in f.get("agreement", {}):
                out[f"fidelity.{name}.{k}"] = f["agreement"][k]
    for g in rec.gates:
        gate = g.identity
        if g.value is not None and gate.section == "quality":
            name = ".".join(p for p in (gate.subject, gate.metric, gate.slice) if p)
            out[f"delta.{name}" + (f":{gate.check}" if gate.check else "")] = g.value
    return out


def quantization_metrics(manifest: QuantizationSection | dict) -> dict[str, float]:
    fid = manifest.get("fidelity") or {}
    figures = {"quantize.size_mb": manifest.get("size_bytes", 0) / 1e6,
               "quantize.compression_ratio": manifest.get("compression_ratio"),
               "quantize.wall_time_s": manifest.get("wall_time_s"),
               "quantize.peak_rss_mb": manifest.get("peak_rss_mb"),
               "quantize.heldout_ppl_baseline": fid.get("baseline_perplexity"),
               "quantize.heldout_ppl_candidate": fid.get("candidate_perplexity"),
               "quantize.heldout_ppl_ratio": fid.get("perplexity_ratio")}
    return {k: float(v) for k, v in figures.items() if v is not None}


def counted(gates: list[GateOutcome]) -> list[GateOutcome]:
    """The gates the decision counts: all but the informational ones."""
    return [g for g in gates if not g.informational]


def gate_counts(rec: DecisionRecord) -> str:
    """"20 pass, 8 fail, 1 inconclusive": a tag, a summary line (informational gates
    counted apart)."""
    counts = {s: sum(g.status == s for g in counted(rec.gates))
              for s in ("pass", "fail", "inconclusive", "not_measured", "not_applicable")}
    shown = [f"{n} {s}" for s, n in counts.items() if n]
    informational = len(rec.gates) - len(counted(rec.gates))
    return ", ".join(shown + ([f"{informational} informational"] if informational else []))


