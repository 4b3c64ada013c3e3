"""The up-front checks, one per input: the model, the gate policy against the suites, each
candidate's recipe file and data, the engine arguments (parsed by vLLM's own parser), the
tracking server, the devices a parallel engine asks for, the endpoints. plan.py runs them
for every command, so `workbench validate` refuses exactly what `evaluate` would and
reports every problem at once.

Each check returns one-line problems naming the file and key; none raises past here.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

import httpx

from workbench.config.gate_policy import GatePolicy
from workbench.config.run_config import RunConfig, tracking_uri
from workbench.mechanisms.digests import sha256_json
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.files import read_json, writable_problem
from workbench.mechanisms.paths import cache_root, engine_python, offline_env
from workbench.mechanisms.yaml_io import read_yaml
from workbench.quantize.build import calibration_samples, needs_calibration
from workbench.quantize.calibration import heldout_samples
from workbench.serve.engine import api_key_from, engine_version, served_models
from workbench.suites.definition import Suite
from workbench.suites.results import ITEM_CHECKS

__all__ = [
    "RESERVED_ENGINE_ARGS",
    "Problems",
    "T",
    "data_problems",
    "endpoint_problems",
    "engine_args_problems",
    "gates_path",
    "host_devices",
    "model_problems",
    "parallelism_problems",
    "policy_problems",
    "recipe_file_problems",
    "tracking_problems",
    "unreachable",
]

T = TypeVar("T")


# Engine arguments the workbench sets itself (serve.engine_command): given again, they
# would silently override what the workbench measures and reports.
RESERVED_ENGINE_ARGS = ("--model", "--served-model-name", "--host", "--port", "--max-model-len",
                        "--dtype", "--seed", "--tensor-parallel-size", "-tp",
                        "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp",
                        "--distributed-executor-backend")


class Problems(list):
    """Problems collected from checks: a check returns its problems (one line each) or
    raises InputError with them; the first of a repeated line is kept."""

    def run(self, check: Callable[[], list[str]]) -> None:
        self.extend(self.get(check) or [])

    def get(self, read: Callable[[], T]) -> T | None:
        """What ``read`` returns, or None when it raised InputError (its problems kept)."""
        try:
            return read()
        except InputError as err:
            self.extend(err.problems)
            return None
        except OSError as err:  # a path a config names that the OS refuses (too long...)
            self.append(f"{err.filename or 'a path in the config'}: cannot be read: "
                        f"{err.strerror or err}")
            return None

    def raise_any(self) -> None:
        unique = list(dict.fromkeys(self))
        if unique:
            raise InputError(unique[0], unique)


def model_problems(cfg: RunConfig) -> list[str]:
    """The model folder exists (a hub repo id resolves), and the context asked for is
    within the model's own."""
    local = cfg.model.local_folder(cfg.base_dir)
    if local is not None and cfg.model.revision is not None:
        return [f"{cfg.source}: model.revision: applies to a hub repo id, but model.path "
                f"{cfg.model.path!r} is a folder on this machine"]
    try:
        model_dir = cfg.model.resolved_path(cfg.base_dir)
    except InputError as err:
        return [f"{cfg.source}: {err}"]
    if not (model_dir / "config.json").is_file():
        hint = " (run scripts/setup.sh)" if cfg.model.path == "default" else ""
        return [f"{cfg.source}: model.path: {model_dir} is not a model folder{hint}"]
    config = read_json(model_dir / "config.json")
    own = config.get("max_position_embeddings") if isinstance(config, dict) else None
    if isinstance(own, int) and cfg.engine.max_model_len > own:
        return [f"{cfg.source}: engine.max_model_len: {cfg.engine.max_model_len} exceeds the "
                f"model's own context ({own}, max_position_embeddings in "
                f"{model_dir / 'config.json'})"]
    return []


def gates_path(cfg: RunConfig) -> Path:
    path = cfg.resolve(cfg.gates)
    if not path.is_file():
        raise InputError(f"{cfg.source}: gates: {cfg.gates!r} not found (looked at {path})")
    return path


def _allowed_metrics(suite: Suite) -> tuple[str, ...]:
    generating = ("healthy", "truncated") if suite.generates else ()
    return ("score", *ITEM_CHECKS.get(suite.spec.scoring, ()), *generating)


