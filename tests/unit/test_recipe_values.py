"""Integer weight-only recipes as values (config/candidate.py): method, symmetric, group
size, activation order and per-module overrides; the presets are the space's defaults and
keep their artifact keys; bad values are refused up front naming the field; and what the
quantize worker writes for each value is held against vLLM's own loading code on a CPU
(which compressed-tensors schemes it loads, which CPU kernel takes them)."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from workbench.cli import main
from workbench.config.run_config import Candidate
from workbench.quantize.build import artifact_key, needs_calibration
from workbench.quantize.formats import format_of_candidate, unsupported_reason
from workbench.subprocesses.quantize_worker import weight_only_groups

REPO = Path(__file__).resolve().parents[2]


def key(cand: Candidate) -> str:
    return artifact_key("model", cand.recipe_params(), "samples", {"llmcompressor": "0.14"})


def test_the_presets_are_the_spaces_defaults_and_keep_their_keys() -> None:
    preset = Candidate(recipe="w4a16", group_size=64)
    assert preset.recipe_params() == {"recipe": "w4a16", "ignore": ["lm_head"],
                                      "group_size": 64}  # what every earlier key hashed
    spelled = Candidate(recipe="w4a16", group_size=64, method="gptq", symmetric=True)
    assert key(spelled) == key(preset)
    assert preset.weight_values() == {"method": "gptq", "bits": 4, "symmetric": True,
                                      "group_size": 64, "actorder": "static", "overrides": []}
    assert Candidate(recipe="w8a8-int8").weight_values() == {}
    variants = [Candidate(recipe="w4a16", group_size=64, symmetric=False),
                Candidate(recipe="w4a16", group_size=32),
                Candidate(recipe="w4a16", group_size=64, method="awq"),
                Candidate(recipe="w4a16", group_size=64, method="rtn"),
                Candidate(recipe="w4a16", group_size=64, actorder="weight"),
                Candidate(recipe="w4a16", group_size=64,
                          overrides=[{"targets": ["re:.*down_proj"], "bits": 16}])]
    keys = {key(v) for v in variants}
    assert len(keys) == len(variants) and key(preset) not in keys
    awq = Candidate(recipe="w4a16", method="awq")
    assert awq.resolved_symmetric is False  # AWQ's own default: a zero point per group
    assert not needs_calibration(Candidate(recipe="w4a16", method="rtn"))
    assert needs_calibration(awq) and needs_calibration(preset)


@pytest.mark.parametrize(("values", "says"), [
    ({"recipe": "w8a8-int8", "symmetric": False}, "'symmetric' applies only to recipes"),
    ({"recipe": "w4a16", "method": "awq", "actorder": "weight"},
     "'actorder' applies only to method gptq"),
    ({"recipe": "w4a16", "actorder": "group"}, "not loaded by vLLM 0.32"),
    ({"recipe": "w4a16", "method": "hqq"}, "'gptq', 'awq' or 'rtn'"),
    ({"recipe": "w8a16", "overrides": [{"targets": ["re:.*down_proj"], "bits": 8}]},
     "changes nothing"),
    ({"recipe": "w4a16", "overrides": [{"targets": ["re:"], "bits": 16}]}, "not blank"),
    ({"recipe": "w4a16", "overrides": [{"targets": ["x"], "bits": 2}]}, "8 or 16"),
    ({"recipe": "w4a16", "overrides": [{"targets": ["Linear"], "bits": 8}]},
     "looks like a class name"),
    ({"recipe": "w4a16", "overrides": [{"targets": ["re:(unclosed"], "bits": 16}]},
     "not a regular expression"),
    # vLLM fuses q/k/v and gate/up: one of them alone cannot change its bits
    ({"recipe": "w4a16", "overrides": [{"targets": ["re:.*q_proj"], "bits": 16}]},
     "one fused layer"),
    ({"recipe": "w4a16", "overrides": [{"targets": ["model.layers.3.mlp.up_proj"],
                                        "bits": 8}]}, "model.layers.3.mlp.gate_proj and"),
])
def test_a_bad_value_is_refused_naming_it(values: dict, says: str) -> None:
    with pytest.raises(ValidationError) as err:
        Candidate(**values)
    assert says in str(err.value)


def test_validate_and_evaluate_refuse_a_bad_value_in_one_line(tmp_path: Path) -> None:
    config = (REPO / "configs" / "default.yaml").read_text().replace(
        "    group_size: 64\n", "    group_size: 64\n    actorder: group\n", 1)
    assert "actorder: group" in config
    (tmp_path / "c.yaml").write_text(config)
    for command in ("validate", "evaluate"):
        result = CliRunner().invoke(main, [command, "--config", str(tmp_path / "c.yaml"),
                                           "--candidate", "int4", "--runs-dir",
                                           str(tmp_path / "runs")])
        assert result.exit_code == 2, result.output
        assert "c.yaml: candidates.int4: actorder 'group'" in result.output
        assert "vLLM 0.32" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_fused_layer_overridden_whole_is_accepted() -> None:
    whole = Candidate(recipe="w4a16", overrides=[
        {"targets": ["re:.*self_attn\\.(q|k|v)_proj", "re:.*mlp\\.(gate|up)_proj"],
         "bits": 8}])
    assert whole.module_bits("model.layers.7.self_attn.k_proj") == 8
    assert whole.module_bits("model.layers.7.mlp.down_proj") == 4
    kept = Candidate(recipe="w4a16", ignore=["lm_head", "re:.*\\.layers\\.2\\."],
                     overrides=[{"targets": ["re:.*down_proj"], "bits": 8}])
    assert kept.module_bits("model.layers.2.mlp.down_proj") == 16  # ignore outranks 8
    assert kept.module_bits("model.layers.12.mlp.down_proj") == 8


def test_the_worker_groups_modules_as_the_values_say() -> None:
    job = {"recipe": "w4a16", "group_size": 64, "ignore": ["lm_head"], "symmetric": False,
           "actorder": "weight", "overrides": [{"targets": ["re:.*down_proj"], "bits": 8},
                                               {"targets": ["model.layers.0.mlp.up_proj"],
                                                "bits": 16}]}
    groups, ignore = weight_only_groups(job)
    assert groups["group_0"]["weights"] == {"num_bits": 4, "type": "int", "symmetric": False,
                                            "strategy": "group", "group_size": 64,
                                            "actorder": "weight"}
    assert groups["group_1"]["targets"] == ["re:.*down_proj"]
    assert groups["group_1"]["weights"]["num_bits"] == 8
    assert ignore == ["lm_head", "model.layers.0.mlp.up_proj"]
    plain, _ = weight_only_groups({"recipe": "w4a16", "group_size": 128, "ignore": []})
    assert list(plain) == ["group_0"] and plain["group_0"]["weights"]["symmetric"] is True
    assert "actorder" not in plain["group_0"]["weights"]  # GPTQ's own default applies


# ---- against vLLM's own code -------------------------------------------------------------

pytest.importorskip("vllm", reason="vLLM (the engine environment) is not importable here")
torch = pytest.importorskip("torch")


def _written_config(job: dict) -> dict:
    """The quantization_config compressed-tensors writes for the worker's groups (the call
    llm-compressor makes when it saves), on a decoder block's q_proj and down_proj."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationConfig,
        QuantizationScheme,
        apply_quantization_config,
    )

    groups, ignore = weight_only_groups(job)
    schemes = {name: QuantizationScheme(**g) for name, g in groups.items()}
    model = torch.nn.Sequential(OrderedDict(
        q_proj=torch.nn.Linear(256, 256, bias=False),
        down_proj=torch.nn.Linear(256, 256, bias=False)))
    apply_quantization_config(model, QuantizationConfig(config_groups=schemes, ignore=ignore))
    config = ModelCompressor.from_pretrained_model(model).quantization_config
    return json.loads(config.model_dump_json(exclude_none=True))


