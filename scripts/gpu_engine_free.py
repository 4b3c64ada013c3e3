"""What a CUDA machine without vLLM can check: every candidate quantised on the GPU through
the workbench's own quantise stage, and fidelity to the baseline through transformers.

    python3 scripts/gpu_engine_free.py --out DIR [--config configs/gpu.yaml]
        [--model DIR] [--candidates int4,fp8,...]

Run by scripts/gpu_check.sh with the machine's own python (torch, transformers) and the
llm-compressor wheels it carries. Without --model, the model is the default model's
architecture (its config.json and tokenizer, carried in .gpu/model-shape) with random
weights: quantisation time and memory are those of the real shapes, while perplexity and
fidelity figures only show that the path works (a random model has nothing to keep).

Fidelity here is full-vocabulary: per-token KL(baseline || candidate), top-1 agreement and
perplexity on the config's held-out passages, computed on dense logits from transformers
(the engine's own check uses top-20 prompt log-probs). An FP8 KV cache is an engine
feature: transformers ignores its scales, so a kv-fp8 candidate shows the weights' effect
only (none).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def log(text: str) -> None:
    print(f"[gpu_engine_free] {text}", flush=True)


def progress_printer(name: str):
    """The quantise stage reports its phase repeatedly while it lasts: print each once."""
    last = [""]

    def show(step: str) -> None:
        if step != last[0]:
            last[0] = step
            log(f"{name}: {step}")
    return show


def random_model(shape_dir: Path, out: Path, device: str) -> Path:
    """The default model's architecture with seeded random weights, saved as bf16."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(shape_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(shape_dir).save_pretrained(out)
    return out


def dense_logprobs(model_dir: Path, texts: list[str], seq_len: int, device: str):
    """Per passage: log-softmax over the vocabulary at each position, and the targets."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device)
    out = passage_logprobs(model.eval(), tok, texts, device, seq_len)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def passage_logprobs(model, tok, texts: list[str], device: str, seq_len: int):
    """A loaded model's log-softmax at each position of each passage, and the targets."""
    import torch

    out = []
    with torch.inference_mode():
        for text in texts:
            ids = tok(text, truncation=True, max_length=seq_len, return_tensors="pt"
                      ).input_ids.to(device)
            logits = model(ids).logits[0, :-1].float()
            out.append((torch.log_softmax(logits, dim=-1), ids[0, 1:]))
    return out


def fidelity(base, cand) -> dict:
    import torch

    kls, agree, base_nll, cand_nll, n = [], 0, 0.0, 0.0, 0
    for (b, target), (c, _) in zip(base, cand, strict=True):
        kl = (b.exp() * (b - c)).sum(-1)
        kls.append(kl)
        agree += int((b.argmax(-1) == c.argmax(-1)).sum())
        base_nll -= float(b.gather(1, target[:, None]).sum())
        cand_nll -= float(c.gather(1, target[:, None]).sum())
        n += len(target)
    all_kl = torch.cat(kls)
    return {"tokens": n, "kl_mean": round(float(all_kl.mean()), 5),
            "kl_p95": round(float(all_kl.quantile(0.95)), 5),
            "top1_agreement": round(agree / n, 4),
            "baseline_perplexity": round(math.exp(base_nll / n), 3),
            "candidate_perplexity": round(math.exp(cand_nll / n), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "gpu.yaml"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default=None, help="real weights (default: random weights "
                                                      "with the default model's shapes)")
    parser.add_argument("--candidates", default=None, help="comma-separated (default: all)")
    args = parser.parse_args()

    import torch

    from workbench.config.run_config import load_config
    from workbench.mechanisms.digests import folder_digest
    from workbench.quantize.build import quantize
    from workbench.quantize.calibration import heldout_samples

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = load_config(args.config)
    work = Path(os.environ.get("WORKBENCH_CACHE", "/tmp/wb-gpu-cache"))
    if args.model:
        model_dir, weights = Path(args.model), "real"
    else:
        model_dir = random_model(REPO / ".gpu" / "model-shape", work / "model", device)
        weights = "random (the default model's shapes)"
    names = args.candidates.split(",") if args.candidates else list(cfg.candidates)
    digest = folder_digest(model_dir)
    texts = heldout_samples(cfg.calibration, cfg.resolve)
    log(f"device {device} ({torch.cuda.get_device_name(0) if device == 'cuda' else 'cpu'}), "
        f"model {model_dir} ({weights}), candidates {', '.join(names)}")
    base = dense_logprobs(model_dir, texts, cfg.calibration.seq_len, device)
    report = {"device": device, "weights": weights, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
              "candidates": {}}
    for name in names:
        started = time.perf_counter()
        entry: dict = {}
        try:
            q = quantize(cfg, name, model_dir, digest, out / f"quantize-{name}.log",
                         on_progress=progress_printer(name))
            m = q.manifest
            entry = {"source": q.source, "format": m.get("format", {}).get("label"),
                     "wall_time_s": m.get("wall_time_s"), "oneshot_s": m.get("oneshot_s"),
                     "quantised_on": m.get("device"), "peak_gpu_mb": m.get("peak_gpu_mb"),
                     "size_mb": round(m.get("size_bytes", 0) / 1e6, 1),
                     "compression_ratio": m.get("compression_ratio"),
                     "heldout_perplexity": m.get("fidelity")}
            if q.source == "baseline weights":
                entry["fidelity"] = "no new weights (an engine-side change only)"
            else:
                entry["fidelity"] = fidelity(base, dense_logprobs(
                    Path(q.path), texts, cfg.calibration.seq_len, device))
        except Exception as err:  # one candidate's failure is a finding, not the end
            entry["error"] = f"{type(err).__name__}: {err}"
            (out / f"error-{name}.txt").write_text(traceback.format_exc())
        entry["total_s"] = round(time.perf_counter() - started, 1)
        report["candidates"][name] = entry
        log(f"{name}: {json.dumps(entry)}")
        (out / "engine_free.json").write_text(json.dumps(report, indent=2))
    failed = [n for n, e in report["candidates"].items() if "error" in e]
    log(f"done: {len(names) - len(failed)} of {len(names)} candidates"
        + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
