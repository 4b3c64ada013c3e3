"""A sweep measured serially and fanned out on a local Ray head: wall times, where and when
each Ray task ran, and whether the decisions agree.

    sudo .venv/bin/python benchmarks/sweep_fanout.py [--cpus 2] [--out /tmp/wb-fanout]

On a random tiny Llama (the integration tests' shape) with two candidates that serve the
baseline's weights (an A/A and an FP8 KV cache). Both sweeps use --remeasure, so each
measures every candidate; the baseline's suites are cached by the first. The Ray head
runs in a private network namespace (its servers bind every interface; there only
loopback exists), so this needs root and iproute2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workbench.mechanisms.paths import default_model_dir, engine_python  # noqa: E402

CONFIG = """
model: {{name: tiny-llama, path: {model}}}
candidates:
  same: {{recipe: none}}
  kv-fp8: {{recipe: none, kv_cache_dtype: fp8}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1}}
suites: [arithmetic, heldout-text]
profile: smoke
load:
  profile: tiny
  rounds: 1
  profiles:
    tiny: {{concurrency: [1], num_prompts: 4, prompt_tokens: 32, output_tokens: 8,
           warmup_prompts: 1}}
gates: gates.yaml
tracking: {{experiment: fanout}}
"""
GATES = """
fidelity:
  - {suite: heldout-text, max_kl_mean: 0.05, min_top1_agreement: 0.9}
sweep: {objective: cost, quality: top1_agreement}
"""


def tiny_model(out: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if (out / "config.json").exists():
        return out
    config = LlamaConfig(vocab_size=49152, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=64, max_position_embeddings=2048, bos_token_id=1,
                         eos_token_id=2, pad_token_id=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(default_model_dir() / name, out / name)
    return out


def sweep(out: Path, prefix: list[str], extra: list[str], env: dict,
          candidates: tuple[str, ...] = ("same", "kv-fp8")) -> tuple[float, dict]:
    started = time.perf_counter()
    chosen = [arg for name in candidates for arg in ("--candidate", name)]
    run = subprocess.run(prefix + [sys.executable, "-m", "workbench.cli", "sweep", "--config",
                                   str(out / "fanout.yaml"), *chosen, "--runs-dir", "runs",
                                   "--remeasure", *extra],
                         cwd=out, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if run.returncode not in (0, 1):
        sys.exit(run.stdout[-3000:] + run.stderr[-3000:])
    newest = sorted((out / "runs").glob("*-sweep"))[-1]
    return wall, json.loads((newest / "sweep.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/wb-fanout"))
    ap.add_argument("--cpus", type=int, default=2, help="CPUs the Ray head offers")
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    model = tiny_model(out / "tiny")
    (out / "fanout.yaml").write_text(CONFIG.format(model=model, repo=REPO))
    (out / "gates.yaml").write_text(GATES)
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "MLFLOW_TRACKING_URI": f"sqlite:///{out / 'mlflow.db'}"}
    sweep(out, [], [], env, ("same",))  # the baseline's suites into the cache, for both below
    serial_s, serial = sweep(out, [], [], env)

    ns = f"wb-fanout-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    inside = ["ip", "netns", "exec", ns]
    ray = str(engine_python().with_name("ray"))
    env["RAY_TMPDIR"] = str(out / "ray")
    try:
        subprocess.run(inside + ["ip", "link", "set", "lo", "up"], check=True)
        subprocess.run(inside + [ray, "start", "--head", "--port", "6390", "--num-cpus",
                                 str(args.cpus), "--num-gpus", "0", "--include-dashboard",
                                 "false", "--disable-usage-stats"],
                       env=env, check=True, capture_output=True)
        fanned_s, fanned = sweep(out, inside, ["--ray-address", "127.0.0.1:6390"], env)
    finally:
        subprocess.run(inside + [ray, "stop", "--force"], env=env, capture_output=True)
        subprocess.run(["ip", "netns", "del", ns])

    def rows(record: dict) -> dict:
        return {r["candidate"]: r for r in record["rows"]}

    each = ", ".join(f"{n} {r['evaluate_s']:.0f} s" for n, r in rows(serial).items())
    print(f"serial sweep of 2 candidates: {serial_s:.0f} s ({each})")
    t0 = min(r["ray_task"]["started_at"] for r in rows(fanned).values())
    windows = ", ".join(f"{n} {r['ray_task']['started_at'] - t0:.0f}-"
                        f"{r['ray_task']['ended_at'] - t0:.0f} s"
                        for n, r in rows(fanned).items())
    print(f"fanned out on a Ray head with {args.cpus} CPUs: {fanned_s:.0f} s; tasks {windows}")
    same = {n: r["decision"] for n, r in rows(serial).items()} == {
        n: r["decision"] for n, r in rows(fanned).items()}
    print(f"decisions: serial {[(n, r['decision']) for n, r in rows(serial).items()]}, "
          f"fanned out the same: {same}")


if __name__ == "__main__":
    main()