def policy_problems(policy: GatePolicy, path: Path, suites: list[Suite]) -> list[str]:
    """Gates that name a suite the config does not run (a guided run counts by its name),
    or a per-item metric that suite's scoring does not produce."""
    runs = {run: s for s in suites for run, _ in s.spec.runs()}
    named = [(section, g.suite) for section, g in policy.paired()] + [
        ("fidelity", g.suite) for g in policy.fidelity]
    if policy.health is not None:
        named += [("health", name) for name in policy.health.suites or []]
    problems = [f"{path}: {section} gate names suite {suite!r}, which the config does not "
                f"run (runs: {', '.join(sorted(runs))})" for section, suite in named
                if suite not in runs]
    for section, g in policy.paired():
        if g.suite in runs and (section == "traffic") != (runs[g.suite].spec.kind == "traffic"):
            problems.append(f"{path}: {section} gate names suite {g.suite!r}, a "
                            f"{runs[g.suite].spec.kind} suite: a traffic suite is gated under "
                            "traffic, and only a traffic suite is")
        if g.suite in runs and g.metric not in _allowed_metrics(runs[g.suite]):
            problems.append(f"{path}: {section} gate on {g.suite!r}: metric {g.metric!r} is "
                            f"not produced by its scoring ({runs[g.suite].spec.scoring}); "
                            f"allowed: {', '.join(_allowed_metrics(runs[g.suite]))}")
    if policy.health is not None:
        problems += [f"{path}: health gate names suite {name!r}, which generates no text "
                     f"(its scoring is {runs[name].spec.scoring})"
                     for name in policy.health.suites or []
                     if name in runs and not runs[name].generates]
    return problems + _coverage_problems(policy, path, runs)


def _coverage_problems(policy: GatePolicy, path: Path, runs: dict[str, Suite]) -> list[str]:
    """`ungated` names suites the config runs and no gate judges; a default's metric is
    one each suite it gates produces."""
    named = {g.suite for _, g in policy.paired()}
    problems = [f"{path}: ungated names suite {u.suite!r}, which the config does not run "
                f"(runs: {', '.join(sorted(runs))})" for u in policy.ungated
                if u.suite not in runs]
    problems += [f"{path}: ungated lists {u.suite!r}, which a gate of the policy judges: "
                 "remove one of them" for u in policy.ungated if u.suite in named]
    kinds = {run: s.spec.kind for run, s in runs.items()}
    for suite, kind, rule in policy.defaulted(kinds):
        if rule.metric not in _allowed_metrics(runs[suite]):
            problems.append(f"{path}: defaults.{kind}.metric {rule.metric!r} is not produced "
                            f"by suite {suite!r} ({runs[suite].spec.scoring}); gate it by "
                            f"name or list it under ungated")
    return problems


def recipe_file_problems(cfg: RunConfig, name: str) -> list[str]:
    """A recipe file must parse as YAML before anything is built from it."""

    cand = cfg.candidate(name)
    if cand.recipe_file is None:
        return []
    path = cfg.resolve(cand.recipe_file)
    if not path.is_file():
        return []  # candidate_problems names it
    raw = read_yaml(path)
    if not isinstance(raw, (dict, list)) or not raw:
        return [f"{path}: candidates.{name}.recipe_file: expected an llm-compressor recipe "
                f"(a mapping of stages or a list of modifiers), got {type(raw).__name__}"]
    return []


def data_problems(cfg: RunConfig, name: str) -> list[str]:
    """Calibration and held-out data: files present, parseable, enough samples."""
    where = f"{cfg.source}: "
    problems = Problems()
    if needs_calibration(cfg.candidate(name)):
        problems.get(lambda: calibration_samples(cfg.calibration, cfg.resolve))
        problems.get(lambda: heldout_samples(cfg.calibration, cfg.resolve))
    return [p if p.startswith(str(cfg.source)) or p.startswith("/") else where + p
            for p in problems]


def engine_args_problems(cfg: RunConfig, names: list[str]) -> list[str]:
    """engine.extra_args and each candidate's engine_args, parsed by vLLM's own argument
    parser in the engine environment (it parses without starting anything); only when
    some are given, since importing vLLM takes seconds."""
    sets = [("engine.extra_args", list(cfg.engine.extra_args))] + [
        (f"candidates.{n}.engine_args", list(cfg.candidate(n).engine_args)) for n in names]
    problems = []
    for key, args in sets:
        reserved = [a for a in args if a.split("=")[0] in RESERVED_ENGINE_ARGS]
        if reserved:
            problems.append(f"{cfg.source}: {key}: {', '.join(reserved)} is set by the "
                            f"workbench itself (from model and engine); remove it")
    given = [a for _, args in sets for a in args]
    if problems or not given:
        return problems
    verdict = _parse_engine_args(given)
    return [f"{cfg.source}: engine arguments {' '.join(given)}: {verdict}"] if verdict else []