def _cpu_kernel_takes(qc: dict, layer: str) -> tuple[str, bool]:
    """vLLM's scheme for the layer under this config, and whether its CPU int4 kernel
    (CPUWNA16, AVX-512) can implement it."""
    from vllm.model_executor.kernels.linear.mixed_precision.cpu import CPUWNA16LinearKernel
    from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import (
        MPLinearLayerConfig,
    )
    from vllm.model_executor.layers.quantization.compressed_tensors import compressed_tensors

    scheme: Any = compressed_tensors.CompressedTensorsConfig.from_config(qc).get_scheme(
        torch.nn.Linear(256, 256), layer)
    ok, _ = CPUWNA16LinearKernel.can_implement(MPLinearLayerConfig(
        (256, 256), (256, 256), scheme.quant_type, torch.bfloat16, scheme.group_size,
        not scheme.symmetric))
    return type(scheme).__name__, ok


@pytest.mark.parametrize(("values", "down_proj_kernel"), [
    ({}, True),                                   # the preset: GPTQ's uint4b8
    ({"symmetric": False}, True),                 # uint4 with zero points
    ({"actorder": "weight"}, True),
    ({"overrides": [{"targets": ["re:.*down_proj"], "bits": 8}]}, False),  # W8A16 there
])
def test_what_the_worker_writes_vllm_loads_and_its_cpu_kernel_takes(
        values: dict, down_proj_kernel: bool) -> None:
    cand = Candidate(recipe="w4a16", group_size=64, **values)
    qc = _written_config({**cand.recipe_params(), "ignore": []})
    assert _cpu_kernel_takes(qc, "model.layers.0.self_attn.q_proj") == \
        ("CompressedTensorsWNA16", True)
    assert _cpu_kernel_takes(qc, "model.layers.0.mlp.down_proj")[1] is down_proj_kernel
    # the workbench's up-front answer on a CPU with AVX-512 is the same
    fmt = format_of_candidate(cand)
    assert fmt is not None
    assert (unsupported_reason(fmt, "cpu", "avx512") is None) is down_proj_kernel


