"""The tiny model: a random Llama with SmolLM2's real tokenizer, built once per session.

Hidden 128 with 2 heads gives head_dim 64, which vLLM's CPU attention supports; every
linear layer's input width (128, 256) is divisible by the int4 group size 64.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from quantised import FRAGILE_BLOCK

from workbench.mechanisms.paths import (
    default_model_dir,
    engine_python,
    link_shared_cache,
    quant_python,
)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = [p for p in (engine_python(), quant_python(), default_model_dir() / "config.json")
               if not p.exists()]
    if missing:
        for item in items:
            if "integration" in item.keywords:
                item.add_marker(pytest.mark.skip(
                    reason=f"run scripts/setup.sh first (missing {missing[0]})"))


@pytest.fixture(scope="session", autouse=True)
def cold_caches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Empty artifact and result caches for the session, so every run of the suite really
    quantises and really measures the baseline; environments and models are shared."""
    scratch = link_shared_cache(tmp_path_factory.mktemp("cache"))
    previous = os.environ.get("WORKBENCH_CACHE")
    os.environ["WORKBENCH_CACHE"] = str(scratch)
    yield scratch
    if previous is None:
        os.environ.pop("WORKBENCH_CACHE", None)
    else:
        os.environ["WORKBENCH_CACHE"] = previous


def random_llama(blocks: int) -> Any:
    """A random bf16 Llama with SmolLM2's vocabulary: hidden 128, 2 heads of 64."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=49152, hidden_size=128, intermediate_size=256, num_hidden_layers=blocks,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64,
        max_position_embeddings=2048, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(torch.bfloat16)


def save_with_tokenizer(model: Any, out: Path) -> Path:
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (default_model_dir() / name).exists():
            shutil.copy(default_model_dir() / name, out / name)
    return out


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_with_tokenizer(random_llama(2), tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def fragile_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny four-block Llama that int4 groups break in one known block (2) and no other:
    four of its intermediate units are switched off (their gate rows are zero), so weights
    on them change nothing in 16 bits, yet they are large enough that each group of 64
    holding one rounds every other weight of block 2's down projection to zero."""
    import torch

    model = random_llama(4)
    with torch.no_grad():
        model.model.norm.weight.mul_(10)  # sharper next-token distributions than random init
        mlp = model.model.layers[FRAGILE_BLOCK].mlp
        mlp.down_proj.weight.mul_(4)      # a block that matters to the output
        mlp.gate_proj.weight[::64] = 0
        mlp.down_proj.weight[:, ::64] = 2.0
    return save_with_tokenizer(model, tmp_path_factory.mktemp("fragile-llama"))


@pytest.fixture()
def broken_model(tiny_model: Path, tmp_path: Path) -> Path:
    """The tiny model with its weights scrambled: a candidate every fidelity gate must
    reject."""
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path / "broken"
    shutil.copytree(tiny_model, out)
    weights = load_file(out / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    # Rows of every matrix shuffled, and the (tied) embeddings scaled up: a random model's
    # next-token distribution is nearly flat, so shuffling alone barely moves it (KL ~0);
    # sharper logits make the damage visible, as it would be on a trained model.
    scrambled = {name: w[torch.randperm(w.shape[0], generator=generator)]
                 if w.dim() == 2 and "embed" not in name else w for name, w in weights.items()}
    scrambled = {name: w * 30 if "embed" in name else w for name, w in scrambled.items()}
    save_file(scrambled, out / "model.safetensors", metadata={"format": "pt"})
    return out


def run_workbench(*args: str, cwd: Path, timeout: float = 1200,
                  echo: bool = False) -> subprocess.CompletedProcess:
    """The CLI as a subprocess, its output captured. Each stdout line's arrival is timed
    (the result's `line_times`, seconds since the start), so a test can hold the console
    to a line at least every so often; with echo, the lines also go to the test log as
    they come (the CI log then shows the run as a user's terminal would)."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ)
    lines: list[str] = []
    times: list[float] = []
    errors: list[str] = []

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            times.append(time.monotonic() - started)
            lines.append(line)
            if echo:
                sys.__stderr__.write(f"[workbench {times[-1]:6.1f}s] {line}")

    readers = [threading.Thread(target=read_stdout, daemon=True),
               threading.Thread(target=lambda: errors.extend(proc.stderr or []), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    finally:
        for reader in readers:
            reader.join(timeout=10)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines),
                                         "".join(errors))
    result.line_times = times  # type: ignore[attr-defined]
    return result


def find_pids(marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.fixture()
def workbench() -> Callable[..., subprocess.CompletedProcess]:
    """The real CLI in a subprocess, as a user runs it."""
    return run_workbench


@pytest.fixture()
def engine_pids() -> Callable[[str], list[int]]:
    return find_pids
