"""The held-out perplexity check after quantising: the baseline's figure, computed once per
model, passages, libraries, device and compute dtype and cached, and the fidelity section of
a candidate's manifest (docs/candidates.md, "The manifest")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.mechanisms.digests import sha256_json
from workbench.mechanisms.paths import cache_root

__all__ = ["baseline_perplexity_file", "cached_perplexity", "fidelity_section"]


def baseline_perplexity_file(model_digest: str, heldout: list[str], seq_len: int,
                              versions: dict[str, str], device: str = "cpu",
                              compute_dtype: str = "bfloat16") -> Path:
    """The baseline's held-out perplexity is the same for every candidate: computed once
    per device and dtype it is computed in (the calibration's; the candidate's is measured
    there too, and a GPU's bf16 kernels do not give the CPU's figure, nor bf16 float32's)."""
    identity: dict[str, Any] = {"model": model_digest, "heldout": heldout, "seq_len": seq_len,
                                "versions": versions}
    if device != "cpu":  # the CPU's keys as they were: no rebuild of figures already cached
        identity["device"] = device
    if compute_dtype != "bfloat16":
        identity["compute_dtype"] = compute_dtype
    key = sha256_json(identity)
    return cache_root() / "fidelity" / f"baseline-{key[:24]}.json"


def cached_perplexity(file: Path) -> dict | None:
    """The baseline's cached held-out perplexity, or None (a damaged file is dropped and
    measured again, never trusted)."""
    try:
        data = json.loads(file.read_text())
        if isinstance(data, dict) and isinstance(data.get("perplexity"), (int, float)):
            return data
    except (OSError, ValueError):
        pass
    file.unlink(missing_ok=True)
    return None


def fidelity_section(facts: dict, baseline_file: Path, heldout: list[str], seq_len: int
                     ) -> dict | None:
    """The manifest's fidelity: both perplexities (the baseline's from its cache when the
    worker skipped it, else stored there now), their ratio and where they were computed."""
    measured = facts.pop("heldout_perplexity", {})
    if not heldout or "candidate" not in measured:
        return None
    cached = "baseline" not in measured
    if cached:
        base = cached_perplexity(baseline_file)
        assert base is not None  # checked before the worker was asked to skip it
    else:
        base = measured["baseline"]
        baseline_file.parent.mkdir(parents=True, exist_ok=True)
        baseline_file.write_text(json.dumps(base))
    cand = measured["candidate"]
    return {"heldout_samples": len(heldout), "heldout_digest": sha256_json(heldout),
            "seq_len": seq_len, "tokens": cand["tokens"],
            "baseline_perplexity": base["perplexity"], "candidate_perplexity": cand["perplexity"],
            "perplexity_ratio": round(cand["perplexity"] / base["perplexity"], 4),
            "baseline_cached": cached, "seconds": cand["seconds"] + (0 if cached else
                                                                      base["seconds"]),
            "device": cand.get("device", "cpu"),  # both figures' (the baseline's key says so)
            "method": "transformers forward of the quantised model in llm-compressor's "
                      "simulated (fake-quantised) form, before saving"}
