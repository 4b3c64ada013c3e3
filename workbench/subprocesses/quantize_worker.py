"""Quantise one model with llm-compressor. Runs in the quantiser environment.

Invoked by the workbench as ``<quant-env>/bin/python worker.py JOB.json [--expect-device
cuda|cpu]``; imports nothing from the workbench (that environment does not have it). Reads
the job, writes a compressed-tensors checkpoint into job["out_dir"] and its facts into
job["result_file"]: wall time, peak memory, the device calibration ran on, the scheme of
every quantised layer, and the held-out perplexity of the model before and after
quantisation, both on that device.
"""

import argparse
import json
import math
import os
import resource
import shutil
import sys
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any, NoReturn

# sysexits' EX_CONFIG: this environment cannot quantise for the engine's device. The
# workbench turns it into its input error, exit 2 (quantize/build.py, EXIT_DEVICE_MISMATCH).
EXIT_DEVICE_MISMATCH = 78

KV_FP8 = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
          "symmetric": True}


def _int_weights(bits: int, job: dict) -> dict:
    weights = {"num_bits": bits, "type": "int", "symmetric": job.get("symmetric", True),
               "strategy": "group", "group_size": job["group_size"]}
    return {**weights, **({"actorder": job["actorder"]} if job.get("actorder") else {})}


def weight_only_groups(job: dict) -> tuple[dict, list[str]]:
    """An integer weight-only recipe's config groups and ignore list: every Linear at the
    recipe's bits, the modules an override names at 8 bits (an exact name or a pattern is
    matched before the class name, compressed-tensors' rule), or left in 16-bit."""
    bits = 4 if job["recipe"] == "w4a16" else 8
    groups = {"group_0": {"targets": ["Linear"], "weights": _int_weights(bits, job)}}
    eight = [t for o in job.get("overrides", []) if o["bits"] == 8 for t in o["targets"]]
    if eight:
        groups["group_1"] = {"targets": eight, "weights": _int_weights(8, job)}
    kept = [t for o in job.get("overrides", []) if o["bits"] == 16 for t in o["targets"]]
    return groups, [*job["ignore"], *kept]


def weight_only_recipe(job: dict) -> Any:
    """GPTQ (the presets), AWQ's scales then round-to-nearest, or round-to-nearest alone."""
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.transform import AWQModifier

    groups, ignore = weight_only_groups(job)
    method = job.get("method", "gptq")
    if method == "gptq":
        return GPTQModifier(targets="Linear", ignore=ignore, config_groups=groups)
    rtn = QuantizationModifier(targets="Linear", ignore=ignore, config_groups=groups)
    return [AWQModifier(), rtn] if method == "awq" else rtn


def build_recipe(job: dict) -> Any:
    """The llm-compressor modifiers for a built-in recipe, or the user's recipe file."""
    if job.get("recipe_file"):
        return job["recipe_file"]  # passed through unchanged
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.transform import SmoothQuantModifier

    recipe, ignore = job["recipe"], job["ignore"]
    if recipe in ("w4a16", "w8a16"):
        return weight_only_recipe(job)
    if recipe == "w8a8-int8":
        return [SmoothQuantModifier(smoothing_strength=job["smoothing_strength"]),
                GPTQModifier(targets="Linear", scheme="W8A8", ignore=ignore)]
    if recipe == "fp8-dynamic":
        return QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=ignore)
    if recipe == "kv-fp8":
        return QuantizationModifier(kv_cache_scheme=KV_FP8, ignore=ignore)
    if recipe == "fp8-dynamic+kv-fp8":
        return QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=ignore,
                                    kv_cache_scheme=KV_FP8)
    raise SystemExit(f"unknown recipe {recipe!r}")


def no_pinning_on_cpu() -> None:
    """AWQ pins its cached activations for faster host-to-device copies
    (llmcompressor 0.14, transform/awq/base.py: IntermediatesCache.pin_memory), which a
    CPU-only torch refuses ("Cannot access accelerator device when none is available").
    Calibrating on the CPU there is nothing to copy to: pinning is skipped."""
    from llmcompressor.pipelines.cache import IntermediatesCache

    IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None


