"""Serve one model and measure it: every suite item by item, then the load test.

The baseline's measurement is cached by content (measure/cache.py), so it is measured
once per configuration, not once per candidate.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rich.console import Console

from workbench.config.run_config import RunConfig
from workbench.loadtest.client import LoadClient
from workbench.loadtest.engine_metrics import parse_scrape
from workbench.loadtest.headroom import Headroom, PeakSampler, headroom
from workbench.loadtest.results import LoadResult
from workbench.loadtest.workload import Request
from workbench.measure.load_run import LOAD_DIR, further_load_dir, load_tests
from workbench.measure.watch import StoppedEarly, SuiteRun, SuiteWatch
from workbench.mechanisms.errors import InfraError
from workbench.mechanisms.files import write_json
from workbench.mechanisms.progress import counted, status
from workbench.mechanisms.timing import span
from workbench.serve.device import Binding, device_facts
from workbench.serve.engine import (
    Endpoint,
    EngineServer,
    ServerInfo,
    api_key_from,
    parse_cache_info,
)
from workbench.suites.definition import Suite
from workbench.suites.results import SuiteResult
from workbench.suites.runner import run_suite

__all__ = ["LOAD_DIR", "MEASUREMENT_FILE", "NOT_MEASURED", "SAMPLING", "Measurement",
           "further_load_dir", "measure", "not_measured_load"]

MEASUREMENT_FILE = "measurement.json"
SAMPLING = {"temperature": 0.0, "api": "chat.completions"}


@dataclass
class Measurement:
    role: str
    server: ServerInfo
    suites: dict[str, SuiteResult]
    load: LoadResult
    wall_time_s: float
    headroom: dict = field(default_factory=dict)  # headroom.Headroom as a dict
    # each further load profile the run gates (load.also), measured after `load` in the
    # same engine sessions; each keeps its own later rounds
    further_load: dict[str, LoadResult] = field(default_factory=dict)
    # why this candidate was measured no further (gate/early.py); None: measured in full
    stopped: StoppedEarly | None = None

    def to_dict(self) -> dict:
        further = {"further_load": {k: v.to_dict() for k, v in self.further_load.items()}} \
            if self.further_load else {}
        stopped = {"stopped": self.stopped.to_dict()} if self.stopped else {}
        return {"role": self.role, "server": asdict(self.server),
                "suites": {k: v.to_dict() for k, v in self.suites.items()},
                "load": self.load.to_dict(), "wall_time_s": self.wall_time_s,
                "headroom": self.headroom, **further, **stopped}

    def metrics(self) -> dict[str, float]:
        """This model's figures flattened for MLflow, named alike for every model (the
        caller prefixes the role), so runs line up in the UI's compare view."""
        out: dict[str, float] = {}
        for name, r in self.suites.items():
            out.update({f"{name}.{k}": v for k, v in r.metrics.items()})
            if r.kind == "fidelity":
                continue
            out[f"{name}.accuracy"] = r.accuracy
            for s, info in r.slices.items():
                out[f"{name}.{s}.accuracy"] = info["accuracy"]
        out.update(self.load.metrics())
        for profile, load in self.further_load.items():
            out.update({f"{profile}.{k}": v for k, v in load.metrics().items()})
        for figure in ("cold_start_s", "first_token_s"):
            if figure not in self.server.unmeasured:  # an endpoint's is not its to give
                out[figure] = getattr(self.server, figure)
        out.update({f"headroom.{k}": float(v) for k, v in self.headroom.items()
                    if isinstance(v, (int, float))})
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        return cls(role=data["role"], server=ServerInfo(**data["server"]),
                   suites={k: SuiteResult.from_dict(v) for k, v in data["suites"].items()},
                   load=LoadResult.from_dict(data["load"]), wall_time_s=data["wall_time_s"],
                   headroom=data.get("headroom", {}),
                   further_load={k: LoadResult.from_dict(v)
                                 for k, v in data.get("further_load", {}).items()},
                   stopped=StoppedEarly.from_dict(data.get("stopped")))


NOT_MEASURED = "not measured"  # a load test's boundary when the session ran none


def not_measured_load(cfg: RunConfig, name: str) -> LoadResult:
    """The load result of a profile a session did not run (a candidate stopped early): no
    levels, and said so in its boundary."""
    return LoadResult(boundary=NOT_MEASURED, profile=cfg.load.profiles[name].model_dump(),
                      levels=[], name=name)


