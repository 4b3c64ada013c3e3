"""Every input of a run checked before anything starts, all problems at once (exit 2 with
nothing written), and the run's plan built from what was checked: the config, the resolved
model and its digest, the suites, the gate policy, the load's requests, the device.
`validate` runs exactly these checks.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from workbench.config.gate_policy import GatePolicy, load_gate_policy
from workbench.config.run_config import RunConfig
from workbench.loadtest.bench import level_requests
from workbench.loadtest.headroom import weights_bytes
from workbench.loadtest.workload import Request
from workbench.mechanisms.digests import folder_digest
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.files import writable_problem
from workbench.mechanisms.hub import resolve_hub_model
from workbench.plan.checks import (
    Problems,
    data_problems,
    endpoint_problems,
    engine_args_problems,
    gates_path,
    model_problems,
    parallelism_problems,
    policy_problems,
    recipe_file_problems,
    tracking_problems,
)
from workbench.plan.context import context_problems
from workbench.plan.device_checks import device_problems
from workbench.plan.judge_checks import judge_problems
from workbench.plan.traffic_load import replayed_requests
from workbench.quantize.checks import candidate_problems, serving_problem
from workbench.quantize.formats import format_of_candidate, served_dense
from workbench.serve.device import Binding, device_facts, suite_binding
from workbench.serve.engine import detect_device, engine_version
from workbench.suites.definition import Suite, find_suite_dir, load_suite
from workbench.suites.split import ItemSplit

__all__ = ["Outputs", "Plan", "Problems", "check_candidates", "check_config", "check_outputs",
           "config_problems", "plan"]


@dataclass(frozen=True)
class Outputs:
    """Where a command will write: each checked for writability before anything is."""

    runs_dir: Path | None = None
    files: dict[str, Path | None] = field(default_factory=dict)  # option -> file


class Plan:
    """Everything one candidate's evaluation needs, read and checked before any work."""

    def __init__(self, cfg: RunConfig, candidate: str, device: str, policy: GatePolicy,
                 suites: list[Suite], requests: list[Request],
                 split: ItemSplit | None = None,
                 further: dict[str, list[Request]] | None = None,
                 look_deadline: float | None = None, shared_host: bool = False) -> None:
        self.cfg = cfg
        self.device = device
        self.candidate_name = candidate
        self.candidate = cfg.candidate(candidate)
        # a built int4 candidate this device has no kernel for, served as its weights
        # dequantised (quantize/formats.py); a recipe file's format is known once built,
        # and the quantise step decides it then (pipeline/quantize.py)
        self.dense = None if cfg.endpoints.candidate is not None or self.candidate.checkpoint \
            else served_dense(candidate, format_of_candidate(self.candidate), device)
        self.model_dir = cfg.model.resolved_path(cfg.base_dir)
        self.policy = policy
        self.suites = suites
        self.requests = requests
        # the requests of each further load profile the run gates (load.also), in order
        self.further = further or {}
        # judged on one half of every suite's items (tune's search or confirmation); the
        # engine still answers every item of the sample, and the cache keeps them all
        self.split = split
        # time.perf_counter() past which no second look may end (a tune's --max-hours):
        # pipeline/look_cost.py skips one that would, by the first look's own rates
        self.look_deadline = look_deadline
        # the run's engines share their host with others (a sweep fanned out over Ray):
        # none may take every core
        self.shared_host = shared_host

    @functools.cached_property
    def suite_binding(self) -> Binding:
        """Where both models' suites compute (serve/device.suite_binding): decided once,
        from the baseline's weights, so that both sides answer theirs alike."""
        if self.shared_host:
            return "vllm"
        return suite_binding(self.device, self.cfg.engine, weights_bytes(self.model_dir),
                             len(os.sched_getaffinity(0)),
                             device_facts(self.device, self.cfg.engine).serve_dtype)

    def variant(self, cfg: RunConfig, candidate: str, split: ItemSplit | None,
                look_deadline: float | None = None) -> Plan:
        """Another candidate of the same checked run (a tune trial, whose config adds it),
        judged on a half of the items or on all of them."""
        return Plan(cfg, candidate, self.device, self.policy, self.suites, self.requests,
                    split, self.further, look_deadline, self.shared_host)

    def at_profile(self, profile: Literal["smoke", "full"]) -> Plan:
        """The same run measuring another profile of its suites (a second look)."""
        return Plan(self.cfg.with_profile(profile), self.candidate_name, self.device,
                    self.policy, self.suites, self.requests, self.split, self.further,
                    self.look_deadline, self.shared_host)

    def growing_runs(self) -> set[str]:
        """The suite runs (a guided run under its own name) that have items this
        profile's sample leaves out: what measuring every item would add to."""
        seed, profile = self.cfg.seed, self.cfg.profile
        return {name for s in self.suites for name, _ in s.spec.runs()
                if len(s.sample("full", seed)) > len(s.sample(profile, seed))}

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
        problems.extend(judge_problems(cfg, policy, path, suites))
    if policy is not None:
        problems.extend(f"{path}: {where}: {name!r} is not a load profile of "
                        f"{cfg.source.name}; known: {', '.join(sorted(cfg.load.profiles))}"
                        for where, name in policy.unknown_profiles(cfg.load.profiles))
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
    problems.run(lambda: device_problems(cfg, device, serving and _serves_here(cfg),
                                         _builds_here(cfg, candidates)))
    if tracking:  # the commands that judge (evaluate, sweep, validate) ask the endpoints
        problems.run(lambda: endpoint_problems(cfg))
        problems.run(lambda: tracking_problems(cfg))
    problems.extend(check_outputs(outputs))
    return problems


