"""The load section of decision.md: the levels on both boundaries, their agreement, the
generator's ceiling, the engine's state and over-saturation, the capacity at the SLO, the
SLO table and the cost (render.py places it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.record.decision import DecisionRecord

__all__ = ["further_load_lines", "load_lines", "slo_lines"]


def slo_lines(rec: DecisionRecord) -> list[str]:
    """Goodput per level and the cost at the highest level meeting the SLO."""
    return _slo_lines(rec.load, rec.cost)


def _slo_lines(loads: Mapping[Any, Any], cost: Mapping[Any, Any]) -> list[str]:
    lines = []
    rows = [(who, lv) for who, lv in _levels(loads) if lv.get("slo")]
    if rows:
        slo = rows[0][1]["slo"]
        lines += ["", f"SLO: TTFT p99 ≤ {slo['ttft_p99_ms']:.0f} ms, TPOT p99 ≤ "
                  f"{slo['tpot_p99_ms']:.0f} ms.", "",
                  "| model | level | meets SLO | goodput req/s | attainment |",
                  "|---|---|---|---|---|"]
        lines += [f"| {who} | {_level_name(lv)} | {'yes' if lv['slo']['meets_slo'] else 'no'}"
                  f" | {lv['slo']['goodput_rps']:.3f} | {lv['slo']['attainment']:.2f} |"
                  for who, lv in rows]
    for who, c in cost.items():
        if c.get("level", c.get("concurrency")) is None:
            lines.append(f"\nCost ({who}): no load level met the SLO.")
            continue
        lines.append(f"\nCost ({who}, level {c.get('level') or c['concurrency']}, "
                     f"${c['price_per_hour']:.2f}/h, {c.get('price_source', '')}): "
                     f"${c['usd_per_million_output_tokens']:.2f} per million output tokens"
                     + (f", ${c['usd_per_good_request']:.5f} per request served within the "
                        f"SLO." if c.get("usd_per_good_request") else "."))
        at = c.get("at_capacity")
        if at:
            lines.append(f"At its capacity ({who}, {at['held']:g} "
                         f"{'req/s' if at['knob'] == 'request_rate' else 'in flight'}): "
                         f"${at['usd_per_million_output_tokens']:.2f} per million output "
                         "tokens.")
    return lines


def _levels(loads: Mapping[Any, Any]) -> list[tuple[str, dict]]:
    """(model, level) for every level of the baseline, then of the candidate."""
    return [(who, lv) for who in ("baseline", "candidate")
            for lv in loads.get(who, {}).get("levels", [])]


def _stats(stats: dict | None, keys: tuple[str, ...] = ("p50", "p99")) -> str:
    if not stats:
        return "–"
    return " / ".join(f"{stats[k]:.1f}" if k in stats else "–" for k in keys)


def _level_name(lv: dict) -> str:
    return lv.get("label") or f"c{lv['concurrency']}"


def _workload_line(load: dict) -> str:
    w = load.get("workload", {})
    if not w:
        return ""
    prefix = (f", a shared prefix of {w['shared_prefix_tokens']} tokens"
              if w.get("shared_prefix_tokens") else "")
    mode = {"concurrency": "closed loop, levels = requests in flight",
            "rate": "open loop, levels = arrivals per second",
            "trace": "trace replay, levels = speed-up"}.get(w.get("mode", ""), w.get("mode", ""))
    if w.get("conversations"):
        mode = (f"multi-turn chat, levels = conversations in flight: {w['conversations']} "
                f"conversations of {w['turns']} turns, {w['think_time_s']:g} s mean pause "
                "between turns")
    return (f"Workload `{load.get('name', '')}` ({mode}): {w['requests_per_level']} requests "
            f"per level, prompt tokens mean {w['prompt_tokens']['mean']:.0f} (max "
            f"{w['prompt_tokens']['max']}), output tokens mean {w['output_tokens']['mean']:.0f} "
            f"(max {w['output_tokens']['max']}){prefix}; {w.get('warmup_requests', 0)} warm-up "
            "requests before the first level, in no figure.")


def _agreement_line(levels: list[tuple[str, dict]]) -> str:
    checks = [(who, lv, metric, a) for who, lv in levels
              for metric, a in lv.get("agreement", {}).items() if isinstance(a, dict)]
    if not checks:
        return ""
    tol = levels[0][1]["agreement"]
    worst = max(checks, key=lambda c: abs(c[3]["diff_ms"]) / max(c[3]["server_mean_ms"], 1e-9))
    missed = [f"{who} {_level_name(lv)} {metric}" for who, lv, metric, a in checks
              if not a["within"]]
    verdict = ("all within" if not missed else f"outside it: {', '.join(missed)}")
    who, lv, metric, a = worst
    return (f"Client vs server means on the same requests (tolerance {tol['tolerance']:.0%} of "
            f"the server's figure or {tol['floor_ms']:.0f} ms): {verdict}; largest gap "
            f"{who} {_level_name(lv)} {metric} {a['client_mean_ms']:.1f} vs "
            f"{a['server_mean_ms']:.1f} ms.")


def _tokens(lv: dict) -> str:
    """Input, output and total tokens per second; input is unknown ("–") for a level
    measured before it was recorded."""
    into, out = lv.get("input_throughput") or 0.0, lv["output_throughput"]
    return f"{into:.1f} / {out:.1f} / {into + out:.1f}" if into else f"– / {out:.1f} / –"


def _bucket_lines(levels: list[tuple[str, dict]]) -> list[str]:
    """Client-side latency by prompt length at each model's heaviest level: where the
    prompts differ in length, a long prompt's first token waits for its own prefill."""
    heaviest = {who: lv for who, lv in levels if lv.get("by_prompt_length")}
    if not heaviest:
        return []
    lines = ["", "By prompt length (client-side, each model's heaviest level):", "",
             "| model | level | prompt tokens | requests | TTFT p50/p99 ms | TPOT p50 ms |",
             "|---|---|---|---|---|---|"]
    for who, lv in heaviest.items():
        lines += [f"| {who} | {_level_name(lv)} | {bucket} | {b['requests']} | "
                  f"{b['ttft_p50_ms']:.0f} / {b['ttft_p99_ms']:.0f} | {b['tpot_p50_ms']:.1f} |"
                  for bucket, b in lv["by_prompt_length"].items()]
    return lines


