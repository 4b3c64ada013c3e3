"""The record's Rollout section: the twelve things a serving decision states, each filled
from what the run measured or configured, from the config's `rollout:` section where only
the team knows it, or "not declared" (docs/rollout.md). Built from the record itself, once,
when the record is built; decision.md shows it first among the details."""

from __future__ import annotations

import math

from workbench.config.rollout import RolloutConfig
from workbench.record.canary import CANARY_FILE, canary_rules
from workbench.record.decision import DecisionRecord, Role
from workbench.record.sections import (
    PREVIOUS_CHAMPION,
    ReplicaShape,
    RolloutField,
    RolloutSection,
)

__all__ = ["FIELDS", "NOT_DECLARED", "rollout_rejudged", "rollout_section"]

NOT_DECLARED = "not declared"
FIELDS = ("workload", "quality_threshold", "model_and_precision", "device_and_replicas",
          "batching", "cache", "routing_and_fallback", "slo", "cost_formula", "security",
          "telemetry", "rollback_trigger")


def _field(text: str, source: str) -> RolloutField:
    return {"text": text, "source": source}


def _declared(value: str | None, what: str = "") -> RolloutField:
    return _field(f"{what}{value}", "declared") if value else _field(NOT_DECLARED, NOT_DECLARED)


def _lengths(dist: dict) -> str:
    if dist.get("value") is not None:
        return f"{dist['value']}"
    return f"{dist.get('distribution', '?')} {dist.get('min', '?')}–{dist.get('max', '?')}"


def _workload(rec: DecisionRecord) -> RolloutField:
    load = rec.load.get("candidate") or {}
    if not load.get("profile"):
        return _field("no load test ran", "measured")
    further = [f.get("load", {}).get("candidate") or {} for f in rec.further_load.values()]
    return _field("; ".join(_one_workload(lr) for lr in [load, *further]), "config")


def _one_workload(load: dict) -> str:
    prof = load.get("profile") or {}
    how = (f"arrivals at {prof['request_rate']} requests/s" if prof.get("request_rate")
           else f"{prof.get('concurrency')} requests in flight")
    return (f"load profile `{load.get('name', '?')}`: {how}, prompts "
            f"{_lengths(prof.get('prompt_tokens') or {})} tokens, outputs "
            f"{_lengths(prof.get('output_tokens') or {})} tokens, "
            f"{prof.get('num_prompts')} requests a level")


def _quality(rec: DecisionRecord) -> RolloutField:
    pol = rec.policy
    counted = sum(1 for g in rec.gates if not g.informational and g.status != "not_applicable")
    return _field(f"gate policy {pol.get('path')} (sha256 {str(pol.get('sha256', ''))[:12]}): "
                  f"{counted} counted gates, two-sided confidence {pol.get('confidence')}, "
                  f"{pol.get('multiple_comparisons')} across the fails; "
                  f"decision {rec.decision}", "config")


def _precision(rec: DecisionRecord) -> RolloutField:
    q = rec.quantization
    fmt = (q.get("served_format") or q.get("format") or {}).get("label", "?")
    recipe = (q.get("recipe") or {}).get("recipe", q.get("source", "?"))
    text = (f"`{rec.model.get('name')}` → `{rec.candidate}`: {fmt} (recipe {recipe}), served "
            f"in {rec.device.get('serve_dtype', '?')}")
    if rec.stand_in:
        text += f"; a stand-in for {rec.stand_in['requested_format']} on this device"
    if rec.served_dense:
        text += (f"; its weights served dequantised here (no {fmt} kernel on this device): "
                 "its speed and memory are not measured")
    return _field(text, "measured")


def _capacity_rps(load: dict) -> float | None:
    cap = load.get("capacity") or {}
    if cap.get("held") is None:
        return None
    served = cap.get("request_throughput")
    return float(served) if served else (float(cap["held"]) if cap.get("knob") ==
                                         "request_rate" else None)


def _replicas(rec: DecisionRecord, role: Role, peak: float | None) -> ReplicaShape:
    cost: dict = dict(rec.cost.get(role) or {})
    devices = int(cost.get("devices", 1))
    rps = _capacity_rps(dict(rec.load.get(role) or {}))
    shape: ReplicaShape = {"devices_per_replica": devices, "capacity_rps": rps,
                           "replicas": None, "fleet_price_per_hour": None, "why": ""}
    if peak is None:
        shape["why"] = "no peak traffic declared (rollout.peak_requests_per_s)"
    elif rps is None:
        shape["why"] = ("no capacity at the SLO measured: the load profile runs fixed levels "
                        "(`--load-profile capacity` searches the rate that holds it)")
    else:
        replicas = math.ceil(peak / rps)
        price = float(cost.get("price_per_hour", 0.0))
        shape["replicas"], shape["fleet_price_per_hour"] = replicas, round(replicas * price, 4)
        shape["why"] = (f"ceil({peak:g} / {rps:.3g} requests/s a replica held within the SLO) "
                        f"= {replicas}, × {devices} device(s) × "
                        f"${cost.get('price_per_device_hour', price):g}/h")
    return shape