def _runs(suites: list[Suite], watch: SuiteWatch | None, done: dict[str, SuiteResult]
          ) -> list[SuiteRun]:
    """Every run of every suite not measured yet, in the watch's order (the cheapest
    decisive first) or the config's."""
    runs = [(s, name, guided) for s in suites for name, guided in s.spec.runs()
            if name not in done]
    return watch.order(runs) if watch is not None else runs


def _run_suites(cfg: RunConfig, srv: EngineServer | Endpoint, served: str, suites: list[Suite],
                out_dir: Path, console: Console, tokenizer_dir: Path, role: str, device: str,
                watch: SuiteWatch | None = None, done: dict[str, SuiteResult] | None = None,
                references: dict[str, dict[str, str]] | None = None
                ) -> tuple[dict[str, SuiteResult], StoppedEarly | None]:
    """Each suite run not in `done` (measured by an earlier, stopped session), asking the
    watch after each whether the candidate has failed past doubt: then the rest are left."""
    results = dict(done or {})
    in_flight = device_facts(device, cfg.engine).suite_in_flight
    srv.info.device_facts.setdefault("suite_in_flight", in_flight)  # an endpoint's too
    runs = _runs(suites, watch, results)
    with counted(console) as progress:
        for k, (suite, name, guided) in enumerate(runs):
            items = suite.sample(cfg.profile, cfg.seed)
            task = progress.add_task(f"{name} ({cfg.profile})", total=len(items))
            try:
                with span(f"{role}: {name}", "suite"):
                    results[name] = run_suite(
                        srv.base_url, served, suite, items, seed=cfg.seed,
                        sink=out_dir / f"items-{name}.jsonl",
                        timeout_s=cfg.engine.request_timeout_s,
                        on_item=functools.partial(progress.advance, task),
                        name=name, guided=guided, tokenizer_dir=tokenizer_dir,
                        headers=srv.headers, concurrency=in_flight,
                        references=None if references is None else references.get(name, {}),
                    )
            except InfraError:
                srv.check_alive()  # a dead engine is the better explanation, if so
                raise
            stopped = watch.after(results, [n for _, n, _ in runs[k + 1:]]) \
                if watch is not None else None
            if stopped is not None:
                return results, stopped
    return results, None


def _kv_usage(server: EngineServer | Endpoint) -> float:
    return parse_scrape(server.metrics()).gauges.get("vllm:kv_cache_usage_perc", 0.0)


@contextlib.contextmanager
def library_credentials(api_key: str | None) -> Iterator[None]:
    """The key where the libraries the workbench drives look for one: `vllm bench serve`
    (a subprocess inheriting this environment) and lm-eval's local-completions both read
    OPENAI_API_KEY. Unset while a side without a key is measured, so a key the user's shell
    happens to hold is never sent to a server that did not ask for it."""
    saved = os.environ.pop("OPENAI_API_KEY", None)
    if api_key:
        os.environ["OPENAI_API_KEY"] = api_key
    try:
        yield
    finally:
        os.environ.pop("OPENAI_API_KEY", None)
        if saved is not None:
            os.environ["OPENAI_API_KEY"] = saved


def _server(cfg: RunConfig, role: str, model_dir: Path, served: str, extra_args: list[str],
            out_dir: Path, device: str, binding: Binding) -> EngineServer | Endpoint:
    """The engine this side is measured on: started here on `binding`, or the endpoint
    the config names for the role (attached to, not started)."""
    ep = cfg.endpoints.of(role)
    if ep is not None:
        return Endpoint(ep.url, api_key_from(ep.api_key_env), ep.model,
                        out_dir / "server.log")
    facts = replace(device_facts(device, cfg.engine), binding=binding)
    log = "server.log" if binding == "vllm" else f"server-{binding}.log"
    return EngineServer(model_dir, served, cfg.engine, out_dir / log, extra_args,
                        device=device, facts=facts)


