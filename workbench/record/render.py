"""The decision record for people and for CI: decision.md (failures first, then every table),
the console verdict, a CI summary and JUnit XML; and the record written beside them.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from workbench.mechanisms.files import write_json
from workbench.record.canary import write_canary_rules
from workbench.record.decision import SEVERITY, DecisionRecord, worst_first
from workbench.record.policy_text import MARK as _MARK
from workbench.record.policy_text import (
    early_stop_lines,
    gate_mark,
    headlines,
    policy_lines,
    served_dense_lines,
)
from workbench.record.render_load import further_load_lines, load_lines, slo_lines
from workbench.record.render_rollout import registry_lines, rollout_lines, trigger_lines
from workbench.record.sections import FidelityJson, StandInJson

__all__ = ["print_decision", "render_markdown", "render_summary", "write_junit",
           "write_record"]



# What "score" means per suite kind, for the reader of the tables.
_KIND_SCORE = {"quality": "accuracy", "safety": "right behaviour (refuse harmful, answer benign)",
               "structured": "exact arguments",
               "traffic": "agreement with the baseline's answer, chrF (the baseline's own: 1)"}


def _suite_tables(suites: dict) -> list[str]:
    """Per-slice scores with flips, then each suite's own metrics (refusal rate, schema
    validity, calibration, ...)."""
    lines: list[str] = []
    for kind, title in (("quality", "Quality"), ("safety", "Safety"),
                        ("structured", "Structured output"), ("traffic", "Your traffic")):
        chosen = {k: v for k, v in suites.items() if v["baseline"].get("kind", "quality") == kind}
        if not chosen:
            continue
        lines += ["", f"## {title} (score: {_KIND_SCORE[kind]})", "",
                  "Paired by item; delta = candidate − baseline with its two-sided bootstrap "
                  "interval; flips = items right → wrong / wrong → right; McNemar's exact p "
                  "on them.", "",
                  "| suite | slice | n | baseline | candidate | delta [interval] | "
                  "flips lost / gained | McNemar p |",
                  "|---|---|---|---|---|---|---|---|"]
        for suite, pair in chosen.items():
            compared = pair.get("comparison") or {}
            for s in ["(all)", *pair["baseline"]["slices"]]:
                d = compared.get(s)
                if d is None:
                    continue
                blind = " (one baseline answer for all: cannot see a change)" \
                    if d.get("constant_baseline") else ""
                lines.append(f"| {suite} | {s}{blind} | {d['n']} | {d['baseline']:.3f} | "
                             f"{d['candidate']:.3f} | {d['delta']:+.3f} [{d['ci_low']:+.3f}, "
                             f"{d['ci_high']:+.3f}] | {d['flips_to_wrong']} / "
                             f"{d['flips_to_right']} | {d['mcnemar_p']:.3g} |")
        metric_rows = [f"| {suite} | {m} | {v:.3f} | "
                       f"{pair['candidate'].get('metrics', {}).get(m, float('nan')):.3f} |"
                       for suite, pair in chosen.items()
                       for m, v in pair["baseline"].get("metrics", {}).items()]
        if metric_rows:
            lines += ["", "| suite | metric | baseline | candidate |", "|---|---|---|---|",
                      *metric_rows]
    return lines


def _degenerate(health: dict) -> str:
    return ", ".join(f"{n} {why}" for why, n in health.get("degenerate", {}).items()) or "none"


def _health_table(suites: dict) -> list[str]:
    """Per generating suite: the healthy share of each model and what broke."""
    rows = [(name, pair) for name, pair in suites.items()
            if "health" in pair["baseline"] and "health" in pair["candidate"]]
    if not rows:
        return []
    lines = ["", "## Generation health", "",
             "Every generated response is checked before it is scored: empty, looping, "
             "word fragments, or another language than the prompt's (docs/gates.md).", "",
             "| suite | n | healthy, baseline → candidate | delta [interval] | flips lost / "
             "gained | degenerate (candidate) | degenerate (baseline) |",
             "|---|---|---|---|---|---|---|"]
    for name, pair in rows:
        b, c = pair["baseline"]["health"], pair["candidate"]["health"]
        d = (pair.get("health_comparison") or {}).get("(all)")
        paired = (f"{d['delta']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] | "
                  f"{d['flips_to_wrong']} / {d['flips_to_right']}") if d else "– | –"
        lines.append(f"| {name} | {c['n']} | {b['healthy']:.3f} → {c['healthy']:.3f} | "
                     f"{paired} | {_degenerate(c)} | {_degenerate(b)} |")
    safety = [(n, p) for n, p in rows if "refusal_rate_healthy" in p["candidate"]["metrics"]]
    if safety:
        lines += ["", "Safety responses by kind (refusal rate among healthy answers; a "
                  "degenerate or off-topic response is neither a refusal nor an answer):", "",
                  "| suite | refusal rate (healthy), base → cand | off-topic | degenerate |",
                  "|---|---|---|---|"]
        for name, pair in safety:
            b, c = pair["baseline"]["metrics"], pair["candidate"]["metrics"]
            lines.append(f"| {name} | {b['refusal_rate_healthy']:.3f} → "
                         f"{c['refusal_rate_healthy']:.3f} | {b.get('off_topic_rate', 0):.3f} "
                         f"→ {c.get('off_topic_rate', 0):.3f} | {b['degenerate_share']:.3f} → "
                         f"{c['degenerate_share']:.3f} |")
    return lines


def _agreement_table(fidelity: dict) -> list[str]:
    rows = [(name, f["agreement"]) for name, f in fidelity.items() if f.get("agreement")]
    if not rows:
        return []
    lines = ["", "Generation agreement: both models continue the same prompts greedily; "
             "identical = the whole continuation matches; prefix = the share generated "
             "before the first token that differs.", "",
             "| suite | slice | items | tokens | identical | prefix | first divergence "
             "p10 / p50 |", "|---|---|---|---|---|---|---|"]
    for name, a in rows:
        for label, g in [("(all)", a), *a.get("slices", {}).items()]:
            lines.append(f"| {name} | {label} | {g['items']} | {a['tokens']} | "
                         f"{g['identical_share']:.3f} | {g['prefix_agreement']:.3f} | "
                         f"{g['first_divergence_p10']:.0f} / {g['first_divergence_p50']:.0f} |")
    return lines


def _headroom_table(room: dict) -> list[str]:
    base, cand = room.get("baseline") or {}, room.get("candidate") or {}
    if not base or not cand:
        return []
    lines = ["", "## Memory headroom", "", "| | baseline | candidate |", "|---|---|---|"]
    for label, key, fmt in _HEADROOM_ROWS:
        b, c = base.get(key), cand.get(key)
        if b is None and c is None and key in _DEVICE_ROWS:
            continue  # a GPU's figures: a CPU record reads as before
        if key == "kv_cache_blocks":
            b, c = (None if x is None else f"{x} × {r.get('block_size')}"
                    for x, r in ((b, base), (c, cand)))
        lines.append(f"| {label} | {fmt(b) if b is not None else '–'} | "
                     f"{fmt(c) if c is not None else '–'} |")
    return lines


def _kernel_lines(kernels: dict) -> list[str]:
    """The kernel path the engine took for each quantised layer kind, from its own log."""
    shown = [f"{who}: " + ", ".join(f"{what} → `{kernel}`" for what, kernel in chosen.items())
             for who, chosen in kernels.items() if chosen]
    return [f"Kernels the engine chose (its log): {'; '.join(shown)}.", ""] if shown else []


def device_text(device: dict) -> str:
    """`cuda (1 x NVIDIA H200, compute capability 9.0, MIG 3g.71gb; driver 580.95, CUDA
    13.0)`, or `cpu (the CPU's model)`."""
    gpus = (device.get("gpus") or {}).get("gpus") or []
    if not gpus:
        return f"{device['kind']} ({device.get('cpu')})"
    kinds = sorted({f"{g['name']}, compute capability {g['compute_capability']}"
                    + (f", MIG {g['mig_profile']}" if g.get("mig_profile") else "")
                    for g in gpus})
    host = device["gpus"]
    return (f"{device['kind']} ({len(gpus)} x {'; '.join(kinds)}; driver "
            f"{host.get('driver_version', '?')}, CUDA {host.get('cuda_driver_version', '?')})")


def _binding_text(binding: str | None) -> str:
    """Where a CPU run's suites computed (docs/load.md, "Where the suites compute")."""
    if binding == "every-core":
        return ", on every core (the load test in sessions on vLLM's binding)"
    return ", on vLLM's binding (one core left to its engine process)" if binding else ""


