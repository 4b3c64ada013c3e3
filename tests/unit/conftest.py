"""The unit tier never touches the user's cache: each test gets a cache folder of its own
whose one link is to the installed environments (a few checks run vLLM's own argument
parser there). No converted model, no artifacts, no cached measurements: a unit test that
needs a model gets a stand-in: the default model's place holds a folder with SmolLM2's
shapes in its config.json and no weights, which is all the up-front checks read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.mechanisms.paths import cache_root, default_model_dir

# SmolLM2-135M-Instruct's config.json, the fields the checks read (heads for tensor
# parallelism, widths for the int4 group size, the context length)
SMOLLM2_SHAPES = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                  "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
                  "num_key_value_heads": 3, "head_dim": 64, "num_hidden_layers": 30,
                  "max_position_embeddings": 8192, "vocab_size": 49152}
USER_CACHE = cache_root()  # read once, before any test points it elsewhere


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> Path:
    scratch = tmp_path_factory.mktemp("unit-cache")
    if (USER_CACHE / "envs").exists():
        (scratch / "envs").symlink_to(USER_CACHE / "envs")
    monkeypatch.setenv("WORKBENCH_CACHE", str(scratch))
    stand_in = default_model_dir()
    stand_in.mkdir(parents=True)
    (stand_in / "config.json").write_text(json.dumps(SMOLLM2_SHAPES))
    return scratch


@pytest.fixture(autouse=True)
def avx512_host(tmp_path_factory: pytest.TempPathFactory,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Unit tests see the same CPU on every machine, uncapped: an x86 with AVX-512 and
    native bf16 (AMX), where vLLM-CPU serves every format the checks know and bf16 is the
    compute dtype (test_formats.py and test_compute_dtype.py cover the other CPUs)."""
    from workbench.mechanisms import host

    cpuinfo = tmp_path_factory.mktemp("host") / "cpuinfo"
    cpuinfo.write_text("model name\t: unit-test CPU\nflags\t\t: avx2 avx512f avx512dq "
                       "avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile\n")
    monkeypatch.setattr(host, "CPUINFO", cpuinfo)
    monkeypatch.delenv(host.ISA_CAP_ENV, raising=False)
    host.cpu_vector_isa.cache_clear()
    yield
    host.cpu_vector_isa.cache_clear()