def _start(server: EngineServer | Endpoint, role: str, model_dir: Path, device: str,
           console: Console) -> None:
    if isinstance(server, Endpoint):
        with status(console, f"\\[{role}] reading endpoint {server.base_url}"):
            server.start()
        console.print(f"  \\[{role}] endpoint {server.base_url} serves "
                      f"{server.info.served_name} (vLLM {server.info.version}); not "
                      f"measurable there: {', '.join(server.info.unmeasured)}")
    else:
        with status(console, f"\\[{role}] starting vLLM ({device}) for {model_dir.name}"), \
                span(f"{role}: engine start", "engine_start"):
            server.start()
        console.print(f"  \\[{role}] engine healthy after {server.info.cold_start_s:.1f}s "
                      f"(vLLM {server.info.version}, log {server.log_file})")


def measure(cfg: RunConfig, role: str, model_dir: Path, served: str, extra_args: list[str],
            suites: list[Suite], requests: list[Request], tokenizer_dir: Path, out_dir: Path,
            console: Console, device: str, ceiling: bool = True,
            further: dict[str, list[Request]] | None = None, watch: SuiteWatch | None = None,
            done: dict[str, SuiteResult] | None = None, load_test: bool = True,
            references: dict[str, dict[str, str]] | None = None,
            binding: Binding = "vllm", own_memory: bool = True) -> Measurement:
    """Start the engine for one model (or attach to its endpoint), run every suite and the
    load sweep of each profile the run gates (its own, then `further`'s), stop it.

    ceiling: also measure the load generator's own limit (once per run is enough).
    watch: the candidate's suites' order and early stop (measure/watch.py); a candidate
    it stops runs no load test. done: suites an earlier, stopped session measured.
    load_test: False runs none (a candidate served dense: its speed is not its format's).
    own_memory: False keeps no headroom (served dense: its memory is the dense model's).
    references: the baseline's traffic answers by suite and id, scored under this model.
    binding: the engine's cores; on `every-core` it runs no load test (measure/sessions.py
    runs that in a session of its own, on vLLM's binding)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_test = load_test and binding == "vllm"
    server = _server(cfg, role, model_dir, served, extra_args, out_dir, device, binding)
    client = LoadClient(out_dir / LOAD_DIR / "bench-client.log")
    try:
        with library_credentials(server.api_key):
            if not suites:
                # A load-only session (a later round, a cached baseline's load): its cold
                # start is in no record, so the client may import beside it (docs/load.md).
                client.start()
            _start(server, role, model_dir, device, console)
            pgid = server.process.pid if server.process is not None else None
            with PeakSampler(pgid, functools.partial(_kv_usage, server)) as peaks:
                if load_test:
                    client.start()  # if not yet: it imports while the suites run
                suite_results, stopped = _run_suites(
                    cfg, server, server.info.served_name, suites, out_dir, console,
                    tokenizer_dir, role, device, watch, done, references)
                profiles = {cfg.load.profile: requests, **(further or {})}
                loads = {name: not_measured_load(cfg, name) for name in profiles} \
                    if stopped is not None or not load_test else load_tests(
                        cfg, server, profiles, tokenizer_dir, out_dir, console, role, client,
                        ceiling, pgid if device == "cpu" else None)
                load = loads.pop(cfg.load.profile)
        room = _room(cfg, role, server, model_dir, profiles, peaks)
    finally:
        client.stop()
        with span(f"{role}: engine stop", "engine_stop"):
            server.stop()
    # a candidate served dense keeps no headroom: its weights, KV cache and peaks are the
    # dense model's, not the candidate's own
    result = Measurement(role, server.info, suite_results, load,
                         round(time.perf_counter() - started, 2),
                         room.to_dict() if own_memory else {}, loads, stopped)
    write_json(out_dir / MEASUREMENT_FILE, result.to_dict())
    return result


def _room(cfg: RunConfig, role: str, server: EngineServer | Endpoint, model_dir: Path,
          profiles: dict[str, list[Request]], peaks: PeakSampler) -> Headroom:
    """The session's memory headroom, read after the load, when the engine has reported
    its final cache figures."""
    attached = isinstance(server, Endpoint)
    final = server.metrics()
    server.info.cache_info = parse_cache_info(final) or server.info.cache_info
    return headroom(None if attached else model_dir, server.info.cache_info,
                    max(r.prompt_tokens + r.output_tokens
                        for reqs in profiles.values() for r in reqs),
                    peaks,
                    int(parse_scrape(final).counters.get("vllm:num_preemptions", 0)),
                    1 if attached else cfg.engine.data_parallel_size,
                    cfg.endpoints.devices(role) if attached else cfg.engine.devices,
                    server.info.memory_at_load)