def _dtype_text(rec: DecisionRecord) -> str:
    """Both sides' serving dtype, and the quantiser's when it built the candidate."""
    text = f"served in {rec.device.get('serve_dtype', 'bfloat16')}"
    compute = rec.quantization.get("compute_dtype")
    if compute:
        text += (f"; quantised computing in {compute}, stored as "
                 f"{rec.quantization.get('stored_dtype', compute)}")
    if not rec.device.get("native_bf16", True) and rec.device.get("kind") == "cpu":
        text += " (this CPU has no native bf16)"
    return text


def _stand_in_lines(stand_in: StandInJson | None) -> list[str]:
    if not stand_in:
        return []
    return [f"**Evaluated {stand_in['evaluated_format']} in place of "
            f"{stand_in['requested_format']}**: {stand_in['requested_format']} has no kernel on "
            f"this device ({stand_in['why']}); `{stand_in['candidate']}` was built with recipe "
            f"`{stand_in['evaluated']}` instead of `{stand_in['requested']}`. This decision is "
            f"about {stand_in['evaluated_format']}, not {stand_in['requested_format']}.", ""]


def _fidelity_lines(fidelity: dict[str, FidelityJson]) -> list[str]:
    """Token-level fidelity per suite, then the agreement of greedy continuations."""
    if not fidelity:
        return []
    lines = ["", "## Fidelity to the baseline (token by token)", "",
             "| suite | tokens | mean KL | p95 KL | top-1 agreement | perplexity, base → cand |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {name} | {f['tokens']} | {f['kl_mean']:.4f} | {f['kl_p95']:.4f} | "
              f"{f['top1_agreement']:.3f} | {f['baseline_perplexity']:.2f} → "
              f"{f['candidate_perplexity']:.2f} |" for name, f in fidelity.items()]
    return lines + _agreement_table(fidelity)