def _serves_here(cfg: RunConfig) -> bool:
    """An engine starts on this host: a side is not an endpoint."""
    return cfg.endpoints.baseline is None or cfg.endpoints.candidate is None


def _builds_here(cfg: RunConfig, candidates: list[str]) -> bool:
    """The quantiser may run here: a candidate is neither an endpoint, a ready checkpoint
    nor the baseline's weights."""
    return cfg.endpoints.candidate is None and any(
        cfg.candidate(n).checkpoint is None and cfg.candidate(n).recipe != "none"
        for n in candidates if n in cfg.candidates)


def _serving_problems(cfg: RunConfig, name: str, device: str) -> list[str]:
    problem = serving_problem(cfg, name, device)
    return [problem] if problem else []


def _profile_requests(cfg: RunConfig, name: str) -> list[Request]:
    """A profile's requests, as the load test will send them (a trace read line by line)."""
    profile = cfg.with_load_profile(name).workload
    if profile.from_suite:
        return replayed_requests(cfg, name, profile)
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


def check_config(cfg: RunConfig, outputs: Outputs) -> tuple[GatePolicy, list[Suite]]:
    """validate's check without --candidate: everything evaluate checks, for every
    candidate's recipe and data and every load profile the config declares; only whether
    this device can serve each candidate is left to `validate --candidate`."""
    problems = Problems()
    policy, suites = suites_and_policy(cfg, problems)
    config_problems(cfg, list(cfg.candidates), detect_device(), False, outputs,
                    profiles=cfg.load.declared(), problems=problems)
    problems.raise_any()
    assert policy is not None
    return policy, suites


def plan(cfg: RunConfig, candidate: str, outputs: Outputs, device: str | None = None,
         cluster: tuple[int, int, str] | None = None) -> Plan:
    """evaluate's check: every problem at once, or the plan of the run (cluster: the
    devices a Ray cluster offers, when the run's engines go there)."""
    device = device or detect_device()
    problems = Problems()
    problems.get(lambda: cfg.candidate(candidate))
    problems.raise_any()  # an unknown candidate makes the other checks meaningless
    policy, suites = suites_and_policy(cfg, problems)
    requests = {name: problems.get(functools.partial(_profile_requests, cfg, name))
                for name in cfg.load.gated}
    config_problems(cfg, [candidate], device, True, outputs, profiles=[], problems=problems,
                    cluster=cluster)
    problems.raise_any()
    made = {name: r for name, r in requests.items() if r is not None}
    assert policy is not None and len(made) == len(requests)
    own, *rest = cfg.load.gated
    return Plan(cfg, candidate, device, policy, suites, made[own],
                further={name: made[name] for name in rest}, shared_host=cluster is not None)