def load_lines(rec: DecisionRecord) -> list[str]:
    levels = _levels(rec.load)
    lines = ["", "## Load", ""]
    workload = _workload_line(rec.load.get("baseline", {}))
    lines += [workload, ""] if workload else []
    lines += ["Client-side: vllm bench serve over HTTP streaming. Server-side: the engine's "
              "/metrics histograms over the same requests (bucketed).", ""]
    lines += _level_table(levels)
    agree = _agreement_line(levels)
    lines += ["", agree] if agree else []
    if rec.device.get("kind") == "cpu":
        lines += ["", "On a CPU the load generator, the API server and the engine share cores, "
                  "so client-side inter-token gaps are bursty: read TPOT and ITL from the "
                  "server-side columns (docs/load.md)."]
        placed = {dict(rec.load.get(who, {})).get("boundary", "")
                  for who in ("baseline", "candidate")}
        lines += [f"Measured: {b}." for b in sorted(placed) if "; " in b]
    for who in ("baseline", "candidate"):
        gen = dict(rec.load.get(who, {})).get("generator")
        best = max((lv["output_throughput"] for w, lv in levels if w == who), default=0.0)
        if gen and gen.get("output_throughput"):
            lines += ["", f"Load generator ceiling ({who} run, zero-work endpoint, "
                      f"concurrency {gen['concurrency']}): {gen['output_throughput']:.0f} "
                      f"out tok/s, {gen['request_throughput']:.1f} req/s; the engine's best "
                      f"level is {best / gen['output_throughput']:.1%} of it."]
    lines += _engine_lines(levels) + _capacity_lines(rec.load)
    if rec.plots:
        lines += ["", *[f"![{name}]({path})" for name, path in rec.plots.items()]]
    return lines


def further_load_lines(rec: DecisionRecord) -> list[str]:
    """Each further load profile the run gated: its levels, engine state, capacity, SLO
    and cost, measured in the same engine sessions after the run's own profile."""
    lines: list[str] = []
    for name, further in rec.further_load.items():
        loads: Mapping[Any, Any] = further["load"]
        levels = _levels(loads)
        workload = _workload_line(loads.get("baseline", {}))
        lines += ["", f"## Load profile `{name}`", "",
                  "Measured in the same engine sessions, after the run's own profile; its "
                  f"gates carry `@{name}` in their names.", ""]
        lines += [workload, ""] if workload else []
        lines += _level_table(levels) + _engine_lines(levels) + _capacity_lines(loads)
        lines += _slo_lines(loads, further["cost"])
    return lines


