"""The precision the workbench computes in, and what it evaluates where the engine has no
kernel, for each class of x86 CPU (mechanisms/host.py, serve/device.py, quantize/formats.py):
bf16 where the CPU multiplies it natively, float32 where bf16 is emulated; int4 served by
the engine's kernel where it has one, its weights dequantised and served dense on AVX2,
said plainly. Keys made on a bf16 machine stay what they were."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.config.run_config import Candidate, EngineConfig, load_config
from workbench.gate.comparability import device_facts_of
from workbench.mechanisms import host
from workbench.mechanisms.paths import ISA_CAP_SITE, offline_env
from workbench.plan.plan import Outputs, plan
from workbench.quantize.build import artifact_key
from workbench.quantize.checks import unsupported_here
from workbench.quantize.formats import NO_INT4_KERNEL, format_of_candidate, served_dense
from workbench.record.migrate import migrate
from workbench.serve.device import device_facts, serve_dtype
from workbench.serve.engine import ServerInfo, engine_command

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "configs" / "default.yaml"

# The CPU classes a user may have, as /proc/cpuinfo names their features.
CPUS = {
    "sapphire-rapids": "avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile",
    "zen4": "avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16",
    "skylake-x": "avx2 avx512f avx512dq avx512bw avx512vl",  # AVX-512, bf16 emulated
    "zen2-epyc": "avx2 fma",                                # the AVX2 EPYC of issue 36
}


@pytest.fixture()
def cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Make this process see one of CPUS."""
    def use(name: str, capped: bool = False) -> None:
        (tmp_path / "cpuinfo").write_text(f"model name\t: {name}\nflags\t\t: {CPUS[name]}\n")
        monkeypatch.setattr(host, "CPUINFO", tmp_path / "cpuinfo")
        if capped:
            monkeypatch.setenv(host.ISA_CAP_ENV, "avx2")
        else:
            monkeypatch.delenv(host.ISA_CAP_ENV, raising=False)
        host.cpu_vector_isa.cache_clear()
    yield use
    host.cpu_vector_isa.cache_clear()


def dense_int4(cand: Candidate, device: str = "cpu"):
    return served_dense("int4", format_of_candidate(cand), device)


@pytest.mark.parametrize(("name", "capped", "isa", "native", "dtype", "dense"), [
    ("sapphire-rapids", False, "avx512", True, "bfloat16", False),
    ("zen4", False, "avx512", True, "bfloat16", False),
    ("skylake-x", False, "avx512", False, "float32", False),
    ("zen2-epyc", False, "avx2", False, "float32", True),
    ("sapphire-rapids", True, "avx2", False, "float32", True),  # the ISA cap
])
def test_each_cpu_class_gets_its_dtype_and_its_int4(cpu, name: str, capped: bool, isa: str,
                                                    native: bool, dtype: str,
                                                    dense: bool) -> None:
    cpu(name, capped)
    assert host.cpu_vector_isa() == isa and host.native_bf16() is native
    assert host.fast_dtype("cpu") == dtype
    assert serve_dtype("auto", "cpu", None) == dtype
    assert serve_dtype("bfloat16", "cpu", None) == "bfloat16"  # the config's word wins
    assert (dense_int4(Candidate(recipe="w4a16", group_size=64)) is not None) is dense
    # the engine is started in that dtype
    cmd = engine_command(Path("/m"), "m", 8000, EngineConfig(), [], "cpu")
    assert cmd[cmd.index("--dtype") + 1] == dtype


def test_a_gpu_keeps_bf16_and_takes_float16_below_ampere(cpu) -> None:
    cpu("zen2-epyc")  # the host CPU does not matter to a GPU's engine or quantiser
    assert host.fast_dtype("cuda") == "bfloat16"
    assert host.fast_dtype("cuda", (9, 0)) == host.fast_dtype("cuda", (8, 0)) == "bfloat16"
    assert host.fast_dtype("cuda", (7, 5)) == "float16"
    assert dense_int4(Candidate(recipe="w4a16"), "cuda") is None


def test_the_cap_reaches_child_processes_and_vllms_own_probes(cpu) -> None:
    cpu("sapphire-rapids", capped=True)
    env = offline_env()
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ISA_CAP_SITE)
    # the sitecustomize replaces the torch.cpu probes vllm/platforms/cpu.py reads
    probe = ("import torch.cpu as c; print(c._is_avx512_supported(), "
             "c._is_avx512_bf16_supported(), c._is_avx512_supported.__name__)")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    assert out == ["False", "False", "<lambda>"]
    cpu("sapphire-rapids")  # uncapped: children are left as they are
    assert str(ISA_CAP_SITE) not in offline_env().get("PYTHONPATH", "")


def test_int4_is_served_dense_only_where_the_engine_has_no_kernel_for_it(cpu) -> None:
    cpu("zen2-epyc")
    found = dense_int4(Candidate(recipe="w4a16", group_size=64))
    assert found is not None and found.format == "W4A16" and found.why == NO_INT4_KERNEL
    assert "AVX2" in found.why and "AVX-512" in found.why
    assert "dequantised" in found.line and "cannot be measured here" in found.line
    assert found.not_own.startswith("not applicable on this device")
    # the same weights asked with int8 activations, an FP8 KV cache or on a GPU are not
    # int4 weight-only: served as they are, or refused by their own rules
    assert dense_int4(Candidate(recipe="w8a8-int8")) is None
    assert dense_int4(Candidate(recipe="w4a16", kv_cache_dtype="fp8")) is None
    assert dense_int4(Candidate(recipe="w4a16"), "cuda") is None
    cfg = load_config(DEFAULT)
    assert unsupported_here(cfg, "int4", "cpu") is None  # served dense, not refused
    cpu("zen4")
    assert dense_int4(Candidate(recipe="w4a16", group_size=64)) is None