_PARSE = ("import sys\n"
          "from vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
          "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
          "make_arg_parser(FlexibleArgumentParser(prog='vllm')).parse_args("
          "['--model', 'm'] + sys.argv[1:])\n")


def _parse_engine_args(args: list[str]) -> str | None:
    """vLLM's verdict on the arguments: None when it accepts them. An accepted set is
    remembered (by the arguments and engine version) so that later runs skip the import."""
    memo = cache_root() / "engine-args" / f"{sha256_json([args, engine_version()])[:24]}.ok"
    if memo.is_file():
        return None
    if not engine_python().exists():
        return None  # the engine's absence is reported when it is needed
    proc = subprocess.run([str(engine_python()), "-c", _PARSE, *args], capture_output=True,
                          text=True, env=offline_env(), timeout=120)
    if proc.returncode == 0:
        memo.parent.mkdir(parents=True, exist_ok=True)
        memo.touch()
        return None
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    return errors[-1].split("error:", 1)[1].strip() if errors else "rejected by vLLM"


def tracking_problems(cfg: RunConfig) -> list[str]:
    """The tracking URI has a scheme MLflow stores runs with and, where that is cheap to
    know, answers within seconds: a dead server is refused now, not after minutes of
    retries at the end of a run."""
    uri = tracking_uri(cfg.tracking)
    if os.environ.get("MLFLOW_TRACKING_URI"):
        where = "MLFLOW_TRACKING_URI (environment, over tracking.uri)"
    else:
        where = f"{cfg.source}: tracking.uri" + ("" if cfg.tracking.uri else " (default)")
    parsed = urlparse(uri)
    scheme = parsed.scheme.split("+")[0]
    if scheme in ("", "file"):
        return [f"{where}: {uri}: {p}" for p in
                filter(None, [writable_problem(Path(parsed.path or uri), "store", True)])]
    if scheme == "sqlite":
        db = Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None
        if db is None:
            return [f"{where}: {uri}: use sqlite:///ABSOLUTE/PATH.db"]
        problem = writable_problem(db, "database", False)
        return [f"{where}: {problem}"] if problem else []
    if scheme not in ("http", "https", "postgresql", "mysql", "mssql"):
        return [f"{where}: {uri}: unsupported scheme {parsed.scheme!r} (allowed: sqlite, "
                "file, http, https, postgresql, mysql, mssql)"]
    if cfg.tracking.required is False:
        return []
    reason = unreachable(uri)
    return [f"{where}: {uri} is unreachable ({reason}); start it, fix the URI, or set "
            "tracking.required: false to run without MLflow"] if reason else []


def unreachable(uri: str, timeout_s: float = 3.0) -> str | None:
    """Why the tracking server cannot be reached, or None: a TCP connection for a database,
    MLflow's /health for a server."""
    parsed = urlparse(uri)
    if parsed.scheme in ("http", "https"):
        import httpx

        try:
            resp = httpx.get(uri.rstrip("/") + "/health", timeout=timeout_s)
        except httpx.HTTPError as err:
            return type(err).__name__
        return None if resp.status_code == 200 else f"/health answered {resp.status_code}"
    if not parsed.hostname:
        return None
    default_ports = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
    port = parsed.port or default_ports.get(parsed.scheme.split("+")[0], 0)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout_s):
            return None
    except OSError as err:
        return err.strerror or type(err).__name__


def host_devices(device: str) -> tuple[int, str]:
    """How many devices an engine may use on this host, and where that number comes
    from: GPUs nvidia-smi lists (within CUDA_VISIBLE_DEVICES), or on a CPU the cores this
    process may run on (vLLM-CPU binds each rank's OpenMP threads to cores of its own)."""
    if device == "cuda":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        if visible:
            return len([d for d in visible.split(",") if d.strip()]), "CUDA_VISIBLE_DEVICES"
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        return out.stdout.count("GPU "), "nvidia-smi -L"
    return len(os.sched_getaffinity(0)), "CPU cores this process may use"


