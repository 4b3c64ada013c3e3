"""The load test alone, for the baseline and several candidates, on the default model.

    .venv/bin/python benchmarks/load_sweep.py [--config configs/default.yaml]
        [--candidates int4,fp8,kv-fp8] [--load-profile interactive] [--rounds 1] [--out DIR]

Builds (or takes from the artifact cache) each candidate with `workbench quantize`, then
serves the baseline and each candidate in turn and runs the config's load profile against
it exactly as `workbench evaluate` does (same workload, warm-up, levels, both boundaries,
headroom, generator ceiling, the capacity search when the profile has one), without the
suites; with --rounds N, N engine sessions per model, interleaved (baseline, candidates,
baseline, ...) as `load.rounds` does. Prints the Markdown tables in docs/benchmarks.md
(the capacity at the SLO per session, when searched) and keeps every run's files under
--out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from rich.console import Console  # noqa: E402

from workbench.config.run_config import DEFAULT_PRICE_PER_HOUR, load_config  # noqa: E402
from workbench.gate.capacity import capacity_bracket  # noqa: E402
from workbench.loadtest.bench import level_requests  # noqa: E402
from workbench.measure.measurement import Measurement, measure  # noqa: E402
from workbench.serve.engine import detect_device  # noqa: E402


def quantized(config: str, names: list[str], tmp: Path) -> dict[str, dict]:
    cmd = [str(REPO / ".venv" / "bin" / "workbench"), "quantize", "--config", config,
           "--runs-dir", str(tmp / "runs")]
    for name in names:
        cmd += ["--candidate", name]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])
    summary = json.loads(next((tmp / "runs").glob("*/quantize-summary.json")).read_text())
    return {q["candidate"]: q for q in summary}


def level_rows(name: str, m: Measurement) -> list[str]:
    rows = []
    for lv in m.load.levels:
        srv = lv.server.get("latency", {})
        rows.append(
            f"| {name} | {lv.key} | {lv.output_throughput:.1f} | {lv.request_throughput:.2f} | "
            f"{lv.ttft_ms['p50']:.0f} / {lv.ttft_ms['p99']:.0f} | "
            f"{lv.tpot_ms['p50']:.1f} / {lv.tpot_ms['p99']:.1f} | "
            f"{srv['tpot_ms']['p50']:.1f} / {srv['tpot_ms']['p99']:.1f} | "
            f"{lv.agreement['ttft']['diff_ms']:+.1f} / {lv.agreement['tpot']['diff_ms']:+.2f} | "
            f"{'yes' if lv.slo.get('meets_slo') else 'no'} |")
    return rows


def headroom_row(name: str, m: Measurement) -> str:
    h = m.headroom
    stable = m.load.max_stable_level()
    return (f"| {name} | {h['weights_bytes'] / 2**20:.0f} | {h['kv_cache_dtype']} | "
            f"{h['kv_cache_tokens']:,} | {h['max_concurrent_sequences']:,} | "
            f"{h['peak_engine_rss_bytes'] / 2**30:.2f} | {stable.key if stable else 'none'} | "
            f"{m.load.generator.get('output_throughput', 0):,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--candidates", default="int4,fp8,kv-fp8")
    parser.add_argument("--load-profile", default=None)
    parser.add_argument("--rounds", type=int, default=1,
                        help="engine sessions per model, interleaved")
    parser.add_argument("--out", default=None, help="keep run files here (default: a temp dir)")
    args = parser.parse_args()
    cfg = load_config(args.config)
    if args.load_profile:
        cfg = cfg.with_load_profile(args.load_profile)
    names = [n for n in args.candidates.split(",") if n]
    out = Path(args.out or tempfile.mkdtemp(prefix="wb-load-"))
    console = Console(stderr=True)
    device = detect_device()
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    trace = cfg.workload.trace
    requests = level_requests(cfg.workload, cfg.resolve(trace) if trace else None,
                              cfg.engine.max_model_len)
    builds = quantized(args.config, names, out)
    models = [("baseline", model_dir, []), *[(n, Path(builds[n]["path"]),
                                                builds[n]["serve_args"]) for n in names]]
    sessions: dict[str, list[Measurement]] = {name: [] for name, _, _ in models}
    for r in range(1, args.rounds + 1):
        for name, path, serve_args in models:
            started = time.perf_counter()
            sessions[name].append(measure(
                cfg, name, path, f"{cfg.model.name}-{name}", serve_args, [], requests,
                model_dir, out / name / f"round-{r}", console, device, ceiling=r == 1))
            console.print(f"{name}, session {r}: {time.perf_counter() - started:.0f} s")
    results = {name: ms[0] for name, ms in sessions.items()}
    w = results["baseline"].load.workload
    print(f"load profile `{cfg.load.profile}` on {device}: {w['requests_per_level']} requests "
          f"per level, prompt tokens mean {w['prompt_tokens']['mean']:.0f} (max "
          f"{w['prompt_tokens']['max']}), output tokens mean {w['output_tokens']['mean']:.0f}, "
          f"shared prefix {w['shared_prefix_tokens']}; SLO {cfg.workload.slo}\n")
    print("| model | level | out tok/s | req/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | "
          "server TPOT p50 / p99 ms | client − server mean TTFT / TPOT ms | meets SLO |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, m in results.items():
        print("\n".join(level_rows(name, m)))
    print("\n| model | weights MiB | KV dtype | KV capacity tokens | max sequences at "
          f"{w['longest_request_tokens']} tokens | peak engine RSS GiB | max stable level | "
          "generator ceiling out tok/s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, m in results.items():
        print(headroom_row(name, m))
    if cfg.workload.capacity is not None:
        price = cfg.workload.price_per_hour or DEFAULT_PRICE_PER_HOUR[device]
        print(capacity_table(sessions, price))
    console.print(f"run files: {out}")


def capacity_table(sessions: dict[str, list[Measurement]], price_per_hour: float) -> str:
    """Each session's capacity at the SLO, the model's bracket over its sessions, and the
    cost per million output tokens at the capacity found."""
    rows = ["\n| model | session | held at | not at | req/s at held | out tok/s at held | "
            "$ / M out tokens at held | levels tried (named + searched) | search s | why |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name, ms in sessions.items():
        for i, m in enumerate(ms, start=1):
            cap = m.load.capacity
            out_tps = cap.get("output_throughput")
            usd = f"{price_per_hour / 3600 / out_tps * 1e6:.2f}" if out_tps else "–"
            tried = cap.get("tried", [])
            rows.append(
                f"| {name} | {i} | {cap.get('held')} | {cap.get('not_held')} | "
                f"{cap.get('request_throughput') or 0:.2f} | {out_tps or 0:.1f} | {usd} | "
                f"{sum(t['named'] for t in tried)} + {sum(not t['named'] for t in tried)} | "
                f"{cap.get('seconds', 0):.0f} | {cap.get('stopped', '')} |")
        bracket = capacity_bracket(replace(ms[0].load, rounds=[m.load for m in ms[1:]]))
        if bracket is not None:
            rows.append(f"| {name} | all | {bracket[0]:g} | {bracket[1]:g} | | | | | | "
                        "the span of its sessions |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
