"""Dequantise a weight-only compressed-tensors checkpoint (int4 W4A16) into a dense one of
the baseline's dtype. Runs in the quantiser environment.

Invoked by the workbench as ``<quant-env>/bin/python dequantize_worker.py JOB.json``;
imports nothing from the workbench. job: artifact_dir, baseline_dir, out_dir, result_file.

A W4A16 kernel dequantises each group of weights (scale x (q - zero)) to 16-bit and
multiplies in 16-bit; the quality of such a model is a property of those dequantised
weights. They come from compressed-tensors' own decompression (transformers' loader with
`CompressedTensorsConfig(dequantize=True)`), computed in float32, where the product of a
16-bit scale and a 4-bit integer is exact, and stored in the baseline's dtype. The out_dir
is the baseline folder with each of its weights replaced by the artifact's, so its config
(no quantization_config: the engine serves it dense), tokenizer, chat template and
generation defaults are the baseline's byte for byte, as the comparability gate asks.
"""

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def phase(text: str) -> None:
    """A line the workbench shows as progress (quantize/build.py, latest_progress)."""
    print(f"[workbench] {text}", flush=True)


def dequantised_weights(artifact: Path) -> dict[str, Any]:
    """Every tensor of the artifact's model, its quantised weights dequantised, in float32."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig

    model = AutoModelForCausalLM.from_pretrained(
        artifact, dtype=torch.float32,
        quantization_config=CompressedTensorsConfig(dequantize=True))
    return {name: tensor.detach() for name, tensor in model.state_dict().items()}


def replace_weights(baseline: Path, out: Path, dense: dict[str, Any]) -> dict[str, int]:
    """The baseline's shards rewritten with the artifact's tensors where names and shapes
    agree, each in the dtype the baseline stores it in. Counts the tensors replaced and
    those whose values changed (the quantised ones)."""
    from safetensors.torch import load_file, save_file

    replaced = changed = 0
    for shard in sorted(baseline.glob("*.safetensors")):
        tensors = load_file(shard)
        for name, tensor in tensors.items():
            new = dense.get(name)
            if new is None or tuple(new.shape) != tuple(tensor.shape):
                continue
            new = new.to(tensor.dtype)
            replaced += 1
            changed += int(not bool((new == tensor).all()))
            tensors[name] = new.contiguous()
        save_file(tensors, out / shard.name, metadata={"format": "pt"})
    return {"tensors_replaced": replaced, "tensors_changed": changed}


def main(argv: list[str] | None = None) -> None:
    job = json.loads(Path((sys.argv[1:] if argv is None else argv)[0]).read_text())
    started = time.perf_counter()
    baseline, out = Path(job["baseline_dir"]), Path(job["out_dir"])
    # every file of the baseline but its weights, byte for byte
    shutil.copytree(baseline, out, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.safetensors"))
    phase("dequantising (compressed-tensors' decompression)")
    dense = dequantised_weights(Path(job["artifact_dir"]))
    phase("writing the dense checkpoint")
    counts = replace_weights(baseline, out, dense)
    if counts["tensors_changed"] == 0:
        raise SystemExit(f"{job['artifact_dir']}: no weight differs from the baseline's: "
                         "not a weight-quantised checkpoint of this model")
    Path(job["result_file"]).write_text(json.dumps(
        {**counts, "wall_time_s": round(time.perf_counter() - started, 2)}))


if __name__ == "__main__":
    main()
