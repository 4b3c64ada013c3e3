"""Which platform vLLM will serve on, known before any engine starts (serve/device.py,
zen_platform): AMD Zen's where vLLM's own test says the CPU is one (held to vLLM's
_is_amd_zen_cpu on the three CPU classes) and zentorch can be imported, not under
`engine.platform: cpu` nor under the ISA cap, which also hides zentorch from the engine's
processes; and a baseline measured on one platform is not reused for the other."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest

from workbench.config.run_config import EngineConfig, RunConfig
from workbench.measure.cache import baseline_key
from workbench.mechanisms import host
from workbench.mechanisms.paths import offline_env
from workbench.serve import device

CPUINFO = {
    "zen4": "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse avx2 avx512f avx512bw avx512_bf16\n",
    "zen3": "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse avx2 fma\n",
    "sapphire-rapids": "vendor_id\t: GenuineIntel\nflags\t\t: avx2 avx512f amx_tile amx_bf16\n",
}


@pytest.fixture
def cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set the CPU class /proc/cpuinfo reports, and the platform vLLM's own plugin names in
    the engine's environment (zentorch importing there or not; tests/integration/
    test_platform.py asks the real one)."""
    def choose(name: str, zentorch: bool = True) -> None:
        info = tmp_path / f"cpuinfo-{name}"
        info.write_text(CPUINFO[name])
        monkeypatch.setattr(host, "CPUINFO", info)
        monkeypatch.setattr(device, "vllm_platform", lambda: (
            device.ZEN_PLATFORM if zentorch else "vllm.platforms.cpu.CpuPlatform"))
    monkeypatch.delenv(host.ISA_CAP_ENV, raising=False)
    return choose


@pytest.mark.parametrize("name", sorted(CPUINFO))
def test_the_zen_test_is_vllms_own(cpu: Callable[..., None], name: str) -> None:
    from vllm.platforms import _is_amd_zen_cpu

    cpu(name)
    with mock.patch("builtins.open", mock.mock_open(read_data=CPUINFO[name])), \
            mock.patch("os.path.exists", return_value=True):
        vllm_says = _is_amd_zen_cpu()
    assert host.amd_zen_avx512() is vllm_says is (name == "zen4")


def test_zens_platform_where_zentorch_imports_on_a_zen_cpu_and_nowhere_else(
        cpu: Callable[..., None], monkeypatch: pytest.MonkeyPatch) -> None:
    cpu("zen4")
    assert device.zen_platform("cpu", EngineConfig()) is True
    assert device.device_facts("cpu", EngineConfig()).zen_platform is True
    assert device.zen_platform("cpu", EngineConfig(platform="cpu")) is False
    assert device.zen_platform("cuda", EngineConfig()) is False
    monkeypatch.setenv(host.ISA_CAP_ENV, "avx2")  # standing in for an AVX2 machine
    assert device.zen_platform("cpu", EngineConfig()) is False
    monkeypatch.delenv(host.ISA_CAP_ENV)
    cpu("zen4", zentorch=False)
    assert device.zen_platform("cpu", EngineConfig()) is False
    for other in ("zen3", "sapphire-rapids"):
        cpu(other)
        assert device.zen_platform("cpu", EngineConfig()) is False


def test_a_baseline_on_one_platform_is_not_reused_for_the_other(cpu: Callable[..., None]) -> None:
    cfg = RunConfig.model_validate({
        "model": {"name": "m", "path": "m"}, "candidates": {"c": {"recipe": "none"}},
        "calibration": {"files": ["c.jsonl"]}, "engine": {"max_model_len": 8192},
        "suites": ["arithmetic"], "gates": "g.yaml"})
    cpu("zen4", zentorch=False)
    cpu_key = baseline_key(cfg, "d", [], "cpu", "0.32.0", [])
    cpu("zen4")
    zen_key = baseline_key(cfg, "d", [], "cpu", "0.32.0", [])
    assert zen_key != cpu_key
    # a CPU-platform key is what it was before the platform existed: no field added
    cpu("sapphire-rapids")
    assert baseline_key(cfg, "d", [], "cpu", "0.32.0", []) == cpu_key


@pytest.mark.parametrize(("cap", "no_zentorch", "imports"), [
    (False, False, True), (True, False, False), (False, True, False)])
def test_the_isa_cap_hides_zentorch_from_the_engines_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cap: bool, no_zentorch: bool,
        imports: bool) -> None:
    stand_in = tmp_path / "site" / "zentorch"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("")
    if cap:
        monkeypatch.setenv(host.ISA_CAP_ENV, "avx2")
    else:
        monkeypatch.delenv(host.ISA_CAP_ENV, raising=False)
    monkeypatch.delenv("WORKBENCH_NO_ZENTORCH", raising=False)
    env = offline_env(no_zentorch=no_zentorch)
    env["PYTHONPATH"] = ":".join(filter(None, [env.get("PYTHONPATH"), str(stand_in.parent)]))
    env["WORKBENCH_CPU_ISA_CAP"] = "avx2" if cap else ""
    probe = subprocess.run([sys.executable, "-c", "import zentorch"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert (probe.returncode == 0) is imports, probe.stderr


@pytest.mark.parametrize(("planned_zen", "logged", "cached"), [
    (True, "ZenCpuPlatform", True), (False, None, True),
    (True, None, False), (False, "ZenCpuPlatform", False)])
def test_a_baseline_served_on_another_platform_than_its_key_says_is_not_cached(
        cpu: Callable[..., None], planned_zen: bool, logged: str | None, cached: bool) -> None:
    from types import SimpleNamespace

    from workbench.measure import pair
    from workbench.serve.engine import ServerInfo

    cpu("zen4", zentorch=planned_zen)
    plan = SimpleNamespace(device="cpu", cfg=SimpleNamespace(engine=EngineConfig()))
    kernels = {"platform": logged} if logged else {}
    server = ServerInfo(model_path="m", served_name="m", device="cpu", command=[],
                        cold_start_s=1.0, log_file="log", kernels=kernels)
    measured = SimpleNamespace(server=server)
    assert pair._served_as_planned(plan, measured) is cached  # type: ignore[arg-type]
