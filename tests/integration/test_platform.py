"""The engine's platform (issue 55, step 3), tested against vLLM's own code in the engine
environment, no engine served: vLLM picks AMD Zen's platform where zentorch imports on an
AMD CPU with AVX-512 (vllm/platforms/__init__.py, cpu_platform_plugin), which a stand-in
zentorch module makes it do on such a CPU here; `engine.platform: cpu` (the child cannot
import zentorch) keeps vLLM's CPU platform; and the one line vLLM logs of that choice is
the line the workbench reads into the record's kernels."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from workbench.mechanisms.paths import engine_python, offline_env
from workbench.serve.engine_log import kernel_choices

pytestmark = pytest.mark.integration

PROBE = "from vllm.platforms import cpu_platform_plugin; print(cpu_platform_plugin())"


def zen_cpu() -> bool:
    """vLLM's own test (_is_amd_zen_cpu): an AMD CPU whose flags name AVX-512."""
    text = Path("/proc/cpuinfo").read_text()
    return "AuthenticAMD" in text and "avx512" in text


def platform_chosen(tmp_path: Path, no_zentorch: bool) -> str:
    fake = tmp_path / "site" / "zentorch"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text("# a stand-in: vLLM only imports it to choose\n")
    env = offline_env(no_zentorch=no_zentorch)
    env["PYTHONPATH"] = ":".join(filter(None, [env.get("PYTHONPATH"), str(fake.parent)]))
    out = subprocess.run([str(engine_python()), "-c", PROBE], env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_engine_platform_cpu_keeps_vllms_cpu_platform_where_zentorch_imports(
        tmp_path: Path) -> None:
    chosen = platform_chosen(tmp_path, no_zentorch=False)
    assert chosen == ("vllm.platforms.zen_cpu.ZenCpuPlatform" if zen_cpu()
                      else "vllm.platforms.cpu.CpuPlatform")
    assert platform_chosen(tmp_path, no_zentorch=True) == "vllm.platforms.cpu.CpuPlatform"


def test_the_zen_platform_line_vllm_logs_is_read_into_the_kernels() -> None:
    source = next(engine_python().parent.parent.glob(
        "lib/python3*/site-packages/vllm/platforms/__init__.py")).read_text()
    [message] = re.findall(r'"(AMD Zen CPU detected with zentorch installed[^"]*)"', source)
    line = f"(APIServer pid=7) INFO 12-07 12:00:00 [__init__.py:212] {message}\n"
    assert kernel_choices(line)["platform"] == "ZenCpuPlatform"
    assert "platform" not in kernel_choices("(APIServer pid=7) INFO ... [x.py:1] Starting\n")


@pytest.mark.parametrize("no_zentorch", [False, True])
def test_the_launchers_platform_line_is_read_into_the_kernels(tmp_path: Path,
                                                               no_zentorch: bool) -> None:
    """vLLM's own line is logged before its handler exists, so a server's log never holds
    it; the workbench's launcher prints the platform vLLM resolved in the engine's own
    process, and only Zen's enters the record's kernels."""
    fake = tmp_path / "site" / "zentorch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("# a stand-in: vLLM only imports it to choose\n")
    env = offline_env(no_zentorch=no_zentorch)
    env["PYTHONPATH"] = ":".join(filter(None, [env.get("PYTHONPATH"), str(fake.parent)]))
    out = subprocess.run([str(engine_python()), "-c", "from workbench.subprocesses.vllm_serve "
                          "import platform_line; print(platform_line())"], env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    zen = zen_cpu() and not no_zentorch
    assert out.strip().splitlines()[-1] == (
        "workbench: vLLM serves on " + ("ZenCpuPlatform" if zen else "CpuPlatform"))
    log = f"{out}(APIServer pid=7) INFO 12-07 12:00:00 [api_utils.py:286] non-default args\n"
    assert kernel_choices(log).get("platform") == ("ZenCpuPlatform" if zen else None)


@pytest.mark.parametrize("raises", [None, "OSError", "RuntimeError"])
def test_the_platform_predicted_before_any_engine_is_the_one_vllm_picks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raises: str | None) -> None:
    """serve/device.py's zen_platform asks vLLM's own plugin in the engine's environment: a
    zentorch that imports gives Zen's platform on a Zen CPU; one built for another torch
    (OSError on import, which vLLM catches) gives vLLM's CPU platform, and so does any
    other failure, for which vLLM's CPU plugin fails and the prediction says no."""
    from workbench.config.run_config import EngineConfig
    from workbench.serve import device

    stand_in = tmp_path / "site" / "zentorch"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text(
        f"raise {raises}('undefined symbol: a stand-in')\n" if raises else "")
    monkeypatch.setenv("PYTHONPATH", str(stand_in.parent))
    device.vllm_platform.cache_clear()
    try:
        predicted = device.zen_platform("cpu", EngineConfig())
        picked = device.vllm_platform()
    finally:
        device.vllm_platform.cache_clear()
    assert predicted is (zen_cpu() and raises is None)
    assert predicted is (picked == device.ZEN_PLATFORM)
    assert device.zen_platform("cpu", EngineConfig(platform="cpu")) is False
