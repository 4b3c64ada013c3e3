"""Quantise one model with llm-compressor. Runs in the quantiser environment.

Invoked by the workbench as ``<quant-env>/bin/python worker.py JOB.json``; imports nothing
from the workbench (that environment does not have it). Reads the job, writes a
compressed-tensors checkpoint into job["out_dir"] and its facts into job["result_file"].
"""

import json
import resource
import sys
import time
from importlib.metadata import version
from pathlib import Path


def build_recipe(job: dict):
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier

    recipe, ignore = job["recipe"], job["ignore"]
    if recipe == "w4a16":
        weights = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                   "group_size": job["group_size"]}
        return GPTQModifier(targets="Linear", ignore=ignore,
                            config_groups={"group_0": {"targets": ["Linear"], "weights": weights}})
    if recipe == "fp8-dynamic":
        return QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=ignore)
    raise SystemExit(f"unknown recipe {recipe!r}")


def calibration_dataset(job: dict, tokenizer):
    from datasets import Dataset

    texts = json.loads(Path(job["samples_file"]).read_text())
    ds = Dataset.from_dict({"text": texts})
    return ds.map(
        lambda row: tokenizer(row["text"], truncation=True, max_length=job["seq_len"],
                              add_special_tokens=False),
        remove_columns=["text"],
    )


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    import torch
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(job["seed"])
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(job["model_dir"], dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(job["model_dir"])
    kwargs = {}
    if job["needs_data"]:
        kwargs = dict(dataset=calibration_dataset(job, tokenizer),
                      num_calibration_samples=job["num_samples"], max_seq_length=job["seq_len"],
                      shuffle_calibration_samples=False)
    oneshot(model=model, recipe=build_recipe(job), **kwargs)
    out = Path(job["out_dir"])
    model.save_pretrained(out, save_compressed=True)
    tokenizer.save_pretrained(out)
    result = {
        "wall_time_s": round(time.perf_counter() - started, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "library_versions": {name: version(name) for name in
                             ("llmcompressor", "compressed-tensors", "torch", "transformers")},
    }
    Path(job["result_file"]).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
