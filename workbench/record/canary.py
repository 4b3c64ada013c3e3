"""The rollback trigger as alerting rules a canary can run: `canary-rules.yaml`, a
Prometheus rules file over vLLM's own metrics, every threshold taken from what this run
declared (the load profile's SLO, the latency gates' margins) or measured (the baseline's
latency under the load test, the candidate's KV-cache use and preemptions there).
docs/rollout.md, "The rollback trigger", says what each rule watches and why.

Metric names are the ones the workbench reads from the engine it measured
(loadtest/engine_metrics.py and telemetry.py, vLLM's /metrics): a counter is exposed with
`_total`, a histogram's buckets with `_bucket`, as prometheus_client renders them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from workbench.config.gate_policy import LATENCY_METRICS
from workbench.gate.evidence import GateOutcome
from workbench.loadtest.engine_metrics import HISTOGRAMS
from workbench.record.decision import DecisionRecord

__all__ = ["CANARY_FILE", "Rule", "canary_rules", "render_rules", "write_canary_rules"]

CANARY_FILE = "canary-rules.yaml"
WINDOW = "5m"  # rates over five minutes: a canary's traffic is thin, a shorter one is noise
HOLD = "5m"  # a condition must last this long before it fires
# vLLM's request_success counter by finished_reason: "error" is a request-level internal
# error, always answered 500 (vllm/v1/engine/__init__.py, FinishReason); an "abort" is the
# client going away, which a canary cannot blame on the model
ERROR_REASON = "error"
ERROR_RATIO = 0.01  # no load test failed a request it counts: 1% is an allowance, not a figure
_HISTOGRAM_OF = {ours: theirs for theirs, ours in HISTOGRAMS.items()}


@dataclass(frozen=True)
class Rule:
    """One alerting rule and where its threshold came from (written above it as a comment,
    and as its `threshold_source` annotation)."""

    alert: str
    expr: str
    severity: str  # page | ticket
    summary: str
    source: str

    def to_dict(self, labels: dict[str, str]) -> dict:
        return {"alert": self.alert, "expr": self.expr, "for": HOLD,
                "labels": {"severity": self.severity, **labels},
                "annotations": {"summary": self.summary, "threshold_source": self.source}}


def _selector(served_name: str, extra: str = "") -> str:
    return "{" + ",".join(p for p in (f'model_name="{served_name}"', extra) if p) + "}"


def _quantile_expr(histogram: str, quantile: float, served_name: str) -> str:
    return (f"histogram_quantile({quantile:g}, sum by (le) (rate({histogram}_bucket"
            f"{_selector(served_name)}[{WINDOW}])))")


def _served_name(rec: DecisionRecord) -> str:
    command = rec.engine.get("candidate_command") or []
    if "--served-model-name" in command[:-1]:
        return command[command.index("--served-model-name") + 1]
    endpoint = rec.endpoints.get("candidate")
    return (endpoint["model"] if endpoint else "") or rec.candidate


def _slo_rules(rec: DecisionRecord, served: str) -> list[Rule]:
    load = rec.load.get("candidate") or {}
    slo = (load.get("profile") or {}).get("slo") or {}
    rules = []
    for key, field, what in (("ttft_p99_ms", "ttft_ms", "time to first token"),
                             ("tpot_p99_ms", "tpot_ms", "time per output token")):
        if slo.get(key) is None:
            continue
        name = "Ttft" if field == "ttft_ms" else "Tpot"
        rules.append(Rule(
            f"Canary{name}P99AboveSlo",
            f"{_quantile_expr(_HISTOGRAM_OF[field], 0.99, served)} > {slo[key] / 1000:g}",
            "page", f"p99 {what} of {served} is above the SLO of {slo[key]:g} ms",
            f"the load profile `{load.get('name', '?')}`'s SLO {key}: {slo[key]:g} ms"))
    return rules


def _baseline_rules(rec: DecisionRecord, served: str) -> list[Rule]:
    """A rule per latency metric a max_ratio gate judged with evidence: the baseline's
    measured value at the heaviest level judged, times the gate's margin."""
    heaviest: dict[str, GateOutcome] = {}
    own = (rec.load.get("candidate") or {}).get("name")
    for gate in rec.gates:  # in the policy's order, levels lightest first
        gid = gate.id
        if gid is None or gid.section != "latency" or gid.check != "max_ratio" \
                or "baseline" not in gate.evidence or gate.threshold is None \
                or gid.profile not in (None, own):  # the run's own profile's gates only
            continue
        field, stat = LATENCY_METRICS.get(gid.subject, (None, None))
        if field in _HISTOGRAM_OF and stat and stat.startswith("p"):
            heaviest[gid.subject] = gate
    return [_above_baseline(subject, gate, served) for subject, gate in heaviest.items()]


