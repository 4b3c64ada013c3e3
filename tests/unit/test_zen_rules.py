"""The Zen platform's int4 rule (quantize/zen_rules.py) held to vLLM 0.32.0's own kernel
code: `ZentorchWNA16LinearKernel.process_weights_after_loading` is run on layers laid out as
compressed-tensors stores int4 (symmetric and asymmetric, bf16 and float32 activations,
several group sizes, W4A8 on and off), and the path it takes (the `_zentorch_kind` it sets,
or falling through to CPUWNA16) must be the rule's. zentorch itself is not installed here:
its two ops are stand-ins (a repack that returns its input) and the platform is told it is
Zen; every decision is vLLM's code."""

from __future__ import annotations

import itertools
import types

import pytest

from workbench.quantize.zen_rules import zen_int4_path

pytest.importorskip("vllm", reason="vLLM (the engine environment) is not importable here")
torch = pytest.importorskip("torch")


class _Ops:
    """torch.ops with zentorch's repack op stood in (it only repacks: a copy here)."""

    class zentorch:  # noqa: N801 - torch.ops.<namespace>
        class zentorch_woq_repack_weight:  # noqa: N801
            @staticmethod
            def default(w):
                return w.clone().view(torch.int32) if w.numel() % 4 == 0 else w.clone()


def _torch_with_zentorch_ops() -> types.SimpleNamespace:
    proxy = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch)
                                     if not k.startswith("__")})
    proxy.ops = _Ops
    return proxy


