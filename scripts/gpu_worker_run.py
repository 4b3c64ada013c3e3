"""The workbench's quantize worker, run unchanged, with an observer around llm-compressor's
`oneshot` (scripts/gpu_quantize.py runs this once per case).

    python scripts/gpu_worker_run.py JOB.json PROMPTS.json OBSERVED.json FAKEQ.pt DEVICE

The worker (workbench/subprocesses/quantize_worker.py) is imported from its file and its
main() called with `JOB.json --expect-device DEVICE`, as the workbench invokes it
(quantize/build.py, run_worker). Its
`from llmcompressor import oneshot` happens inside main(), so replacing the attribute
first gives it the observer, which calls the real oneshot and then, before the worker
saves (saving compresses the weights in place), runs the fake-quantised model on the
prompts: those log-probabilities are what the reloaded checkpoint must reproduce. Also
written: the devices the model's weights were on after oneshot, and torch's peak CUDA
memory in this process.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "workbench" / "subprocesses" / "quantize_worker.py"
sys.path.insert(0, str(REPO / "scripts"))
from gpu_fidelity import passage_logprobs  # noqa: E402

__all__ = ["load_worker", "observe"]


def load_worker() -> Any:
    spec = importlib.util.spec_from_file_location("quantize_worker", WORKER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def observe(worker: Any, job: dict, prompts: list[str], seq_len: int, facts: dict,
            fakeq: Path) -> None:
    """Put the observer in place of llmcompressor.oneshot."""
    import llmcompressor
    import torch
    from transformers import AutoTokenizer

    real = llmcompressor.oneshot

    def observed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = real(*args, **kwargs)
        facts["oneshot_s"] = round(time.perf_counter() - started, 2)
        model = kwargs["model"]
        facts["weight_devices_after_oneshot"] = sorted({str(p.device)
                                                        for p in model.parameters()})
        # where the forward runs: an offloaded model's onload device (the worker's own
        # answer, as its perplexity uses), not where its weights rest
        device = str(worker.execution_device(model))
        tok = AutoTokenizer.from_pretrained(job["model_dir"])
        started = time.perf_counter()
        torch.save(passage_logprobs(model, tok, prompts, device, seq_len), fakeq)
        facts["fake_quant_forward"] = {"device": device,
                                       "seconds": round(time.perf_counter() - started, 2)}
        return result

    llmcompressor.oneshot = observed


def main(argv: list[str]) -> int:
    job_file, prompts_file, observed_file, fakeq, expect = argv
    import torch

    job = json.loads(Path(job_file).read_text())
    prompts = json.loads(Path(prompts_file).read_text())
    facts: dict[str, Any] = {}
    worker = load_worker()
    observe(worker, job, prompts["texts"], prompts["seq_len"], facts, Path(fakeq))
    try:
        worker.main([job_file, "--expect-device", expect])
    finally:
        facts["cuda_max_memory_allocated"] = (torch.cuda.max_memory_allocated()
                                              if torch.cuda.is_available() else 0)
        Path(observed_file).write_text(json.dumps(facts, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