def _level_table(levels: list[tuple[str, dict]]) -> list[str]:
    """Every level of both models on both boundaries, then latency by prompt length."""
    lines = ["| model | level | req/s | in / out / total tok/s | errors | "
             "TTFT p50/p99/max ms | TPOT p50/p99 ms | ITL p99 ms | E2E p50/p99 ms | "
             "server TTFT p50/p99 ms | server TPOT p50/p99 ms | server queue p50/p99 ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for who, lv in levels:
        server = lv.get("server", {}).get("latency", {})
        skipped = f" ({lv['skipped']} not sent)" if lv.get("skipped") else ""
        lines.append(
            f"| {who} | {_level_name(lv)} | {lv['request_throughput']:.2f} | "
            f"{_tokens(lv)} | {lv['failed']}{skipped} | "
            f"{_stats(lv['ttft_ms'], ('p50', 'p99', 'max'))} | {_stats(lv['tpot_ms'])} | "
            f"{_stats(lv['itl_ms'], ('p99',))} | {_stats(lv['e2el_ms'])} | "
            f"{_stats(server.get('ttft_ms'))} | {_stats(server.get('tpot_ms'))} | "
            f"{_stats(server.get('queue_ms'))} |")
    return lines + _bucket_lines(levels)


def _engine_lines(levels: list[tuple[str, dict]]) -> list[str]:
    """The engine's state through each level (its telemetry series) and the
    over-saturation verdict (docs/load.md)."""
    seen = [(who, lv) for who, lv in levels if lv.get("telemetry", {}).get("samples")
            or lv.get("saturation")]
    if not seen:
        return []
    interval = next((lv["telemetry"]["interval_s"] for _, lv in seen
                     if lv.get("telemetry", {}).get("samples")), None)
    read = f"its /metrics every {interval:g} s" if interval else "no /metrics series"
    lines = ["", f"The engine through each level ({read}) and whether the level outran it "
             "(TTFT and requests in flight both growing: docs/load.md):", "",
             "| model | level | peak running | peak waiting | peak KV cache | preempted | "
             "prefix-cache hits | over-saturated |", "|---|---|---|---|---|---|---|---|"]
    for who, lv in seen:
        t, sat = lv.get("telemetry", {}), lv.get("saturation", {})
        hits = t.get("prefix_cache_hit_rate")
        verdict = {True: f"**yes**: {sat.get('reason', '')}", False: "no",
                   None: f"not judged: {sat.get('reason', '')}"}[sat.get("over_saturated")]
        lines.append(f"| {who} | {_level_name(lv)} | {t.get('peak_running', '–')} | "
                     f"{t.get('peak_waiting', '–')} | "
                     + (f"{t['peak_kv_cache_usage']:.0%}" if "peak_kv_cache_usage" in t
                        else "–")
                     + f" | {t.get('preemptions', '–')} | "
                     + (f"{hits:.0%}" if hits is not None else "–") + f" | {verdict} |")
    return lines


def _capacity_lines(loads: Mapping[Any, Any]) -> list[str]:
    """The heaviest level each model held the SLO at, searched (docs/load.md)."""
    lines = []
    for who in ("baseline", "candidate"):
        load = loads.get(who, {})
        sessions = [r.get("capacity") for r in [load, *load.get("rounds", [])]
                    if r.get("capacity")]
        for i, cap in enumerate(sessions, start=1):
            unit = "req/s offered" if cap["knob"] == "request_rate" else "requests in flight"
            held = "nothing held" if cap["held"] is None else (
                f"held at {cap['held']:g} {unit} ({cap['request_throughput']:.2f} req/s, "
                f"{cap['output_throughput']:.1f} out tok/s)")
            above = "" if cap["not_held"] is None else f", not at {cap['not_held']:g}"
            searched = sum(not t.get("named") for t in cap["tried"])
            lines.append(f"- {who}, session {i}: {held}{above}; {searched} level(s) searched "
                         f"beside {len(cap['tried']) - searched} named, in "
                         f"{cap['seconds']:.0f} s; {cap['stopped']}")
    return ["", "Capacity at the SLO (searched: doubling, then bisection):", "", *lines] \
        if lines else []