def test_group_activation_order_is_refused_by_vllm_as_by_the_config() -> None:
    from vllm.model_executor.layers.quantization.compressed_tensors import compressed_tensors

    job = {"recipe": "w4a16", "group_size": 64, "ignore": [], "actorder": "group"}
    with pytest.raises(ValueError, match="no longer supported"):
        compressed_tensors.CompressedTensorsConfig.from_config(_written_config(job))


def test_a_sweep_row_and_its_plot_label_name_the_recipe_by_its_values(tmp_path: Path) -> None:
    """Recipe variants sweep as presets do; the table and the Pareto plot label each by
    its values (issue 47, step 5)."""
    from builders import record

    from workbench.sweep.report import plot_pareto, render_sweep
    from workbench.sweep.table import SweepRecord, rank, row_of

    rows = []
    for name, values in (("int4", {}), ("int4-awq", {"method": "awq", "group_size": 32,
                                                     "overrides": [{"targets": ["re:.*down_proj"],
                                                                    "bits": 16}]})):
        rec = record("promote")
        rec.candidate = name
        rec.quantization = {"served_format": {"label": "W4A16"},
                            "recipe_values": Candidate(recipe="w4a16", **values)
                            .weight_values()}  # type: ignore[typeddict-item]
        row = row_of(rec, "weights", "worst_lower_bound", 1.0, True)
        row.quality, row.efficiency = -0.01, 1e6 * (len(rows) + 1)
        rows.append(row)
    assert rows[0].recipe == "gptq sym g128"
    assert rows[1].recipe == "awq asym g32, 16-bit: re:.*down_proj"
    assert row_of(record("promote"), "weights", "worst_lower_bound", 1.0, True).recipe == ""
    _, chosen = rank(rows, "weights")
    sweep = SweepRecord("m", "cpu", "p", "weights", "worst_lower_bound", "q", {}, rows, [],
                        chosen, "d", "t")
    assert "| W4A16 (awq asym g32, 16-bit: re:.*down_proj) |" in render_sweep(sweep)
    plot = plot_pareto(sweep, tmp_path / "p.png")
    assert plot is not None and plot.read_bytes()[:4] == b"\x89PNG"