def render_markdown(rec: DecisionRecord) -> str:
    lines = [
        f"# Decision: **{rec.decision.upper()}** — candidate `{rec.candidate}`",
        "",
        f"Model `{rec.model.get('name')}` ({rec.model.get('path')}), device "
        f"{device_text(dict(rec.device))}, engine vLLM {rec.engine.get('version', '?')}. "
        f"Created {rec.created_at}. Exit code {rec.exit_code}.",
        f"Suites at {rec.device.get('suite_in_flight', 8)} requests in flight"
        f"{_binding_text(rec.device.get('suite_binding'))}; "
        f"batch-invariant kernels: {rec.device.get('batch_invariant', 'off')}; "
        f"{_dtype_text(rec)}.",
        "",
        *_stand_in_lines(rec.stand_in),
        *served_dense_lines(rec.served_dense),
        *_kernel_lines(rec.engine.get("kernels", {})),
        *early_stop_lines(rec.early_stop),
        *[line for kind, text in headlines(rec.policy, rec.gates)
          for line in (text if kind == "looks" else f"**{text}**", "")],
        *registry_lines(rec.mlflow.get("registry")),
        *([f"Judged again from a record of schema {rec.migrated_from[0]} (migrated through "
           f"{', '.join(map(str, rec.migrated_from))}; what it lacks fails closed).", ""]
          if rec.migrated_from else []),
        "## Gates",
        "",
        "| gate | result | evidence |",
        "|---|---|---|",
    ]
    lines += [f"| `{g.gate}` | {gate_mark(g)} | {g.detail} |" for g in worst_first(rec.gates)]
    lines += policy_lines(rec.policy)
    lines += rollout_lines(rec.rollout)
    lines += _health_table(rec.suites)
    lines += _suite_tables(rec.suites)
    lines += _fidelity_lines(rec.fidelity)
    lines += load_lines(rec)
    starts = rec.engine.get("cold_start", {})
    if starts:
        lines += ["", "Cold start (process start → healthy / → first token): " + "; ".join(
            f"{who} {c['healthy_s']:.1f} s / {c['first_token_s']:.1f} s"
            for who, c in starts.items()) + "."]
    lines += slo_lines(rec)
    lines += further_load_lines(rec)
    lines += _headroom_table(rec.headroom)
    lines += trigger_lines(rec)
    reused = [k.replace("_", " ") for k, v in rec.reused.items() if v]
    if reused:
        lines += ["", "Reused from cache: " + ", ".join(reused) + "."]
    if rec.sampling:
        lines += ["", f"Decoding: temperature {rec.sampling.get('temperature')}, seed "
                  f"{rec.sampling.get('seed')}, profile {rec.sampling.get('profile')}."]
        if split := rec.sampling.get("split"):
            lines += [f"Judged on the {split['part']} half of every suite's items only: "
                      f"{split['rule']} (docs/tune.md)."]
    lines += ["", f"Latency figures hold for the device they were measured on "
              f"({rec.device['kind']}) only."]
    return "\n".join(lines) + "\n"


