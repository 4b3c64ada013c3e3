"""A sweep fanned out on Ray: each candidate's quantise-and-measure is a Ray task holding
its own devices, the driver judges and records.

Ray does the scheduling the workbench would otherwise write by hand: a placement group per
task reserves the engine's devices (GPUs on a GPU cluster, one core per rank on a CPU), so
tasks on one host get disjoint GPU sets (Ray sets CUDA_VISIBLE_DEVICES for each) and tasks
on a cluster land where their devices are. `--ray-address local` starts Ray on this host
for the sweep (partitioning its GPUs); any other address joins that cluster.

Order: one task measures the baseline's suites (once, into its results cache) and returns
that sealed entry; every candidate task installs it in its own node's cache, then measures
its candidate beside the baseline's load, as `evaluate` does (latency is compared only
between sessions measured together, on the same devices). A task returns its run folder as
bytes, so the driver needs no shared file system for results; the nodes do need the same
paths for the config, its data and the model (as vLLM's multi-node serving does).
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from workbench.config.run_config import load_config
from workbench.measure.cache import load_cached
from workbench.measure.measurement import MEASUREMENT_FILE, Measurement
from workbench.measure.pair import MeasuredPair, baseline_entry, measure_baseline_suites
from workbench.mechanisms import cache_entry
from workbench.mechanisms.errors import InfraError, InputError, WorkbenchError
from workbench.mechanisms.files import read_json
from workbench.mechanisms.progress import status
from workbench.pipeline.evaluate import measure_planned
from workbench.plan.plan import Outputs, Plan, plan
from workbench.quantize.build import QuantizeResult

__all__ = ["Cluster", "connect", "fan_out", "leave"]

# Environment a task needs from the driver to find the same things: the workbench's and the
# hub's caches and offline switches (paths the nodes share). Never a credential: Ray shows a
# task's runtime environment in its dashboard.
FORWARDED_ENV = ("WORKBENCH_CACHE", "HF_HUB_CACHE", "HF_HOME", "HF_HUB_OFFLINE",
                 "TRANSFORMERS_OFFLINE", "PYTHONPATH")


@dataclass(frozen=True)
class Cluster:
    address: str
    device: str  # cuda when the cluster offers GPUs, else cpu
    per_node: int  # the engine's devices on the largest node (GPUs, or CPUs on a CPU cluster)
    total: int
    started_here: bool

    @property
    def where(self) -> str:
        return ("a Ray instance started on this host" if self.started_here
                else f"the Ray cluster at {self.address}")


def connect(address: str) -> Cluster:
    """Join the Ray cluster at address, or start one on this host for the sweep ('local':
    Ray's own servers then listen as Ray decides, on every interface in 2.60; run it where
    that is acceptable, or in a private network namespace as the tests do). InputError when
    it cannot be reached (nothing has been started then)."""
    import ray

    local = address == "local"
    if not local:
        silent = _unanswered(address)
        if silent:
            # ray.init would retry for minutes before giving up
            raise InputError(f"--ray-address {address}: nothing answers there ({silent}); "
                             "give a running cluster's head (host:port or ray://host:10001), "
                             "or 'local' to start Ray on this host")
    try:
        if local:
            ray.init(include_dashboard=False, _node_ip_address="127.0.0.1",
                     log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise InputError(f"--ray-address {address}: cannot join a Ray cluster there "
                         f"({type(err).__name__}: {str(err).splitlines()[0][:200]})") from None
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    gpus = [int(r.get("GPU", 0)) for r in nodes]
    kind = "GPU" if any(gpus) else "CPU"
    per_node = [int(r.get(kind, 0)) for r in nodes]
    return Cluster(address, "cuda" if kind == "GPU" else "cpu", max(per_node, default=0),
                   sum(per_node), local)


def _unanswered(address: str, timeout_s: float = 5.0) -> str | None:
    """Why the head at address cannot be reached over TCP, or None."""
    import socket
    from urllib.parse import urlparse

    if address == "auto":
        return None
    hostport = urlparse(address).netloc if "://" in address else address
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return "not host:port"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except OSError as err:
        return err.strerror or type(err).__name__


def leave(cluster: Cluster) -> None:
    """Disconnect from the cluster; a Ray instance started for the sweep stops with it."""
    import ray

    ray.shutdown()


def _bundle(p: Plan, device: str) -> dict[str, float]:
    """What one task reserves: the engine's GPUs and a core, or one core per CPU rank."""
    if device == "cuda":
        return {"GPU": float(p.cfg.engine.devices), "CPU": 1.0}
    return {"CPU": float(p.cfg.engine.devices)}


