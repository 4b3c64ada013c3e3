"""Where the quantiser runs (issue 35, items 4 and 5), checked against llm-compressor's
own code in the quantiser environment: with CUDA hidden this machine is what
llm-compressor 0.14 calls "No accelerator available!" (llmcompressor/utils/dev.py,
get_main_device), the state of a quantiser whose torch cannot use the engine's GPU.

The workers run for real (quant env); the tiny random Llama is built there too, from the
same shape as tests/integration/conftest.py's, with SmolLM2's tokenizer.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.mechanisms.digests import sha256_json
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.paths import default_model_dir, offline_env, quant_python
from workbench.quantize import build, checks, sensitivity
from workbench.quantize.heldout import baseline_perplexity_file
from workbench.subprocesses import quantize_worker, sensitivity_worker

NEEDS_QUANT_ENV = pytest.mark.skipif(
    not quant_python().exists() or not (default_model_dir() / "tokenizer.json").exists(),
    reason="run scripts/setup.sh first (the quantiser environment and the default model)")
NO_ACCELERATOR = "No accelerator available! Compressing model on CPU instead"  # dev.py's
TEXTS = ["The quick brown fox jumps over the lazy dog, twice over. " * 3,
         "Once upon a time a small model was quantised on the wrong device.",
         "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12.", "A short line."]

TINY_LLAMA = """
import shutil, sys
from pathlib import Path
import torch
from transformers import LlamaConfig, LlamaForCausalLM
out, tok = Path(sys.argv[1]), Path(sys.argv[2])
config = LlamaConfig(vocab_size=49152, hidden_size=128, intermediate_size=256,
    num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
    max_position_embeddings=2048, bos_token_id=1, eos_token_id=2, pad_token_id=2,
    tie_word_embeddings=True)
torch.manual_seed(0)
LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    if (tok / name).exists():
        shutil.copy(tok / name, out / name)
"""


@pytest.fixture()
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """CUDA hidden from the workers (run_worker passes this process's environment on)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    checks._quantiser_torch.cache_clear()
    yield
    checks._quantiser_torch.cache_clear()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([str(quant_python()), "-c", TINY_LLAMA, str(out), str(default_model_dir())],
                   check=True, capture_output=True, env=offline_env(), timeout=300)
    return out


def _job(tmp_path: Path, model_dir: Path) -> dict:
    (tmp_path / "heldout.json").write_text(json.dumps(TEXTS))
    return {"model_dir": str(model_dir), "out_dir": str(tmp_path / "out"),
            "recipe": "fp8-dynamic", "ignore": ["lm_head"], "recipe_file": None,
            "needs_data": False, "samples_file": None, "num_samples": 0, "seq_len": 64,
            "seed": 0, "heldout_file": str(tmp_path / "heldout.json"),
            "baseline_perplexity": None, "result_file": str(tmp_path / "result.json"),
            # what the sensitivity worker reads
            "bits": 4, "group_size": 64}


def test_the_workers_exit_code_is_the_one_the_workbench_maps() -> None:
    assert quantize_worker.EXIT_DEVICE_MISMATCH == build.EXIT_DEVICE_MISMATCH
    assert sensitivity_worker.EXIT_DEVICE_MISMATCH == build.EXIT_DEVICE_MISMATCH


@NEEDS_QUANT_ENV
@pytest.mark.parametrize("worker", [build.WORKER, sensitivity.WORKER], ids=lambda w: w.stem)
def test_a_quantiser_without_the_engines_gpu_is_refused_before_loading(
        worker: Path, tmp_path: Path, no_cuda: None) -> None:
    # No model at all: a refusal that came after loading would fail on the folder instead.
    job = _job(tmp_path, tmp_path / "no-such-model")
    log = tmp_path / "worker.log"
    with pytest.raises(InputError) as err:
        build.run_worker(job, log, lambda _s: None, worker=worker, expect_device="cuda")
    line = str(err.value)
    assert err.value.exit_code == 2
    assert "\n" not in line
    assert line.startswith("the engine serves on cuda but the quantiser's torch 2.")
    assert "sees no CUDA device" in line and str(log) in line
    assert "no-such-model" not in log.read_text()  # never got as far as the model


@NEEDS_QUANT_ENV
def test_the_manifest_names_the_device_calibration_ran_on_and_both_perplexities_use_it(
        tiny_model: Path, tmp_path: Path, no_cuda: None) -> None:
    job = _job(tmp_path, tiny_model)
    log = tmp_path / "quantize.log"
    build.run_worker(job, log, lambda _s: None, expect_device="cpu")
    facts = json.loads((tmp_path / "result.json").read_text())
    # llm-compressor itself chose the CPU (its get_main_device's warning), and the record
    # says where the model ran, with no GPU named
    assert NO_ACCELERATOR in log.read_text()
    assert facts["device"] == "cpu"
    assert facts["accelerator"] is None and facts["peak_gpu_mb"] is None
    ppl = facts["heldout_perplexity"]
    assert ppl["baseline"]["device"] == ppl["candidate"]["device"] == "cpu"
    assert ppl["baseline"]["tokens"] == ppl["candidate"]["tokens"] > 0


@NEEDS_QUANT_ENV
def test_the_up_front_probe_names_the_quantisers_torch(no_cuda: None) -> None:
    problem = checks.quantiser_device_problem("cuda")
    assert problem is not None
    assert problem.startswith("the engine serves on cuda but the quantiser's torch 2.")
    assert "sees no CUDA device" in problem and str(quant_python()) in problem
    assert checks._quantiser_torch.cache_info().currsize == 1
    assert checks.quantiser_device_problem("cuda") == problem  # asked once per process
    assert checks._quantiser_torch.cache_info().hits == 1


def test_an_engine_on_the_cpu_costs_no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_subprocess(*_a: object, **_k: object) -> None:
        raise AssertionError("the quantiser's python was asked")

    monkeypatch.setattr(checks.subprocess, "run", no_subprocess)
    assert checks.quantiser_device_problem("cpu") is None


def test_the_baseline_perplexity_is_cached_per_device_and_the_cpus_key_is_unchanged() -> None:
    args = ("m" * 64, TEXTS, 64, {"torch": "2.13.0"})
    on_cpu = baseline_perplexity_file(*args, "cpu")
    on_gpu = baseline_perplexity_file(*args, "cuda")
    assert on_cpu != on_gpu
    # the key that older workbenches wrote on the CPU: cached figures stay valid there
    old = sha256_json({"model": args[0], "heldout": TEXTS, "seq_len": 64,
                       "versions": args[3]})
    assert on_cpu.name == f"baseline-{old[:24]}.json"


def test_layer_sensitivity_is_cached_per_device_and_the_cpus_key_is_unchanged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sensitivity, "quant_library_versions", lambda: {"torch": "2.13.0"})
    on_cpu = sensitivity.sensitivity_key("m" * 64, (4, 64), TEXTS, 64, "cpu")
    assert on_cpu != sensitivity.sensitivity_key("m" * 64, (4, 64), TEXTS, 64, "cuda")
    assert on_cpu == sha256_json({
        "model": "m" * 64, "bits": 4, "group_size": 64, "texts": TEXTS, "seq_len": 64,
        "versions": {"torch": "2.13.0"},
        "worker": sha256_json(sensitivity.WORKER.read_text())})
