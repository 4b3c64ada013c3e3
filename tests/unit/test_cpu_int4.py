"""int4 on vLLM-CPU's own platform runs as W4A8 where vLLM's CPUWNA16 kernel says so
(quantize/cpu_int4.py): its `process_weights_after_loading` is run on a compressed-tensors
int4 layer with AMX present or not, bf16 or float32 activations, VLLM_CPU_INT4_W4A8 on or
off, and which of its two weight layouts it prepares (W4A8's or W4A16's) must be the rule's;
the record's runs_as says so on such a machine and nowhere else."""

from __future__ import annotations

import itertools

import pytest

from workbench.quantize import formats
from workbench.quantize.cpu_int4 import W4A8_NOTE, cpu_int4_w4a8

pytest.importorskip("vllm", reason="vLLM (the engine environment) is not importable here")
torch = pytest.importorskip("torch")


def _vllm_w4a8(monkeypatch: pytest.MonkeyPatch, amx: bool, act: torch.dtype, flag: str
               ) -> bool:
    from vllm.model_executor.kernels.linear.mixed_precision import cpu
    from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import (
        MPLinearLayerConfig,
    )
    from vllm.scalar_type import scalar_types

    monkeypatch.setenv("VLLM_CPU_INT4_W4A8", flag)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    chosen: list[str] = []
    monkeypatch.setattr(cpu.CPUWNA16LinearKernel, "_process_gptq_weights_w4a8",
                        lambda self, layer: chosen.append("w4a8"))
    monkeypatch.setattr(cpu.CPUWNA16LinearKernel, "_process_gptq_weights_w4a16",
                        lambda self, layer: chosen.append("w4a16"))
    config = MPLinearLayerConfig(full_weight_shape=(128, 64), partition_weight_shape=(128, 64),
                                 weight_type=scalar_types.uint4b8, act_type=act, group_size=64,
                                 zero_points=False)
    kernel = cpu.CPUWNA16LinearKernel(config, "weight_packed", "weight_scale", None)
    layer = torch.nn.Module()
    for name, t, dims in (("weight_packed", torch.zeros(64, 16, dtype=torch.int32),
                           {"input_dim": 1, "packed_dim": 1, "output_dim": 0}),
                          ("weight_scale", torch.ones(64, 2, dtype=torch.bfloat16),
                           {"input_dim": 1, "output_dim": 0})):
        p = torch.nn.Parameter(t, requires_grad=False)
        for k, v in dims.items():
            setattr(p, k, v)
        setattr(layer, name, p)
    kernel.process_weights_after_loading(layer)
    assert chosen in (["w4a8"], ["w4a16"]) and layer.use_w4a8 == (chosen == ["w4a8"])
    return chosen == ["w4a8"]


@pytest.mark.parametrize(("amx", "act", "flag"), list(itertools.product(
    [True, False], [torch.bfloat16, torch.float32], ["1", "0"])))
def test_the_rule_is_vllms_cpu_kernel(monkeypatch: pytest.MonkeyPatch, amx: bool,
                                      act: torch.dtype, flag: str) -> None:
    dtype = "bfloat16" if act == torch.bfloat16 else "float32"
    assert cpu_int4_w4a8(dtype, amx, {"VLLM_CPU_INT4_W4A8": flag}) == \
        _vllm_w4a8(monkeypatch, amx, act, flag)


def test_the_record_says_w4a8_where_it_runs_and_nowhere_else(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.config.run_config import Candidate

    int4 = formats.format_of_candidate(Candidate(recipe="w4a16", group_size=64))
    int8 = formats.format_of_candidate(Candidate(recipe="w8a8-int8"))
    assert int4 is not None and int8 is not None
    monkeypatch.delenv("VLLM_CPU_INT4_W4A8", raising=False)
    monkeypatch.setattr(formats, "amx_tiles", lambda: True)  # a Sapphire Rapids
    assert formats.runs_as(int4, "cpu", None, "bfloat16") == W4A8_NOTE
    assert formats.runs_as(int4, "cpu", None, "float32") is None
    assert formats.runs_as(int4, "cpu", None, None) is None  # served dense: no int4 kernel
    assert formats.runs_as(int8, "cpu", None, "bfloat16") is None
    monkeypatch.setattr(formats, "amx_tiles", lambda: False)  # AMD Zen 4
    assert formats.runs_as(int4, "cpu", None, "bfloat16") is None