def _layer(out_features: int, in_features: int, group: int, symmetric: bool,
           packed_dim: int = 1) -> torch.nn.Module:
    """One linear layer's int4 parameters as vLLM loads a compressed-tensors checkpoint:
    eight 4-bit values per int32 along the input dimension, a scale per group, a packed
    zero point per group where asymmetric."""
    layer = torch.nn.Module()
    groups = 1 if group == -1 else in_features // group

    def param(t: torch.Tensor, **attrs: int) -> torch.nn.Parameter:
        p = torch.nn.Parameter(t, requires_grad=False)
        for k, v in attrs.items():
            setattr(p, k, v)
        return p

    layer.weight_packed = param(torch.randint(0, 2**31 - 1, (out_features, in_features // 8),
                                              dtype=torch.int32), input_dim=1,
                                packed_dim=packed_dim, output_dim=0)
    layer.weight_scale = param(torch.rand(out_features, groups, dtype=torch.bfloat16),
                               input_dim=1, output_dim=0)
    if not symmetric:
        layer.weight_zero_point = param(torch.randint(0, 2**31 - 1, (out_features // 8, groups),
                                                      dtype=torch.int32), packed_dim=0)
    return layer


def _vllm_path(monkeypatch: pytest.MonkeyPatch, symmetric: bool, act: torch.dtype,
               in_features: int, group: int, w4a8: bool, packed_dim: int = 1) -> str:
    from vllm.model_executor.kernels.linear.mixed_precision import zentorch
    from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import (
        MPLinearLayerConfig,
    )
    from vllm.scalar_type import scalar_types

    monkeypatch.setattr(zentorch, "has_zentorch_op", lambda names: True)
    monkeypatch.setattr(zentorch, "current_platform",
                        types.SimpleNamespace(is_zen_cpu=lambda: True))
    monkeypatch.setattr(zentorch, "torch", _torch_with_zentorch_ops())
    monkeypatch.setenv("VLLM_CPU_INT4_W4A8", "1" if w4a8 else "0")
    config = MPLinearLayerConfig(
        full_weight_shape=(in_features, 64), partition_weight_shape=(in_features, 64),
        weight_type=scalar_types.uint4b8 if symmetric else scalar_types.uint4,
        act_type=act, group_size=group, zero_points=not symmetric)
    takes, _ = zentorch.ZentorchWNA16LinearKernel.can_implement(config)
    if not takes:  # vLLM's selector goes on to the next kernel: CPUWNA16
        return "cpu_gemm_wna16"
    kernel = zentorch.ZentorchWNA16LinearKernel(
        config, "weight_packed", "weight_scale", None if symmetric else "weight_zero_point")
    layer = _layer(64, in_features, group, symmetric, packed_dim)
    fell_through: list[bool] = []
    monkeypatch.setattr(zentorch.CPUWNA16LinearKernel, "process_weights_after_loading",
                        lambda self, lyr: fell_through.append(True))
    kernel.process_weights_after_loading(layer)
    if fell_through:
        return "cpu_gemm_wna16"
    return {"compressed_tensors_w4a8_da8w4": "zentorch_dynamic_qlinear",
            "compressed_tensors_w4a16_gptq": "zentorch_woq_linear"}[layer._zentorch_kind]


# (input width, group size): the shipped groups; a group 6 wide (not a multiple of 4, which
# the int8 path's AOCL kernel needs); one group per row (-1); a group that does not divide
# the width (can_implement refuses it)
SHAPES = [(576, 64), (576, 32), (1536, 128), (48, 6), (576, -1), (576, 200)]
CASES = list(itertools.product([True, False], [torch.bfloat16, torch.float32], SHAPES,
                               [True, False]))


@pytest.mark.parametrize(("symmetric", "act", "shape", "w4a8"), CASES)
def test_the_rule_takes_the_path_vllms_zentorch_kernel_takes(
        monkeypatch: pytest.MonkeyPatch, symmetric: bool, act: torch.dtype,
        shape: tuple[int, int], w4a8: bool) -> None:
    in_features, group = shape
    dtype = "bfloat16" if act == torch.bfloat16 else "float32"
    expected = zen_int4_path(symmetric, dtype, in_features, group, w4a8=w4a8)
    assert _vllm_path(monkeypatch, symmetric, act, in_features, group, w4a8) == \
        expected.kernel


@pytest.mark.parametrize("symmetric", [True, False])
def test_another_packing_than_compressed_tensors_falls_through_as_the_rule_says(
        monkeypatch: pytest.MonkeyPatch, symmetric: bool) -> None:
    expected = zen_int4_path(symmetric, "bfloat16", 576, 64, packed_along_input=False)
    assert _vllm_path(monkeypatch, symmetric, torch.bfloat16, 576, 64, True,
                      packed_dim=0) == expected.kernel == "cpu_gemm_wna16"


def test_the_default_int4_runs_as_w4a8_there_and_asymmetric_stays_w4a16() -> None:
    """The shipped int4 (GPTQ, symmetric, groups of 64) served in bf16 on Zen is W4A8 with
    dynamic activations, what the recipe's name does not say; asymmetric int4, or float32
    activations, stay W4A16."""
    assert zen_int4_path(True, "bfloat16", 576, 64).label == \
        "W4A8 (dynamic int8 activations; zentorch DA8W4)"
    assert zen_int4_path(False, "bfloat16", 576, 64).label == "W4A16 (zentorch_woq_linear)"
    assert zen_int4_path(True, "float32", 576, 64).activations == "16-bit"
    assert zen_int4_path(True, "bfloat16", 576, 64, packed_along_input=False).kernel == \
        "cpu_gemm_wna16"


def test_the_record_states_w4a8_where_zen_serves_a_symmetric_bf16_grid() -> None:
    """zen_runs_as, the record's runs_as on AMD Zen's platform (quantize/formats.py): the
    default model's layers (576 and 1536 wide) at the shipped int4 grid run DA8W4."""
    from workbench.quantize.zen_rules import ZenInt4, zen_runs_as

    widths = (576, 576, 576, 1536)
    said = zen_runs_as(ZenInt4(True, 64, widths), "bfloat16")
    assert said is not None and said.startswith("W4A8 (dynamic int8 activations")
    assert zen_runs_as(ZenInt4(False, 64, widths), "bfloat16") is None  # zero points
    assert zen_runs_as(ZenInt4(True, 64, widths), "float32") is None