def _device(rec: DecisionRecord, shapes: dict[str, ReplicaShape], peak: float | None
            ) -> RolloutField:
    dev = rec.device
    gpus: dict = dict(dev.get("gpus") or {})
    where = ", ".join(sorted({g["name"] for g in gpus.get("gpus", [])})) if gpus else \
        f"{dev.get('cpu', 'CPU')} ({dev.get('cpu_count')} cores)"
    cand = shapes["candidate"]
    text = f"{dev.get('kind')}: {where}; {cand['devices_per_replica']} device(s) a replica"
    if cand["replicas"] is not None:
        base = shapes["baseline"]["replicas"]
        text += (f"; for {peak:g} requests/s at peak: {cand['replicas']} replicas of the "
                 f"candidate" + (f" against {base} of the baseline" if base else ""))
        return _field(text, "measured")
    return _field(f"{text}; replicas: {cand['why']}", "measured")


def _batching(rec: DecisionRecord) -> RolloutField:
    b = dict(rec.engine.get("batching") or {}).get("candidate")
    in_flight = f"; suites at {rec.device.get('suite_in_flight')} requests in flight"
    if not b:
        return _field("not recorded (an endpoint, or measured before the engine's batch was "
                      "recorded)" + in_flight, "measured")
    chunked = {True: "on", False: "off", None: "not stated"}[b["chunked_prefill"]]
    return _field(f"max_num_seqs {b['max_num_seqs']}, max_num_batched_tokens "
                  f"{b['max_num_batched_tokens']}, chunked prefill {chunked}" + in_flight,
                  "measured")


def _cache(rec: DecisionRecord) -> RolloutField:
    room = rec.headroom.get("candidate") or {}
    b: dict = dict(dict(rec.engine.get("batching") or {}).get("candidate") or {})
    flag = b.get("prefix_caching")
    prefix = "not stated" if flag is None else ("on" if flag else "off")
    tokens = room.get("kv_cache_tokens")
    size = f"{tokens:,} tokens" if tokens else "size not measured"
    return _field(f"prefix caching {prefix}; KV cache {room.get('kv_cache_dtype', '?')}, "
                  f"{size}", "measured")


def _slo(rec: DecisionRecord) -> RolloutField:
    load = rec.load.get("candidate") or {}
    slo = (load.get("profile") or {}).get("slo") or {}
    if not slo:
        return _field("the load profile declares none", "config")
    met = [lv for lv in load.get("levels") or [] if (lv.get("slo") or {}).get("meets_slo")]
    held = (f"the candidate met it up to level {met[-1].get('label')}" if met
            else "the candidate met it at no level measured")
    return _field(f"p99 TTFT ≤ {slo['ttft_p99_ms']:g} ms, p99 TPOT ≤ {slo['tpot_p99_ms']:g} ms; "
                  f"{held}", "config")


def _cost_formula(rec: DecisionRecord) -> RolloutField:
    cost: dict = dict(rec.cost.get("candidate") or {})
    price, devices = cost.get("price_per_device_hour"), cost.get("devices", 1)
    formula = ("USD per million accepted output tokens = price per device-hour × devices ÷ "
               "3600 ÷ accepted output tokens per second × 10^6 (accepted: tokens of "
               "requests that met the SLO)")
    level = next((lv for lv in (rec.load.get("candidate") or {}).get("levels") or []
                  if lv.get("label") == cost.get("level")), None)
    good = ((level or {}).get("slo") or {}).get("good_output_throughput")
    value = cost.get("usd_per_million_accepted_tokens")
    if level is None or good is None or value is None:
        return _field(f"{formula}; not computed: no level met the SLO with accepted tokens "
                      f"recorded", "measured")
    return _field(f"{formula} = {price:g} × {devices} ÷ 3600 ÷ {good:g} × 10^6 = "
                  f"${value:g} at level {cost.get('level')} ({cost.get('price_source')})",
                  "measured")


def _trigger(rec: DecisionRecord, declared: RolloutConfig) -> RolloutField:
    rules = canary_rules(rec)
    pages = sum(r.severity == "page" for r in rules)
    text = (f"{CANARY_FILE}: {len(rules)} Prometheus rules over vLLM's metrics, {pages} that "
            f"page; roll back to the registry's `{PREVIOUS_CHAMPION}`")
    if declared.recovery_objective:
        text += f"; recovery objective: {declared.recovery_objective}"
    return _field(text, "declared" if declared.recovery_objective else "measured")


def rollout_section(rec: DecisionRecord, declared: RolloutConfig) -> RolloutSection:
    peak = declared.peak_requests_per_s
    roles: tuple[Role, Role] = ("baseline", "candidate")
    shapes: dict[str, ReplicaShape] = {role: _replicas(rec, role, peak) for role in roles}
    routing = "; ".join(f"{k}: {v}" for k, v in (("routing", declared.routing),
                                                ("fallback", declared.fallback)) if v)
    fields = {
        "workload": _workload(rec), "quality_threshold": _quality(rec),
        "model_and_precision": _precision(rec),
        "device_and_replicas": _device(rec, shapes, peak), "batching": _batching(rec),
        "cache": _cache(rec), "routing_and_fallback": _declared(routing or None),
        "slo": _slo(rec), "cost_formula": _cost_formula(rec),
        "security": _declared("; ".join(declared.security) or None),
        "telemetry": _declared(declared.telemetry),
        "rollback_trigger": _trigger(rec, declared)}
    return {"fields": fields, "replicas": shapes, "declared": declared.model_dump()}


def rollout_rejudged(rec: DecisionRecord) -> RolloutSection | None:
    """The section of a record whose gates were judged again (`workbench gate`): rebuilt
    from the record and what the team declared then; None for a record that had none."""
    if not rec.rollout:
        return None
    return rollout_section(rec, RolloutConfig(**rec.rollout.get("declared", {})))
