"""How much each decoder block alone suffers from weight quantisation. Runs in the
quantiser environment.

Invoked as ``<quant-env>/bin/python sensitivity_worker.py JOB.json``; imports nothing from
the workbench. For every decoder block k it rounds only that block's Linear weights to the
candidate's integer scheme (round to nearest, per group, with compressed-tensors' own
qparams and fake-quantise: the grid GPTQ writes to, without GPTQ's error feedback), runs
the held-out passages, and compares the next-token distributions with the unquantised
model's: the mean KL(baseline || block-k-quantised) over every token, and how often the
top-1 token agrees. Weights are restored before the next block. One forward of the
baseline plus one per block; no calibration, no GPTQ (docs/tune.md says why this proxy,
and how well its ranking predicted real trials).
"""

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

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


def batches(tokenizer: Any, texts: list[str], seq_len: int) -> list[dict]:
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return [tokenizer(texts[i:i + 8], truncation=True, max_length=seq_len, padding=True,
                      return_tensors="pt") for i in range(0, len(texts), 8)]


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


def main(job_file: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    job = json.loads(Path(job_file).read_text())
    torch.manual_seed(0)
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(job["model_dir"], dtype=torch.bfloat16)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(job["model_dir"])
    texts = json.loads(Path(job["heldout_file"]).read_text())
    encoded = batches(tokenizer, texts, job["seq_len"])
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
        "passages": len(texts), "seconds": round(time.perf_counter() - started, 2)}))


if __name__ == "__main__":
    main(sys.argv[1])