def render_summary(rec: DecisionRecord) -> str:
    """A few lines for a CI job summary: the decision, the count per status, and every
    gate that did not pass."""
    counts = {s: sum(g.status == s for g in rec.gates) for s in SEVERITY}
    lines = [f"### quant-workbench: **{rec.decision.upper()}** — `{rec.model.get('name')}` "
             f"candidate `{rec.candidate}` on {rec.device.get('kind')}", "",
             *_stand_in_lines(rec.stand_in),
             *served_dense_lines(rec.served_dense),
             *early_stop_lines(rec.early_stop),
             ", ".join(f"{n} {_MARK[s].lower()}" for s, n in counts.items() if n)
             + f" · exit code {rec.exit_code}", ""]
    for kind, text in headlines(rec.policy, rec.gates):
        lines += [text if kind == "looks" else f"**{text}**", ""]
    holding = [g for g in worst_first(rec.gates) if g.status in ("fail", "inconclusive")
               and not g.informational]
    if holding:
        lines += ["| gate | result | evidence |", "|---|---|---|",
                  *[f"| `{g.gate}` | {_MARK[g.status]} | {g.detail} |" for g in holding]]
    else:
        lines.append("Every applicable gate passed.")
    lines += ["", f"Record: `{Path(rec.run_dir) / 'decision.md'}`"]
    return "\n".join(lines) + "\n"


def write_junit(rec: DecisionRecord, path: Path) -> Path:
    """JUnit XML, one test case per gate: a fail is a failure, an inconclusive gate a
    failure when the policy lets it block (else skipped), not_applicable skipped."""
    blocks = rec.policy.get("inconclusive_blocks", True)
    suite = ET.Element("testsuite", name=f"quant-workbench.{rec.candidate}",
                       tests=str(len(rec.gates)))
    failures = skipped = 0
    for g in rec.gates:
        section = g.gate.split(":", 1)[0]  # JUnit's class: what CI dashboards group by
        case = ET.SubElement(suite, "testcase", classname=f"gates.{section}", name=g.gate)
        if g.informational:
            skipped += 1
            ET.SubElement(case, "skipped", message=f"informational, {g.status}: "
                          f"{g.detail[:200]}")
        elif g.status == "fail" or (g.status == "inconclusive" and blocks):
            failures += 1
            ET.SubElement(case, "failure", type=g.status, message=g.detail[:200]).text = g.detail
        elif g.status != "pass":
            skipped += 1
            ET.SubElement(case, "skipped", message=f"{g.status}: {g.detail[:200]}")
        ET.SubElement(case, "system-out").text = json.dumps(g.evidence, default=str)
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
    return path