def parallelism_problems(cfg: RunConfig, device: str,
                         cluster: tuple[int, int, str] | None = None) -> list[str]:
    """An engine that needs more devices than there are is refused before anything starts,
    naming both numbers. cluster: (devices on its largest node, devices in all, where the
    numbers come from) a Ray cluster offers, for engines that
    run their workers there (distributed_executor_backend: ray) or sweeps fanned out on it."""
    e = cfg.engine
    if cfg.endpoints.baseline is not None and cfg.endpoints.candidate is not None:
        return []  # nothing is served here
    need = e.devices
    shape = (f"tensor_parallel_size {e.tensor_parallel_size} x pipeline_parallel_size "
             f"{e.pipeline_parallel_size} x data_parallel_size {e.data_parallel_size} = "
             f"{need} {'GPUs' if device == 'cuda' else 'CPU ranks'} per engine")
    problems = []
    if device == "cpu" and e.distributed_executor_backend == "ray":
        problems.append(f"{cfg.source}: engine.distributed_executor_backend: ray is not "
                        "supported by vLLM-CPU here (its CPU workers need the mp executor); "
                        "use mp or leave it unset")
    have, source = host_devices(device)
    if cluster is not None:  # a sweep fanned out on Ray, or an engine whose workers are Ray's
        per_node, total, where = cluster
        have, source = ((total, f"{where}, all nodes") if e.distributed_executor_backend == "ray"
                        else (per_node, f"{where}, largest node (the mp executor stays on "
                                        "one node)"))
    if need > have:
        problems.append(f"{cfg.source}: engine: {shape}, but {have} are available "
                        f"({source})")
    return problems + _head_split_problems(cfg)


def _head_split_problems(cfg: RunConfig) -> list[str]:
    """Tensor parallelism splits attention heads (and KV heads) evenly over the devices,
    as vLLM requires: a size that does not divide them is refused now, not by the engine
    minutes later."""
    tp = cfg.engine.tensor_parallel_size
    if tp == 1 or cfg.endpoints.baseline is not None and cfg.endpoints.candidate is not None:
        return []
    try:
        config = read_json(cfg.model.resolved_path(cfg.base_dir) / "config.json")
    except (InputError, OSError, ValueError):
        return []  # the model's own check reports a missing or unreadable model
    heads = config.get("num_attention_heads") if isinstance(config, dict) else None
    kv = config.get("num_key_value_heads", heads) if isinstance(config, dict) else None
    if isinstance(heads, int) and heads % tp:
        return [f"{cfg.source}: engine.tensor_parallel_size: {tp} does not divide the "
                f"model's {heads} attention heads (num_attention_heads in its config.json)"]
    if isinstance(kv, int) and kv % tp and tp % kv:
        return [f"{cfg.source}: engine.tensor_parallel_size: {tp} and the model's {kv} KV "
                f"heads (num_key_value_heads) divide neither way"]
    return []


def endpoint_problems(cfg: RunConfig) -> list[str]:
    """Each endpoint the config names answers /v1/models with the key it is given and
    serves the model asked for: a wrong URL or key is exit 2 now, not a failed run later."""

    problems = []
    for role in ("baseline", "candidate"):
        ep = cfg.endpoints.of(role)
        if ep is None:
            continue
        where = f"{cfg.source}: endpoints.{role}"
        try:
            key = api_key_from(ep.api_key_env)
        except InputError as err:
            problems.append(f"{where}.api_key_env: {str(err).removeprefix('endpoints: ')}")
            continue
        try:
            models = served_models(ep.url, key)
        except httpx.HTTPStatusError as err:
            code = err.response.status_code
            why = ((f"refused the key from ${ep.api_key_env}" if key else
                    "asks for an API key: name its environment variable in api_key_env")
                   if code in (401, 403) else f"answered {code}")
            problems.append(f"{where}.url: {ep.url}/v1/models {why}")
            continue
        except (httpx.HTTPError, ValueError) as err:
            problems.append(f"{where}.url: {ep.url} does not answer /v1/models "
                            f"({type(err).__name__})")
            continue
        if ep.model is not None and ep.model not in models:
            problems.append(f"{where}.model: {ep.model!r} is not served there (it serves "
                            f"{', '.join(models) or 'nothing'})")
        elif ep.model is None and len(models) != 1:
            problems.append(f"{where}.model: the endpoint serves {len(models)} models "
                            f"({', '.join(models)}); name the one to measure")
    return problems