def calibration_dataset(job: dict, tokenizer: Any) -> Any:
    from datasets import Dataset

    texts = json.loads(Path(job["samples_file"]).read_text())
    ds = Dataset.from_dict({"text": texts})
    return ds.map(
        lambda row: tokenizer(row["text"], truncation=True, max_length=job["seq_len"],
                              add_special_tokens=False),
        remove_columns=["text"],
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="quantise one model with llm-compressor")
    parser.add_argument("job", help="the job file the workbench wrote")
    parser.add_argument("--expect-device", choices=("cuda", "cpu"), default=None,
                        help="the device the engine serves on: the quantiser must use it")
    return parser.parse_args(argv)


def pin_to_cpu(expect: str | None) -> None:
    """An engine on the CPU: calibrate there too, so the baseline perplexity's cache key
    (which names the expected device) says where it was measured. Before CUDA is first
    initialised, which reads this variable."""
    if expect == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def device_refusal(expect: str | None) -> str | None:
    """Why this environment cannot quantise for an engine on `expect`, or None. Asked of
    torch alone, before llm-compressor is imported or the model loaded: without it
    llm-compressor logs "No accelerator available! Compressing model on CPU instead"
    (llmcompressor/utils/dev.py, get_main_device) and takes hours on an 8B model."""
    import torch

    if expect != "cuda" or torch.cuda.is_available():
        return None
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (f"the engine serves on cuda but the quantiser's torch {torch.__version__} sees no "
            "CUDA device" + (f" (CUDA_VISIBLE_DEVICES={hidden!r})" if hidden is not None
                             else "") + f"; its python: {sys.executable}")


def calibration_device(expect: str | None) -> Any:
    """The device llm-compressor's pipelines will run the model on: its own choice
    (get_main_device, which the sequential and data-free pipelines onload to), checked
    against the engine's."""
    from llmcompressor.utils.dev import get_main_device

    device = get_main_device()
    if expect is not None and device.type != expect:
        refuse(f"the engine serves on {expect} but llm-compressor would calibrate on "
               f"{device.type}")
    return device


def refuse(line: str) -> NoReturn:
    print(line, file=sys.stderr, flush=True)
    raise SystemExit(EXIT_DEVICE_MISMATCH)


def place(model: Any, device: Any) -> None:
    """Run the baseline where oneshot will run the candidate: onloaded to the accelerator
    module by module, as llm-compressor's pipelines do (compressed_tensors.offload's
    set_onload_device; a model so placed before oneshot is what llm-compressor's own
    load_context gives it). On the CPU nothing is moved, as before."""
    if device.type != "cpu":
        from compressed_tensors.offload import set_onload_device

        set_onload_device(model, device)


def execution_device(model: Any) -> Any:
    """Where the model's forward runs: the onload device of a model llm-compressor has
    offloaded (it stays so after oneshot), else where its weights are."""
    from compressed_tensors.offload import get_execution_device

    return get_execution_device(model)


def accelerator_facts(device: Any) -> dict | None:
    """Which GPU calibration ran on (None on the CPU)."""
    import torch

    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return {"name": torch.cuda.get_device_name(index), "capability": f"{major}.{minor}",
            "index": index, "device_count": torch.cuda.device_count(),
            "cuda": torch.version.cuda}


def heldout_perplexity(model: Any, tokenizer: Any, texts: list[str], seq_len: int) -> dict:
    """Token-weighted perplexity over the held-out passages, batched, on the device the
    model executes on (the calibration device, for the baseline and the candidate alike).

    Written here rather than taken from lm-eval: lm-eval's perplexity tasks need a dataset
    from the hub and a model it loads itself, and this must run on the in-memory model that
    llm-compressor just quantised (the same fake-quantised forward it calibrated).
    """
    import torch

    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = execution_device(model)
    nll, tokens = 0.0, 0
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(texts), 8):
            batch = tokenizer(texts[start:start + 8], truncation=True, max_length=seq_len,
                              padding=True, return_tensors="pt").to(device)
            logits = model(**batch).logits[:, :-1].float()
            labels = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0,
                                                           -100)
            nll += torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100,
                reduction="sum").item()
            tokens += int((labels != -100).sum())
    return {"perplexity": round(math.exp(nll / tokens), 4), "tokens": tokens,
            "seconds": round(time.perf_counter() - started, 2), "device": device.type}