def test_validate_and_evaluate_plan_int4_served_dense_on_avx2(cpu, tmp_path: Path) -> None:
    cpu("zen2-epyc")
    p = plan(load_config(DEFAULT), "int4", Outputs(runs_dir=tmp_path / "runs"), "cpu")
    assert p.candidate.recipe == "w4a16" and p.dense is not None  # int4 itself
    assert p.at_profile("full").dense == p.dense
    result = CliRunner().invoke(main, ["validate", "--config", str(DEFAULT), "--candidate",
                                       "int4", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert "served dense" in result.output and "W4A16" in result.output
    assert not (tmp_path / "runs").exists()
    # tune searches int4 layouts, each trial served dense and judged on its quality here
    tuned = CliRunner().invoke(main, ["validate", "--config", str(DEFAULT), "--candidate",
                                      "int4", "--tune"])
    assert tuned.exit_code == 0 and "served dense" in tuned.output, tuned.output
    cpu("sapphire-rapids")
    assert plan(load_config(DEFAULT), "int4", Outputs(), "cpu").dense is None


def test_keys_made_in_bf16_stay_and_float32_gets_its_own(cpu) -> None:
    recipe = {"recipe": "w8a8-int8"}
    before = artifact_key("m", recipe, "c", {"llmcompressor": "0.14"})
    assert artifact_key("m", recipe, "c", {"llmcompressor": "0.14"}, "bfloat16") == before
    assert artifact_key("m", recipe, "c", {"llmcompressor": "0.14"}, "float32") != before
    cpu("sapphire-rapids")
    auto = device_facts("cpu", EngineConfig(dtype="auto"))
    assert auto.serve_dtype == device_facts("cpu", EngineConfig(dtype="bfloat16")).serve_dtype
    cpu("zen2-epyc")
    assert device_facts("cpu", EngineConfig(dtype="auto")).serve_dtype == "float32"


def test_comparability_tells_a_bf16_baseline_from_a_float32_candidate() -> None:
    def side(dtype: str | None, command: list[str]) -> ServerInfo:
        facts = {"suite_in_flight": 8, "batch_invariant": False}
        return ServerInfo(model_path="/m", served_name="m", device="cpu", command=command,
                          cold_start_s=0.0, log_file="l",
                          device_facts={**facts, **({"serve_dtype": dtype} if dtype else {})})

    old = side(None, ["python", "--dtype", "bfloat16"])  # measured before `auto`
    assert device_facts_of(old)["serve_dtype"] == "bfloat16"
    assert device_facts_of(side("float32", []))["serve_dtype"] == "float32"
    assert device_facts_of(side(None, []))["serve_dtype"] == "bfloat16"


def test_a_v10_record_migrates_with_the_dtypes_it_ran_in() -> None:
    rec = {"schema_version": 10, "device": {"kind": "cpu"},
           "engine": {"candidate_command": ["vllm", "--dtype", "float16", "--seed", "0"]},
           "quantization": {"source": "built"}}
    out, passed = migrate(json.loads(json.dumps(rec)), 11)
    assert passed == [10] and out["device"]["serve_dtype"] == "float16"
    assert out["device"]["native_bf16"] is False and out["stand_in"] is None
    assert out["quantization"]["compute_dtype"] == "bfloat16"
    bare, _ = migrate({"schema_version": 10, "device": {"kind": "cpu"}, "engine": {},
                       "quantization": {"source": "baseline weights"}}, 11)
    assert bare["device"]["serve_dtype"] == "bfloat16"
    assert "compute_dtype" not in bare["quantization"]


def test_a_float32_build_is_stored_as_the_baseline(tmp_path: Path) -> None:
    """The quantiser's last step, on a checkpoint as compressed-tensors saves one computed
    in float32: integer and FP8 tensors untouched, float32 ones in the baseline's dtype."""
    import torch
    from safetensors.torch import load_file, save_file

    sys.path.insert(0, str(REPO / "workbench" / "subprocesses"))
    try:
        import quantize_worker
    finally:
        sys.path.pop(0)
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    out = tmp_path / "out"
    out.mkdir()
    scale = torch.rand(8, 1, dtype=torch.float32)
    save_file({"w.weight": torch.randint(-8, 8, (8, 4), dtype=torch.int8),
               "w.weight_scale": scale, "norm.weight": torch.ones(4),
               "f.weight": torch.zeros(2, 2).to(torch.float8_e4m3fn)}, out / "model.safetensors")
    (out / "config.json").write_text(json.dumps({"dtype": "float32", "model_type": "llama"}))
    assert quantize_worker.stored_dtype(tmp_path / "base") == "bfloat16"
    assert quantize_worker.store_as(out, "bfloat16") == 2
    stored = load_file(out / "model.safetensors")
    assert {k: str(v.dtype) for k, v in stored.items()} == {
        "w.weight": "torch.int8", "w.weight_scale": "torch.bfloat16",
        "norm.weight": "torch.bfloat16", "f.weight": "torch.float8_e4m3fn"}
    assert torch.equal(stored["w.weight_scale"], scale.to(torch.bfloat16))
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