_STYLE = {"pass": "green", "fail": "red", "inconclusive": "yellow", "not_applicable": "dim",
          "not_measured": "dim"}


def print_decision(rec: DecisionRecord, console: Console) -> None:
    evaluated = f" (as {rec.stand_in['evaluated_format']})" if rec.stand_in else \
        " (served dense)" if rec.served_dense else ""
    table = Table(title=f"{rec.candidate}{evaluated} vs baseline — decision: "
                        f"{rec.decision.upper()}")
    table.add_column("gate")
    table.add_column("result")
    table.add_column("evidence", overflow="fold")
    for g in worst_first(rec.gates):
        # escape: slice gates are named like "quality:suite[slice]", which is rich markup
        table.add_row(escape(g.gate), f"[{_STYLE[g.status]}]{escape(gate_mark(g))}[/]",
                      escape(g.detail))
    console.print(table)
    style = {"defect": "bold red", "undersized": "bold yellow", "looks": "default"}
    for kind, text in headlines(rec.policy, rec.gates):
        console.print(f"[{style[kind]}]{escape(text)}[/]")
    for line in [*_stand_in_lines(rec.stand_in), *served_dense_lines(rec.served_dense)][:1]:
        console.print(f"[bold yellow]{escape(line.replace('**', '').replace('`', ''))}[/]")
    for line in early_stop_lines(rec.early_stop)[:1]:
        console.print(escape(line.replace("**", "").replace("`", "")))


def write_record(run_dir: Path, rec: DecisionRecord) -> tuple[Path, Path]:
    """decision.json, decision.md and the canary's rollback rules beside them."""
    json_path, md_path = run_dir / "decision.json", run_dir / "decision.md"
    write_json(json_path, rec.to_dict())
    md_path.write_text(render_markdown(rec))
    write_canary_rules(run_dir, rec)
    return json_path, md_path


def _mib(v: int) -> str:
    return f"{v / 2**20:,.0f} MiB"


_HEADROOM_ROWS: list[tuple[str, str, Callable[[Any], str]]] = [
    ("weights", "weights_bytes", _mib),
    ("weights as the engine loaded them (its log)", "weights_loaded_bytes", _mib),
    ("KV cache dtype", "kv_cache_dtype", str),
    ("KV cache capacity", "kv_cache_tokens", lambda v: f"{v:,} tokens"),
    ("KV cache blocks × block size", "kv_cache_blocks", str),
    ("sequences of the workload's length that fit", "max_concurrent_sequences", str),
    ("peak KV cache usage", "peak_kv_cache_usage", lambda v: f"{100 * v:.1f}%"),
    ("KV cache pool", "kv_cache_memory_bytes", _mib),
    ("peak engine memory (RSS, process group)", "peak_engine_rss_bytes", _mib),
    ("peak GPU memory of the engine's processes (NVML)", "peak_gpu_memory_bytes", _mib),
    ("device memory", "device_memory_total_bytes", _mib),
    ("least device memory left free while serving", "device_memory_free_bytes", _mib),
    ("device margin (free / total)", "device_margin", lambda v: f"{100 * v:.1f}%"),
    ("preemptions", "preemptions", str),
]
# rows a CPU engine leaves empty on both sides, left out there
_DEVICE_ROWS = {"weights_loaded_bytes", "kv_cache_memory_bytes", "device_memory_total_bytes",
                "device_memory_free_bytes", "device_margin"}
