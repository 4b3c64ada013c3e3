"""The `quantise` part of the GPU check (scripts/gpu_check.sh): the workbench's quantize
worker run for real on random-weight Llama shapes (scripts/gpu_models.py), one case per
recipe, and each checkpoint reloaded and compared with the fake-quantised model.

    python scripts/gpu_quantize.py OUT MODE TOKENIZER_DIR WORK [BUDGET_S]

MODE gpu: the accelerator is CUDA and every case must show it was used: the worker's
manifest device, no "No accelerator available" line from llm-compressor in its log
(llmcompressor/utils/dev.py, logged when it falls back to the CPU), and a CUDA peak above
zero. MODE dry-run: the CPU stands in, the same checks expect the CPU, and the widths are
divided by 16. Models and checkpoints go to WORK (large; OUT holds only logs and figures).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from gpu_fidelity import fidelity, passage_logprobs  # noqa: E402
from gpu_models import (  # noqa: E402
    CASES,
    build_random_model,
    calibration_texts,
    heldout_texts,
)
from gpu_models import llama_config as shape_config  # noqa: E402
from gpu_summary import check, part_record, write_part  # noqa: E402
from gpu_worker_run import load_worker  # noqa: E402

__all__ = ["layer_seconds", "progress_marks", "run_streamed", "worker_job"]

DRY_RUN_SCALE = 16
SEQ_LEN, PROMPT_LEN = 256, 128
N_CALIBRATION, N_HELDOUT, N_DEVICE_PPL, N_PROMPTS = 32, 8, 4, 4
NO_ACCELERATOR = "No accelerator available"
CASE_CAP_S = 240
# The reloaded checkpoint computes what the fake-quantised model computed: the same
# quantised weights, dequantised by compressed-tensors instead of fake-quantised by
# llm-compressor, so only rounding of another order differs.
RELOAD_KL_MAX, RELOAD_TOP1_MIN = 0.01, 0.9


def progress_marks(events: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """(time, label) where the worker's progress changed: llm-compressor's per-subgraph
    bars '(3/5): Calibrating' and the worker's '[workbench] ...' phase lines, the same two
    the workbench follows (workbench/quantize/build.py, latest_progress)."""
    import re

    found = re.compile(r"\((\d+)/(\d+)\): \w+|\[workbench\] ([^\r\n]+)")
    marks: list[tuple[float, str]] = []
    for t, text in events:
        for m in found.finditer(text):
            label = f"subgraph {m[1]}/{m[2]}" if m[1] else m[3].strip()
            if not marks or marks[-1][1] != label:
                marks.append((t, label))
    return marks


def layer_seconds(marks: list[tuple[float, str]]) -> dict[str, Any]:
    """Seconds per subgraph pass, from its first mark to the next mark of any kind.
    llm-compressor's sequential pipeline cuts the model at its decoder layers: subgraph 1
    is what precedes the first layer (the embedding), subgraph k+1 is layer k (the last
    with the final norm). A two-modifier recipe (SmoothQuant, then GPTQ) walks them twice."""
    passes = [(label, round(marks[i + 1][0] - t, 2)) for i, (t, label) in enumerate(marks[:-1])
              if label.startswith("subgraph ")]
    layers = [s for label, s in passes if not label.startswith("subgraph 1/")]
    return {"passes": passes,
            "mean_per_decoder_layer_s": round(sum(layers) / len(layers), 2) if layers else None}


def run_streamed(cmd: list[str], log: Path, timeout: float) -> tuple[int, list]:
    """Run cmd, its output into log as it comes, each chunk timed (seconds from start);
    killed after timeout (exit code -9)."""
    started = time.perf_counter()
    events: list[tuple[float, str]] = []
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**__import__("os").environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None

        def pump() -> None:
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
                text = chunk.decode(errors="replace")
                sink.write(text)
                events.append((time.perf_counter() - started, text))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        reader.join(timeout=10)
    return rc, events


def worker_job(case_dir: Path, model_dir: Path, recipe: str, group_size: int | None,
               baseline_cached: bool) -> dict[str, Any]:
    """The job file as the workbench writes it (workbench/quantize/build.py,
    _build_artifact, and the candidate's recipe_params in config/run_config.py)."""
    data_free = recipe in ("fp8-dynamic", "none")
    (case_dir / "samples.json").write_text(json.dumps(calibration_texts(N_CALIBRATION)))
    (case_dir / "heldout.json").write_text(json.dumps(heldout_texts(N_HELDOUT)))
    job: dict[str, Any] = {
        "model_dir": str(model_dir), "out_dir": str(case_dir / "checkpoint"),
        "recipe": recipe, "ignore": ["lm_head"], "recipe_file": None,
        "needs_data": not data_free, "samples_file": str(case_dir / "samples.json"),
        "num_samples": N_CALIBRATION, "seq_len": SEQ_LEN, "seed": 0,
        "compute_dtype": "bfloat16",  # what the workbench computes in on a GPU (fast_dtype)
        "heldout_file": str(case_dir / "heldout.json"),
        "baseline_perplexity": "cached" if baseline_cached else None,
        "result_file": str(case_dir / "result.json")}
    if group_size is not None:
        job["group_size"] = group_size
    if recipe == "w8a8-int8":
        job["smoothing_strength"] = 0.8
    return job


def device_baseline(model: Any, tok: Any, device: str) -> dict[str, Any]:
    """The baseline's held-out perplexity by the worker's own function on the device and
    on the CPU (issue 35, item 5: the two must agree for a cached figure to be shared)."""
    worker = load_worker()
    texts = heldout_texts(N_HELDOUT)[:N_DEVICE_PPL]
    on_device = worker.heldout_perplexity(model.to(device), tok, texts, SEQ_LEN)
    on_cpu = worker.heldout_perplexity(model.to("cpu"), tok, texts, SEQ_LEN)
    rel = abs(on_device["perplexity"] - on_cpu["perplexity"]) / on_cpu["perplexity"]
    return {"device": device, "on_device": on_device, "on_cpu": on_cpu,
            "relative_difference": round(rel, 5)}


def _accelerator_checks(device: str, result: dict, observed: dict, log: str) -> list[dict]:
    on_cpu = device == "cpu"
    peak = observed.get("cuda_max_memory_allocated", 0)
    return [
        check(f"manifest device is {device}", result.get("device") == device,
              result.get("device")),
        check(f"llm-compressor's '{NO_ACCELERATOR}' line {'present' if on_cpu else 'absent'}",
              (NO_ACCELERATOR in log) == on_cpu, None),
        check("torch.cuda.max_memory_allocated() " + ("== 0" if on_cpu else "> 0"),
              (peak == 0) if on_cpu else (peak > 0), peak)]


def _reload_compare(ckpt: Path, fakeq: Path, device: str) -> dict[str, Any]:
    """The saved checkpoint through transformers (compressed-tensors dequantises), on
    the prompts the fake-quantised model saw."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16,
                                                 device_map=device).eval()
    reloaded = passage_logprobs(model, AutoTokenizer.from_pretrained(ckpt),
                                heldout_texts(N_HELDOUT)[:N_PROMPTS], device, PROMPT_LEN)
    del model
    return fidelity(torch.load(fakeq), reloaded)


def run_case(case: str, recipe: str, group_size: int | None, model_dir: Path, work: Path,
             out: Path, device: str, baseline_cached: bool, timeout: float
             ) -> tuple[dict[str, Any], list[dict]]:
    """One recipe through the worker, then its checks and figures."""
    case_dir, logs = work / case, out / "quantise" / case
    case_dir.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    job = worker_job(case_dir, model_dir, recipe, group_size, baseline_cached)
    (case_dir / "job.json").write_text(json.dumps(job, indent=2))
    (case_dir / "prompts.json").write_text(json.dumps(
        {"texts": heldout_texts(N_HELDOUT)[:N_PROMPTS], "seq_len": PROMPT_LEN}))
    rc, events = run_streamed(
        [sys.executable, str(REPO / "scripts" / "gpu_worker_run.py"), str(case_dir / "job.json"),
         str(case_dir / "prompts.json"), str(logs / "observed.json"), str(case_dir / "fakeq.pt"),
         device],
        logs / "worker.log", timeout)
    checks = [check("worker exit 0", rc == 0, rc if rc != -9 else f"killed after {timeout:.0f} s")]
    if rc != 0:
        return {"exit": rc}, checks
    result = json.loads((case_dir / "result.json").read_text())
    (logs / "result.json").write_text(json.dumps(result, indent=2))
    observed = json.loads((logs / "observed.json").read_text())
    checks += _accelerator_checks(device, result, observed, (logs / "worker.log").read_text())
    per_layer = layer_seconds(progress_marks(events))
    reload = _reload_compare(case_dir / "checkpoint", case_dir / "fakeq.pt", device)
    checks.append(check(f"reloaded checkpoint = fake-quantised model (KL mean <= "
                        f"{RELOAD_KL_MAX}, top-1 >= {RELOAD_TOP1_MIN})",
                        math.isfinite(reload["kl_mean"]) and reload["kl_mean"] <= RELOAD_KL_MAX
                        and reload["top1_agreement"] >= RELOAD_TOP1_MIN, reload))
    saved = json.loads((case_dir / "checkpoint" / "config.json").read_text())
    qc = saved.get("quantization_config", {})
    if per_layer["mean_per_decoder_layer_s"] is None:  # data-free: no per-layer passes
        per_layer["mean_per_decoder_layer_s"] = round(
            result["oneshot_s"] / saved["num_hidden_layers"], 2)
        per_layer["note"] = "data-free: oneshot time / layers"
    figures = {"recipe": recipe, "group_size": group_size, "wall_time_s": result.get("wall_time_s"),
               "oneshot_s": result.get("oneshot_s"), "time_per_layer": per_layer,
               "peak_gpu_mb": result.get("peak_gpu_mb"),
               "cuda_max_memory_allocated_mb": round(
                   observed["cuda_max_memory_allocated"] / 2**20, 1),
               "peak_rss_mb": result.get("peak_rss_mb"),
               "accelerator": result.get("accelerator"),
               "weights_after_oneshot": observed.get("weight_devices_after_oneshot"),
               "fake_quant_forward": observed.get("fake_quant_forward"),
               "worker_heldout_perplexity": result.get("heldout_perplexity"),
               "checkpoint_format": qc.get("format"), "kv_cache_scheme": qc.get("kv_cache_scheme"),
               "reload_vs_fake_quant": reload}
    return figures, checks


def run_shape(shape: str, cases: list[tuple[str, str, str, int | None]], ctx: dict
              ) -> tuple[dict[str, Any], list[dict]]:
    """Build the shape's model, compare its baseline perplexity on the device and the CPU,
    then run each case on it."""
    import torch
    from transformers import AutoTokenizer

    device, scale = ctx["device"], ctx["scale"]
    config = shape_config(shape, scale, ctx["tokenizer"])
    model_dir = ctx["work"] / f"model-{shape}"
    started = time.perf_counter()
    model = build_random_model(config, ctx["tokenizer"], model_dir, device)
    figures: dict[str, Any] = {"config": config, "build_s": round(time.perf_counter() - started, 1)}
    base = device_baseline(model, AutoTokenizer.from_pretrained(model_dir), device)
    figures["baseline_perplexity"] = base
    checks = [check(f"{shape}: baseline perplexity on {device} within 2% of the CPU's",
                    base["relative_difference"] <= 0.02, base["relative_difference"])]
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    for i, (case, _shape, recipe, group) in enumerate(cases):
        left = ctx["deadline"] - time.perf_counter()
        if left < 30:
            checks.append(check(f"{case}: run", False, "not run: the budget was spent"))
            continue
        started = time.perf_counter()
        try:
            case_figures, case_checks = run_case(case, recipe, group, model_dir, ctx["work"],
                                                 ctx["out"], device, i > 0, min(left, CASE_CAP_S))
        except Exception as err:  # noqa: BLE001 - one case's failure is a finding, not the end
            (ctx["out"] / "quantise" / case).mkdir(parents=True, exist_ok=True)
            (ctx["out"] / "quantise" / case / "error.txt").write_text(traceback.format_exc())
            case_figures, case_checks = {}, [check("ran", False, f"{type(err).__name__}: {err}")]
        case_figures["seconds"] = round(time.perf_counter() - started, 1)
        figures[case] = case_figures
        checks += [{**c, "name": f"{case}: {c['name']}"} for c in case_checks]
    return figures, checks


def _shape_line(shape: str, f: dict[str, Any]) -> str:
    c, b = f["config"], f["baseline_perplexity"]
    return (f"{shape}: hidden {c['hidden_size']}, MLP {c['intermediate_size']}, heads "
            f"{c['num_attention_heads']}/{c['num_key_value_heads']}, "
            f"{c['num_hidden_layers']} layers, built in {f['build_s']} s; baseline perplexity "
            f"{b['on_device']['perplexity']} on {b['device']}, {b['on_cpu']['perplexity']} on "
            f"the CPU (relative difference {b['relative_difference']})")


def _case_line(case: str, f: dict[str, Any]) -> str:
    if "recipe" not in f:
        return f"{case}: no figures (see its checks and quantise/{case}/)"
    ppl = f.get("worker_heldout_perplexity") or {}
    fid = f["reload_vs_fake_quant"]
    return (f"{case}: {f['time_per_layer']['mean_per_decoder_layer_s']} s per layer, oneshot "
            f"{f['oneshot_s']} s, worker {f['wall_time_s']} s, case {f.get('seconds')} s; "
            f"peak GPU {f['peak_gpu_mb']} MB; reloaded vs fake-quantised KL {fid['kl_mean']}, "
            f"top-1 {fid['top1_agreement']}; held-out perplexity "
            f"{ppl.get('baseline', {}).get('perplexity', 'cached')} -> "
            f"{ppl.get('candidate', {}).get('perplexity')} ({f['checkpoint_format']})")


def headlines(figures: dict[str, Any]) -> list[str]:
    """One line per shape and per case for summary.txt."""
    lines = [figures["models"]]
    for shape in dict.fromkeys(s for _, s, _, _ in CASES):
        if shape in figures:
            lines.append(_shape_line(shape, figures[shape]))
            lines += [_case_line(case, figures[shape][case]) for case, s, _, _ in CASES
                      if s == shape and case in figures[shape]]
    return lines


def main(argv: list[str]) -> int:
    out, mode, tokenizer, work = Path(argv[0]), argv[1], Path(argv[2]), Path(argv[3])
    budget = float(argv[4]) if len(argv) > 4 else 480.0
    started = time.perf_counter()
    ctx = {"out": out, "work": work, "tokenizer": tokenizer,
           "device": "cuda" if mode == "gpu" else "cpu",
           "scale": 1 if mode == "gpu" else DRY_RUN_SCALE, "deadline": started + budget}
    work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {
        "device": ctx["device"],
        "models": "random weights, Llama-3.1 8B (4 layers) and 70B (2 layers) widths, "
                  "SmolLM2's tokenizer and 49,152-token vocabulary"
                  + ("" if mode == "gpu" else f"; dry run: widths / {DRY_RUN_SCALE}, the CPU "
                                              "standing in for the GPU"),
        "calibration": f"{N_CALIBRATION} samples x {SEQ_LEN} tokens; held-out {N_HELDOUT}"}
    checks: list[dict] = []
    for shape in dict.fromkeys(s for _, s, _, _ in CASES):
        shape_figures, shape_checks = run_shape(
            shape, [c for c in CASES if c[1] == shape], ctx)
        figures[shape] = shape_figures
        checks += shape_checks
    record = part_record("quantise", None, time.perf_counter() - started, checks=checks,
                         figures=figures, headlines=headlines(figures))
    write_part(out, record)
    return 0 if record["status"] == "ran" else 1


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6) or sys.argv[2] not in ("gpu", "dry-run"):
        print("usage: gpu_quantize.py OUT gpu|dry-run TOKENIZER_DIR WORK [BUDGET_S]",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
