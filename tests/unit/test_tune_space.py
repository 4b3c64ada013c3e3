"""The space of int4 recipes a tune searches (tune/space.py, issue 47 step 2's mechanism):
every combination of the declared values a candidate, the cheapest by estimated weight
bytes first, the points the model's widths or the device cannot take left out with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SMOLLM2_SHAPES as SHAPES

from workbench.config.run_config import Candidate
from workbench.quantize import formats
from workbench.quantize.build import artifact_key
from workbench.tune.space import TuneSpace, points, weight_bytes

PRESET = Candidate(recipe="w4a16", group_size=64)
SMOLLM2_SHAPES = {**SHAPES, "tie_word_embeddings": True}  # as its config.json says


@pytest.fixture()
def smollm2(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_SHAPES))
    return tmp_path


def test_the_estimate_counts_bits_scales_and_zero_points() -> None:
    """SmolLM2-135M: 30 blocks of 576 -> 1536 MLPs and 9 + 3 + 3 heads of 64; a tied
    embedding of 49152 x 576. Per linear weight: 4 bits, a 16-bit scale per group, a 4-bit
    zero point per group where asymmetric."""
    linear = 30 * (576 * 576 * 2 + 576 * 192 * 2 + 576 * 1536 * 3)
    embedding = 49152 * 576
    assert weight_bytes(PRESET, SMOLLM2_SHAPES) == (embedding * 16 + int(
        linear * (4 + 16 / 64))) // 8
    asym = Candidate(recipe="w4a16", group_size=64, symmetric=False)
    assert weight_bytes(asym, SMOLLM2_SHAPES) - weight_bytes(PRESET, SMOLLM2_SHAPES) == \
        pytest.approx(linear * 4 / 64 / 8, abs=2)
    kept = Candidate(recipe="w4a16", group_size=64,
                     overrides=[{"targets": ["re:.*down_proj"], "bits": 16}])
    down_proj_16 = 576 * 1536 * (16 - 4 - 16 / 64) / 8
    assert weight_bytes(kept, SMOLLM2_SHAPES) - weight_bytes(PRESET, SMOLLM2_SHAPES) == \
        pytest.approx(30 * down_proj_16, abs=40)
    # one block kept in 16-bit (tune's keep-k entry), and an 8-bit override it outranks
    block = Candidate(recipe="w4a16", group_size=64, ignore=["lm_head", r"re:.*\.layers\.2\."],
                      overrides=[{"targets": ["re:.*down_proj"], "bits": 8}])
    eight = Candidate(recipe="w4a16", group_size=64,
                      overrides=[{"targets": ["re:.*down_proj"], "bits": 8}])
    one_block = 16 * (576 * 576 * 2 + 576 * 192 * 2 + 576 * 1536 * 3) / 8
    assert weight_bytes(block, SMOLLM2_SHAPES) - weight_bytes(eight, SMOLLM2_SHAPES) == \
        pytest.approx(one_block - (weight_bytes(eight, SMOLLM2_SHAPES) - embedding * 2) / 30,
                      abs=40)
    untied = {**SMOLLM2_SHAPES, "tie_word_embeddings": False}
    assert weight_bytes(PRESET, untied) - weight_bytes(PRESET, SMOLLM2_SHAPES) == embedding * 2


def test_points_come_cheapest_first_and_the_preset_is_one_of_them(smollm2: Path) -> None:
    space = TuneSpace(methods=["gptq", "awq"], symmetric=[True, False], group_sizes=[64, 32])
    found, left = points("int4", PRESET, space, smollm2, "cpu")
    assert left == [] and len(found) == 8
    sizes = [p.weight_bytes for p in found]
    assert sizes == sorted(sizes)
    assert [p.label for p in found[:2]] == ["gptq sym g64", "awq sym g64"]  # the prior
    assert found[-1].label == "awq asym g32"
    assert len({p.name for p in found}) == 8
    # the point that builds the preset is the preset itself, under its own name, so the
    # build and the measurement an evaluate made of it are found again
    preset = next(p for p in found if p.name == "int4")
    assert preset.candidate is PRESET and preset.label == "gptq sym g64"
    same = artifact_key("m", preset.candidate.recipe_params(), "s", {})
    assert same == artifact_key("m", PRESET.recipe_params(), "s", {})  # found in the cache
    ordered = Candidate(recipe="w4a16", group_size=64, actorder="weight")
    kept_order, _ = points("int4", ordered, space, smollm2, "cpu")
    assert {p.candidate.actorder for p in kept_order if p.candidate.method == "gptq"} == \
        {"weight"} and kept_order[0].candidate is ordered
    assert {p.candidate.actorder for p in kept_order if p.candidate.method == "awq"} == {None}


def test_a_point_the_widths_or_the_engine_cannot_take_is_left_out_with_why(
        smollm2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space = TuneSpace(methods=["gptq"], symmetric=[True], group_sizes=[128, 64],
                      overrides=[[], [{"targets": ["re:.*down_proj"], "bits": 8}]])
    monkeypatch.setattr(formats, "cpu_vector_isa", lambda: "avx512")
    found, left = points("int4", PRESET, space, smollm2, "cpu")
    assert [p.name for p in found] == ["int4"]
    why = dict(left)
    assert "does not divide" in why["int4-gptq-sym-g128"] and "576" in why["int4-gptq-sym-g128"]
    assert "4-bit weights only" in why["int4-gptq-sym-g64-o1"]  # W4+8A16 on a CPU
    on_gpu, _ = points("int4", PRESET, space, smollm2, "cuda")
    assert [p.name for p in on_gpu] == ["int4", "int4-gptq-sym-g64-o1"]


def test_without_an_int4_kernel_the_points_are_kept_to_be_served_dense(
        smollm2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "cpu_vector_isa", lambda: "avx2")
    found, left = points("int4", PRESET, TuneSpace(group_sizes=[64]), smollm2, "cpu")
    assert len(found) == 4 and left == []


def test_the_keep_axis_leaves_the_most_sensitive_blocks_in_16_bit(smollm2: Path) -> None:
    """keep k: the k blocks ranked first are ignored by the quantiser (an `ignore` entry),
    counted at 16 bits in the estimate, and named in the point; a k past the ranking is
    left out, and a combination a candidate refuses is left out with its reason."""
    space = TuneSpace(methods=["gptq"], symmetric=[True], group_sizes=[64], keep=[0, 2, 99])
    found, left = points("int4", PRESET, space, smollm2, "cpu", ranked=[7, 3, 11])
    assert [p.name for p in found] == ["int4", "int4-gptq-sym-g64-keep2"]
    kept = found[1]
    assert kept.kept == (7, 3) and kept.label == "gptq sym g64, blocks [3, 7] in 16-bit"
    assert kept.candidate.module_bits("model.layers.7.mlp.down_proj") == 16
    assert kept.candidate.module_bits("model.layers.3.self_attn.q_proj") == 16
    assert kept.candidate.module_bits("model.layers.11.mlp.down_proj") == 4
    assert kept.values()["kept"] == [7, 3]
    one_block = 16 * (576 * 576 * 2 + 576 * 192 * 2 + 576 * 1536 * 3) / 8
    per_block = (weight_bytes(PRESET, SMOLLM2_SHAPES) - 49152 * 576 * 2) / 30
    assert kept.weight_bytes - found[0].weight_bytes == pytest.approx(
        2 * (one_block - per_block), abs=40)
    assert dict(left) == {"int4-gptq-sym-g64-keep99": "keep 99: the sensitivity ranking has "
                                                      "3 blocks"}
    w8 = Candidate(recipe="w8a16", group_size=64)
    eight = TuneSpace(methods=["gptq"], symmetric=[True], group_sizes=[64],
                      overrides=[[{"targets": ["re:.*down_proj"], "bits": 8}]])
    none, why = points("int8", w8, eight, smollm2, "cuda")
    assert none == [] and "changes nothing" in why[0][1]
