"""Dense log-probabilities of a loaded model on passages, and how two models' agree: full-
vocabulary KL, top-1 agreement and perplexity (the GPU check's reload comparison,
scripts/gpu_quantize.py, and tensor parallel 2, scripts/gpu_tp_check.py).

The engine's own fidelity check uses top-20 prompt log-probs; here the logits are dense,
so the figures are exact for the passages given.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["fidelity", "passage_logprobs"]


def passage_logprobs(model: Any, tok: Any, texts: list[str], device: str, seq_len: int
                     ) -> list[tuple[Any, Any]]:
    """A loaded model's log-softmax at each position of each passage, and the targets
    (the next tokens), as float32 on the CPU."""
    import torch

    out = []
    with torch.inference_mode():
        for text in texts:
            ids = tok(text, truncation=True, max_length=seq_len, return_tensors="pt"
                      ).input_ids.to(device)
            logits = model(ids).logits[0, :-1].float()
            out.append((torch.log_softmax(logits, dim=-1).cpu(), ids[0, 1:].cpu()))
    return out


def fidelity(base: list[tuple[Any, Any]], cand: list[tuple[Any, Any]]) -> dict[str, Any]:
    """KL(base || cand) per token (mean, p95, max), top-1 agreement, both perplexities."""
    import torch

    kls, agree, base_nll, cand_nll, n = [], 0, 0.0, 0.0, 0
    for (b, target), (c, _) in zip(base, cand, strict=True):
        kls.append((b.exp() * (b - c)).sum(-1))
        agree += int((b.argmax(-1) == c.argmax(-1)).sum())
        base_nll -= float(b.gather(1, target[:, None]).sum())
        cand_nll -= float(c.gather(1, target[:, None]).sum())
        n += len(target)
    all_kl = torch.cat(kls)
    return {"tokens": n, "kl_mean": round(float(all_kl.mean()), 6),
            "kl_p95": round(float(all_kl.quantile(0.95)), 6),
            "kl_max": round(float(all_kl.max()), 6),
            "top1_agreement": round(agree / n, 4),
            "baseline_perplexity": round(math.exp(base_nll / n), 3),
            "candidate_perplexity": round(math.exp(cand_nll / n), 3)}