def pack(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname=".")
    return buf.getvalue()


def unpack(data: bytes, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")  # refuses links and paths leaving dest


# ---- in a Ray task ------------------------------------------------------------------------

Profiles = tuple[str, str]  # the driver's (load profile, suites' item profile)


def _task_plan(config_path: str, profiles: Profiles, candidate: str, device: str) -> Plan:
    """The driver's plan, rebuilt from the config file with the driver's command-line
    choices of profile."""
    load_profile, profile = profiles
    cfg = load_config(config_path)
    if ",".join(cfg.load.gated) != load_profile:
        cfg = cfg.with_load_profile(load_profile)
    if cfg.profile != profile:
        cfg = cfg.with_profile(profile)  # type: ignore[arg-type]  # the driver's, checked
    p = plan(cfg, candidate, Outputs(), device)
    p.shared_host = True  # a task's engines share the node: on vLLM's binding
    return p


def _baseline_entry_task(config_path: str, profiles: Profiles, candidate: str, device: str
                         ) -> bytes:
    """Measure the baseline's suites (unless its node's cache has them) and return the
    sealed cache entry."""
    p = _task_plan(config_path, profiles, candidate, device)
    entry, said = baseline_entry(p), io.StringIO()
    if load_cached(entry) is None:
        with tempfile.TemporaryDirectory(prefix="workbench-baseline-") as tmp:
            measure_baseline_suites(p, Path(tmp) / "baseline", Console(file=said, width=160))
    if load_cached(entry) is None:  # not cached: it served on another platform than planned
        raise InfraError("the baseline this task measured was not cached: "
                         f"{said.getvalue().strip()[-300:]}")
    return pack(entry)


def _candidate_task(config_path: str, profiles: Profiles, candidate: str, device: str,
                    remeasure: bool, baseline_bytes: bytes) -> dict[str, Any]:
    """Quantise and measure one candidate beside its baseline, on this task's devices;
    the run folder comes back as bytes, with the error if a stage failed."""
    p = _task_plan(config_path, profiles, candidate, device)
    entry = baseline_entry(p)
    if not entry.exists():  # another node measured it: install the sealed copy
        staging = cache_entry.staging_for(entry)
        unpack(baseline_bytes, staging)
        cache_entry.publish(staging, entry)
    log = io.StringIO()
    console = Console(file=log, width=160)
    out: dict[str, Any] = {"node": os.uname().nodename,
                           "devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                           "started_at": time.time()}
    with tempfile.TemporaryDirectory(prefix="workbench-task-") as tmp:
        run_dir = Path(tmp) / candidate
        run_dir.mkdir()
        try:
            # one look (a Ray task hands over one), stopped as evaluate stops it
            pair = measure_planned(p, run_dir, console, remeasure, looks=1,
                                   measure_all=False)
            out.update(quantized=pair.artifact.to_dict(), reused=pair.reused)
        except WorkbenchError as err:
            out.update(error=str(err), exit_code=err.exit_code)
        out.update(folder=pack(run_dir), log=log.getvalue(), ended_at=time.time())
    return out


# ---- on the driver ------------------------------------------------------------------------

def _handed_over(result: dict[str, Any]) -> Callable[[Path], MeasuredPair]:
    """What evaluate_planned's `measured` returns: the task's run folder unpacked into the
    sweep's, its measurements read back; or the task's error raised again, after the
    partial folder is in place (so the child run is marked failed with what was measured)."""

    def measured(run_dir: Path) -> MeasuredPair:
        unpack(result["folder"], run_dir)
        (run_dir / "task.log").write_text(result.get("log", ""))
        if "error" in result:
            kind = InputError if result.get("exit_code") == InputError.exit_code else InfraError
            raise kind(result["error"])
        base, cand = (Measurement.from_dict(read_json(run_dir / role / MEASUREMENT_FILE))
                      for role in ("baseline", "candidate"))
        return MeasuredPair(QuantizeResult.from_dict(result["quantized"]), base, cand,
                            result["reused"])

    return measured


class _Reservations:
    """Ray tasks, each in a placement group of its own that reserves its engine's devices,
    freed as soon as the task ends so that a waiting candidate can start."""

    def __init__(self, cluster: Cluster, env: dict[str, str]) -> None:
        self.cluster, self.env = cluster, env
        self.groups: dict[Any, Any] = {}  # task -> its placement group

    def start(self, fn: Callable[..., Any], p: Plan, *args: Any) -> Any:
        import ray  # Ray is an optional dependency (requirements/cluster.txt)
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = _bundle(p, self.cluster.device)
        group = placement_group([bundle], strategy="STRICT_PACK")
        # the task asks for exactly its bundle (Ray's default would be one CPU more)
        ref = ray.remote(fn).options(
            num_cpus=bundle.get("CPU", 0.0), num_gpus=bundle.get("GPU", 0.0), max_retries=0,
            runtime_env={"env_vars": self.env},
            scheduling_strategy=PlacementGroupSchedulingStrategy(group)).remote(*args)
        self.groups[ref] = group
        return ref

    def free(self, ref: Any) -> None:
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(self.groups.pop(ref))
        except Exception:  # noqa: BLE001 - the cluster may be gone; nothing to free then
            pass

    def free_all(self) -> None:
        for ref in list(self.groups):
            self.free(ref)


def fan_out(plans: list[Plan], cluster: Cluster, remeasure: bool, console: Console,
            evaluate: Callable[[Plan, Callable[[Path], MeasuredPair], dict[str, Any]], Any]
            ) -> list[Any]:
    """Every plan's quantise-and-measure as a Ray task in its own placement group, the
    baseline's suites first and once; as each task finishes, evaluate(plan, measured,
    task) judges and records it on the driver (measured(run_dir) unpacks the task's folder
    there; task: its node, devices and start and end times). Returns evaluate's results
    in plan order. An interrupt cancels every task (their engines die with their
    workers)."""
    import ray

    first = plans[0]
    config_path = str(first.cfg.source.resolve())
    profiles: Profiles = (",".join(first.cfg.load.gated), first.cfg.profile)
    tasks = _Reservations(cluster, {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ})
    running: dict[Any, int] = {}
    try:
        with status(console, f"baseline: measuring its suites once on {cluster.where}"):
            ref = tasks.start(_baseline_entry_task, first, config_path, profiles,
                              first.candidate_name, cluster.device)
            entry = ray.get(ref)
            tasks.free(ref)  # its devices go to the candidates
        console.print(f"[green]✓[/] baseline suites measured once; {len(plans)} candidates "
                      f"now in parallel on {cluster.where}")
        entry_ref = ray.put(entry)
        started = time.perf_counter()
        for i, p in enumerate(plans):
            running[tasks.start(_candidate_task, p, config_path, profiles, p.candidate_name,
                                cluster.device, remeasure, entry_ref)] = i
        results: list[Any] = [None] * len(plans)
        pending = list(running)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            i = running[done[0]]
            outcome = ray.get(done[0])
            tasks.free(done[0])  # a candidate still waiting for devices may start now
            where = outcome["node"] + (f", GPUs {outcome['devices']}" if outcome["devices"]
                                       else "")
            console.rule(f"{plans[i].candidate_name}: measured in a Ray task on {where} "
                         f"({time.perf_counter() - started:.0f}s into the fan-out)")
            results[i] = evaluate(plans[i], _handed_over(outcome),
                                  {k: outcome[k] for k in ("node", "devices", "started_at",
                                                           "ended_at")})
        return results
    except BaseException:
        for ref in running:
            ray.cancel(ref, force=True)
        raise
    finally:
        tasks.free_all()
        leave(cluster)
        console.print(f"[dim]left {escape(cluster.where)}[/]")