def _above_baseline(subject: str, gate: GateOutcome, served: str) -> Rule:
    field, stat = LATENCY_METRICS[subject]
    margin = gate.threshold or 1.0
    baseline_ms = float(gate.evidence["baseline"])
    limit_ms = baseline_ms * margin
    quantile = int(str(stat)[1:]) / 100
    words = "".join(part.capitalize() for part in subject.removesuffix("_ms").split("_"))
    return Rule(
        f"Canary{words}AboveBaseline",
        f"{_quantile_expr(_HISTOGRAM_OF[field], quantile, served)} > {limit_ms / 1000:.4g}",
        "page", f"{subject} of {served} is above {limit_ms:.0f} ms, the baseline's "
        f"{baseline_ms:.0f} ms times the gate's {margin:g}",
        f"gate {gate.gate}: the baseline measured {baseline_ms:.1f} ms in this run's load "
        f"test, and the policy allows {margin:g} times that")


def _error_rule(rec: DecisionRecord, served: str) -> Rule:
    load = rec.load.get("candidate") or {}
    levels = load.get("levels") or []
    failed = sum(level.get("failed", 0) for level in levels)
    done = sum(level.get("completed", 0) for level in levels)
    counter = "vllm:request_success_total"
    errors = _selector(served, f'finished_reason="{ERROR_REASON}"')
    return Rule(
        "CanaryRequestErrors",
        f"sum(rate({counter}{errors}[{WINDOW}])) / sum(rate({counter}{_selector(served)}"
        f"[{WINDOW}])) > {ERROR_RATIO:g}",
        "page", f"more than {ERROR_RATIO:.0%} of {served}'s requests end in an engine error",
        (f"the load test: {failed} of {failed + done} requests failed; " if failed + done
         else "no load test ran; ") + f"{ERROR_RATIO:.0%} is the workbench's allowance")


def _capacity_rules(rec: DecisionRecord, served: str) -> list[Rule]:
    room = rec.headroom.get("candidate") or {}
    rules = []
    peak = room.get("peak_kv_cache_usage")
    if peak is not None:
        rules.append(Rule(
            "CanaryKvCacheAboveTested",
            f"max_over_time(vllm:kv_cache_usage_perc{_selector(served)}[{WINDOW}]) > "
            f"{peak:.4g}",
            "ticket", f"{served}'s KV cache is fuller than the load test ever saw it "
            f"({peak:.1%}): traffic beyond what this decision measured",
            f"the candidate's peak KV-cache use under the load test: {peak:.4g}"))
    preemptions = room.get("preemptions")
    if preemptions is not None:
        rules.append(Rule(
            "CanaryPreemptions",
            f"increase(vllm:num_preemptions_total{_selector(served)}[{WINDOW}]) > "
            f"{preemptions:g}",
            "ticket", f"{served} preempts requests (the load test saw {preemptions:g})",
            f"the candidate's preemptions under the load test: {preemptions:g}"))
    return rules


def canary_rules(rec: DecisionRecord) -> list[Rule]:
    """Every rule this record supports; none that would need a figure it lacks."""
    served = _served_name(rec)
    return [*_slo_rules(rec, served), *_baseline_rules(rec, served), _error_rule(rec, served),
            *_capacity_rules(rec, served)]


def render_rules(rec: DecisionRecord, rules: list[Rule]) -> str:
    """The rules file: one group, each rule under a comment saying where its threshold
    came from."""
    labels = {"candidate": rec.candidate, "model": str(rec.model.get("name", ""))}
    lines = [f"# Rollback trigger for a canary of `{rec.candidate}` ({rec.model.get('name')}),",
             f"# written by quant-workbench from {rec.run_dir} (decision: {rec.decision}),",
             f"# over the metrics of vLLM {rec.engine.get('version', '?')}; series selected by "
             f"the candidate's served model name.",
             f"# Latency thresholds hold for the device measured ({rec.device.get('kind')}).",
             "# Check: promtool check rules canary-rules.yaml (docs/rollout.md).",
             "groups:", f"  - name: quant-workbench-canary-{rec.candidate}", "    rules:"]
    for rule in rules:
        body = yaml.safe_dump([rule.to_dict(labels)], sort_keys=False, width=1000)
        lines += [f"      # {rule.source}"]
        lines += ["      " + line for line in body.rstrip("\n").splitlines()]
    return "\n".join(lines) + "\n"


def write_canary_rules(run_dir: Path, rec: DecisionRecord) -> Path:
    path = run_dir / CANARY_FILE
    path.write_text(render_rules(rec, canary_rules(rec)))
    return path
