"""How much each decoder block alone suffers from weight quantisation. Runs in the
quantiser environment.

Invoked as ``<quant-env>/bin/python sensitivity_worker.py JOB.json [--expect-device
cuda|cpu]``; imports nothing from the workbench. It runs where the quantiser calibrates: on
the GPU when one is expected (and refuses, exit 78, when this environment's torch cannot
use it), on the CPU otherwise. For every decoder block k it rounds only that block's Linear
weights to the candidate's integer scheme (round to nearest, per group, with
compressed-tensors' own qparams and fake-quantise: the grid GPTQ writes to, without GPTQ's
error feedback), runs the held-out passages, and compares the next-token distributions with
the unquantised model's: the mean KL(baseline || block-k-quantised) over every token, and
how often the top-1 token agrees. Weights are restored before the next block. One forward
of the baseline plus one per block; no calibration, no GPTQ (docs/tune.md says why this
proxy, and how well its ranking predicted real trials).
"""

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

# sysexits' EX_CONFIG, as quantize_worker.py's: the workbench's input error, exit 2.
EXIT_DEVICE_MISMATCH = 78
BLOCK = re.compile(r"^(?P<prefix>.*\.layers)\.(?P<index>\d+)\.")


def blocks_of(model: Any) -> dict[int, list[str]]:
    """Decoder block index -> the names of its Linear modules (lm_head is never in one)."""
    import torch

    found: dict[int, list[str]] = {}
    for name, module in model.named_modules():
        match = BLOCK.match(name)
        if match and isinstance(module, torch.nn.Linear):
            found.setdefault(int(match["index"]), []).append(name)
    return dict(sorted(found.items()))


def rounded(weight: Any, bits: int, group_size: int) -> Any:
    """The weight on the symmetric integer grid of the candidate's scheme, dequantised."""
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    args = QuantizationArgs(num_bits=bits, type="int", symmetric=True, strategy="group",
                            group_size=group_size)
    rows, cols = weight.shape
    groups = weight.float().reshape(rows, cols // group_size, group_size)
    scale, zero = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
    return fake_quantize(weight.float(), scale, zero, args).to(weight.dtype).reshape(
        rows, cols)


def batches(tokenizer: Any, texts: list[str], seq_len: int, device: Any = "cpu") -> list[Any]:
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return [tokenizer(texts[i:i + 8], truncation=True, max_length=seq_len, padding=True,
                      return_tensors="pt").to(device) for i in range(0, len(texts), 8)]


def choose_device(expect: str | None) -> Any:
    """The quantiser's device: CUDA when the engine serves on it (this environment's torch
    must see it: else a refusal, before the model is loaded), the CPU when the engine does
    (CUDA hidden, as quantize_worker.py does), and with no expectation CUDA when torch sees
    it, as llm-compressor's get_main_device picks the accelerator (llmcompressor/utils/dev.py).
    """
    if expect == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before CUDA is first initialised
    import torch

    if expect == "cuda" and not torch.cuda.is_available():
        print(f"the engine serves on cuda but the quantiser's torch {torch.__version__} sees "
              f"no CUDA device; its python: {sys.executable}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_DEVICE_MISMATCH)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def log_probs(model: Any, encoded: list[dict]) -> list[Any]:
    """Next-token log-probabilities of every real (unpadded) position, per batch."""
    import torch

    out = []
    with torch.inference_mode():
        for batch in encoded:
            logits = model(**batch).logits.float()
            mask = batch["attention_mask"].bool()
            out.append(torch.log_softmax(logits[mask], dim=-1))
    return out


def compare(base: list[Any], other: list[Any]) -> dict:
    kl, agree, tokens = 0.0, 0, 0
    for p, q in zip(base, other, strict=True):
        kl += float((p.exp() * (p - q)).sum())
        agree += int((p.argmax(-1) == q.argmax(-1)).sum())
        tokens += p.shape[0]
    return {"kl_mean": round(kl / tokens, 6), "top1_agreement": round(agree / tokens, 6)}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="layer sensitivity of one model")
    parser.add_argument("job")
    parser.add_argument("--expect-device", choices=("cuda", "cpu"), default=None)
    args = parser.parse_args(argv)
    device = choose_device(args.expect_device)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    job = json.loads(Path(args.job).read_text())
    torch.manual_seed(0)
    started = time.perf_counter()
    # Whole on the device: the blocks' weights are rounded in place, which an offloaded
    # model's onloaded copies would not keep.
    # in the job's compute dtype: float32 on a CPU that emulates bf16 (mechanisms/host.py)
    dtype = getattr(torch, job.get("compute_dtype") or "bfloat16")
    model = AutoModelForCausalLM.from_pretrained(job["model_dir"], dtype=dtype)
    model.to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(job["model_dir"])
    texts = json.loads(Path(job["heldout_file"]).read_text())
    encoded = batches(tokenizer, texts, job["seq_len"], device)
    base = log_probs(model, encoded)
    modules = dict(model.named_modules())
    rows = []
    for index, names in blocks_of(model).items():
        kept = {n: modules[n].weight.data.clone() for n in names}
        for n in names:
            modules[n].weight.data.copy_(rounded(kept[n], job["bits"], job["group_size"]))
        rows.append({"block": index, "modules": len(names),
                     "params": sum(int(w.numel()) for w in kept.values()),
                     **compare(base, log_probs(model, encoded))})
        for n in names:
            modules[n].weight.data.copy_(kept[n])
        print(f"[workbench] block {index}: KL {rows[-1]['kl_mean']:.4f}", flush=True)
    Path(job["result_file"]).write_text(json.dumps({
        "blocks": rows, "tokens": sum(int(p.shape[0]) for p in base),
        "passages": len(texts), "seconds": round(time.perf_counter() - started, 2),
        "device": device.type}))


if __name__ == "__main__":
    main(sys.argv[1:])