def scheme_summary(model: Any) -> dict:
    """How each kind of layer was quantised: one row per (layer kind, scheme)."""
    import torch

    rows: Counter = Counter()
    params: Counter = Counter()
    for name, module in model.named_modules():
        scheme = getattr(module, "quantization_scheme", None)
        if not isinstance(module, torch.nn.Linear):
            continue
        kind = ".".join(p for p in name.split(".") if not p.isdigit()).removeprefix("model.")
        w = scheme.weights if scheme else None
        a = scheme.input_activations if scheme else None
        text = "weights " + (f"{w.type}{w.num_bits} {w.strategy}"
                             + (f"({w.group_size})" if w.group_size else "")
                             + ("" if w.symmetric else " asymmetric") if w else "16-bit")
        text += ", activations " + (f"{a.type}{a.num_bits} {a.strategy}"
                                    + (" dynamic" if a.dynamic else " static") if a else "16-bit")
        weight = module.weight
        rows[(kind, text)] += 1
        params[(kind, text)] += weight.numel()
    return {"layers": [{"layer": k, "scheme": s, "count": n, "params": params[(k, s)]}
                       for (k, s), n in sorted(rows.items())]}


def _load(job: dict) -> Any:
    """The model in the dtype the quantiser computes in (the job's compute_dtype: bf16,
    or float32 on a CPU that emulates bf16, mechanisms/host.py in the workbench)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, job.get("compute_dtype") or "bfloat16")
    model = AutoModelForCausalLM.from_pretrained(job["model_dir"], dtype=dtype)
    return model, AutoTokenizer.from_pretrained(job["model_dir"])


def stored_dtype(model_dir: Path) -> str:
    """The float type the baseline checkpoint stores its weights in (config.json)."""
    config = json.loads((model_dir / "config.json").read_text())
    text = config.get("text_config") or {}
    return str(config.get("dtype") or config.get("torch_dtype") or text.get("dtype")
               or text.get("torch_dtype") or "bfloat16")


def store_as(out: Path, dtype_name: str) -> int:
    """Rewrite a saved checkpoint's float32 tensors in ``dtype_name`` and name it in
    config.json, so a checkpoint computed in float32 is stored as the baseline is; the
    compressed integer and FP8 tensors are left as they are. After compression, so the
    integers were rounded against the float32 scales the calibration chose. Returns the
    tensors cast."""
    import torch
    from safetensors.torch import load_file, save_file

    dtype = getattr(torch, dtype_name)
    cast, saved_bytes = 0, 0
    for file in sorted(out.glob("*.safetensors")):
        tensors = load_file(file)
        wide = [name for name, t in tensors.items() if t.dtype == torch.float32]
        if wide:
            tensors.update({name: tensors[name].to(dtype) for name in wide})
            saved_bytes += sum(tensors[name].numel() for name in wide) * (
                4 - tensors[wide[0]].element_size())
            save_file(tensors, file, metadata={"format": "pt"})
            cast += len(wide)
    index_file = out / "model.safetensors.index.json"
    if index_file.is_file():  # a sharded checkpoint's total, as transformers wrote it
        index = json.loads(index_file.read_text())
        if "total_size" in index.get("metadata", {}):
            index["metadata"]["total_size"] -= saved_bytes
            index_file.write_text(json.dumps(index, indent=2) + "\n")
    config_file = out / "config.json"
    config = json.loads(config_file.read_text())
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = dtype_name
    config_file.write_text(json.dumps(config, indent=2) + "\n")
    return cast


def _heldout(job: dict) -> list[str]:
    return json.loads(Path(job["heldout_file"]).read_text()) if job.get("heldout_file") else []


# The tokenizer, chat template and generation defaults as the baseline has them, byte for
# byte: the loaded tokenizer was given a pad token for batching above, and saving it (or
# the model's generation config) would write that, and transformers' own defaults, into the
# candidate (docs/gates.md, "Only the candidate differs": the comparability gate compares
# these files' digests).
MODEL_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt",
                   "tokenizer.model", "added_tokens.json", "generation_config.json")


def copy_model_files(model_dir: Path, out: Path) -> None:
    for name in MODEL_FILES:
        if (model_dir / name).is_file():
            shutil.copyfile(model_dir / name, out / name)


def phase(text: str) -> None:
    """A line the workbench shows as progress (quantize/__init__.py, latest_progress)."""
    print(f"[workbench] {text}", flush=True)


def device_facts(ran_on: Any) -> dict:
    """Where calibration ran, read from the model llm-compressor calibrated (not from
    whether CUDA answers), and what it held of the GPU."""
    import torch

    cuda = ran_on.type == "cuda"
    return {"device": ran_on.type, "accelerator": accelerator_facts(ran_on),
            "peak_gpu_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda
            else None}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    pin_to_cpu(args.expect_device)
    problem = device_refusal(args.expect_device)
    if problem:
        refuse(problem)
    job = json.loads(Path(args.job).read_text())
    import torch
    from llmcompressor import oneshot

    torch.manual_seed(job["seed"])
    started = time.perf_counter()
    device = calibration_device(args.expect_device)
    phase(f"loading the model (calibration on {device}, "
          f"in {job.get('compute_dtype') or 'bfloat16'})")
    model, tokenizer = _load(job)
    place(model, device)
    heldout = _heldout(job)
    fidelity = {}
    if heldout and job.get("baseline_perplexity") is None:
        phase(f"held-out perplexity of the baseline ({len(heldout)} passages)")
        fidelity["baseline"] = heldout_perplexity(model, tokenizer, heldout, job["seq_len"])
    kwargs = {}
    if job["needs_data"]:
        kwargs = dict(dataset=calibration_dataset(job, tokenizer),
                      num_calibration_samples=job["num_samples"], max_seq_length=job["seq_len"],
                      shuffle_calibration_samples=False)
    quant_started = time.perf_counter()
    phase("calibrating" if job["needs_data"] else "quantising (data-free)")
    if device.type == "cpu":
        no_pinning_on_cpu()
    oneshot(model=model, recipe=build_recipe(job), **kwargs)
    oneshot_s = time.perf_counter() - quant_started
    ran_on = execution_device(model)
    # Measured before saving: saving compresses the weights in place.
    if heldout:
        phase(f"held-out perplexity of the candidate ({len(heldout)} passages)")
        fidelity["candidate"] = heldout_perplexity(model, tokenizer, heldout, job["seq_len"])
    summary = scheme_summary(model)
    out = Path(job["out_dir"])
    phase("saving the compressed checkpoint")
    model.save_pretrained(out, save_compressed=True)
    stored = stored_dtype(Path(job["model_dir"]))
    compute = job.get("compute_dtype") or "bfloat16"
    if compute != stored and stored in ("bfloat16", "float16"):
        phase(f"storing the {compute} checkpoint's float tensors as {stored}, as the baseline")
        store_as(out, stored)
    copy_model_files(Path(job["model_dir"]), out)
    result = {
        "wall_time_s": round(time.perf_counter() - started, 2),
        "oneshot_s": round(oneshot_s, 2),
        **device_facts(ran_on),
        "compute_dtype": compute, "stored_dtype": stored,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "scheme_summary": summary,
        "heldout_perplexity": fidelity,
        "library_versions": {name: version(name) for name in
                             ("llmcompressor", "compressed-tensors", "torch", "transformers")},
    }
    Path(job["result_file"]).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
