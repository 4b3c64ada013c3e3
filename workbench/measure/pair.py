"""Baseline and candidate measured together: the baseline's suites from the cache when they
are there, the load test always beside the candidate's, in `load.rounds` engine sessions
each (docs/load.md). A pair measured before with nothing changed comes from the cache
whole: latency is still compared only between sessions that ran side by side.

The candidate's suites are watched (measure/watch.py): one that has failed past doubt is
measured no further, and its load test does not run, nor a cached baseline's. That load
session therefore comes after the candidate's suites, so that a stopped candidate costs it
nothing (docs/gates.md, "Stopping early").
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.markup import escape

from workbench.measure.cache import (
    baseline_key,
    cached_measurement,
    cached_pair,
    load_cached,
    load_pair,
    pair_key,
    store_in_cache,
    store_pair,
)
from workbench.measure.measurement import (
    MEASUREMENT_FILE,
    NOT_MEASURED,
    Measurement,
    measure,
    not_measured_load,
)
from workbench.measure.sessions import measure_bound
from workbench.measure.watch import StoppedEarly, WatchFor
from workbench.mechanisms.files import write_json
from workbench.plan.plan import Plan
from workbench.quantize.build import QuantizeResult
from workbench.serve.device import device_facts
from workbench.serve.engine_log import served_on_zen
from workbench.suites.definition import Suite
from workbench.suites.results import SuiteResult
from workbench.suites.split import ItemSplit

__all__ = ["ROLES", "MeasuredPair", "Role", "baseline_entry", "measure_baseline_suites",
           "measure_pair", "served_name", "with_rounds"]

Role = Literal["baseline", "candidate"]
ROLES: tuple[Role, Role] = ("baseline", "candidate")


@dataclass(frozen=True)
class MeasuredPair:
    """What the engine stages hand to the judge: the candidate's artifact, both sides'
    measurements, and what came from caches."""

    artifact: QuantizeResult
    baseline: Measurement
    candidate: Measurement
    reused: dict[str, bool]

    def side(self, role: Role) -> Measurement:
        return self.baseline if role == "baseline" else self.candidate

    @property
    def stopped(self) -> StoppedEarly | None:
        """Why the candidate was measured no further, when it was stopped early."""
        return self.candidate.stopped

    def restricted(self, split: ItemSplit | None, suites: list[Suite]) -> MeasuredPair:
        """Both sides' suites over one half of their items (None: all of them); the load
        test and headroom are not item by item and stay whole."""
        if split is None:
            return self
        by_run = {name: s for s in suites for name, _ in s.spec.runs()}

        def half(m: Measurement) -> Measurement:
            return replace(m, suites={name: split.restrict(r, by_run[name])
                                      if name in by_run else r
                                      for name, r in m.suites.items()})

        return replace(self, baseline=half(self.baseline), candidate=half(self.candidate))


def served_name(p: Plan, role: str) -> str:
    return p.cfg.model.name if role == "baseline" else f"{p.cfg.model.name}-{p.candidate_name}"


def _baseline_key(p: Plan) -> str:
    return baseline_key(p.cfg, p.model_digest, p.suites, p.device, p.engine_version,
                        p.requests, p.further, p.suite_binding)


def baseline_entry(p: Plan) -> Path:
    """The cache entry of the baseline's suites under this plan (model, engine, suites,
    sampling, load): the one key serial runs and Ray tasks share."""
    return cached_measurement(_baseline_key(p))


def measure_baseline_suites(p: Plan, out_dir: Path, console: Console) -> Measurement:
    """The baseline measured (suites and load) and its suites cached for every later
    candidate; a fanned-out sweep's first Ray task runs this too. With the suites on every
    core, the suites alone: its load session comes after the candidate's suites, as a
    cached baseline's does (_with_load), and not at all if the candidate is stopped."""
    m = measure_bound(p.suite_binding, p.cfg, "baseline", p.model_dir,
                      served_name(p, "baseline"), [], p.suites, p.requests, p.model_dir,
                      out_dir, console, p.device, further=p.further,
                      load_test=_load_with_suites(p))
    if _served_as_planned(p, m):
        store_in_cache(out_dir, baseline_entry(p))
    else:
        console.print("[yellow]![/] the baseline served on another platform than planned "
                      f"({m.server.kernels.get('platform', 'CpuPlatform')}): not cached")
    return m


def _served_as_planned(p: Plan, m: Measurement) -> bool:
    """Whether the engine served on the platform the cache key was made for (serve/
    device.py, zen_platform): a baseline keyed as one platform's and measured on the
    other would be reused beside candidates it cannot be compared with."""
    planned = device_facts(p.device, p.cfg.engine).zen_platform
    return planned is served_on_zen(m.server.kernels)


def _baseline(p: Plan, run_dir: Path, console: Console) -> tuple[Measurement, bool]:
    """The baseline measured in full, or its suites from the cache (True): then its load
    session is due after the candidate's suites (_with_load)."""
    out_dir = run_dir / "baseline"
    if p.cfg.endpoints.baseline is not None:
        console.print(f"[bold]baseline[/]: measuring at {p.cfg.endpoints.baseline.url} "
                      "(an endpoint: never cached)")
        return measure(p.cfg, "baseline", p.model_dir, p.cfg.model.name, [], p.suites,
                       p.requests, p.model_dir, out_dir, console, p.device,
                       further=p.further), False
    cached = baseline_entry(p)
    hit = load_cached(cached, lambda why: console.print(
        f"[yellow]![/] cached baseline results dropped, measuring again: {escape(why)}"))
    if hit is None:
        console.print("[bold]baseline[/]: measuring (cached afterwards)" + (
            "" if _load_with_suites(p) else "; its suites on every core, its load test "
            "after the candidate's suites, on vLLM's binding"))
        return measure_baseline_suites(p, out_dir, console), not _load_with_suites(p)
    shutil.copytree(cached, out_dir, dirs_exist_ok=True)
    console.print(f"[green]✓[/] baseline: reused cached results ({cached}); its load "
                  "test runs again after the candidate's suites, beside the candidate's "
                  "(latency is compared only between sessions measured together)")
    return hit, True


def _load_with_suites(p: Plan) -> bool:
    """The baseline's load test runs in its suites' session (on vLLM's binding), not in a
    session of its own after the candidate's suites (measure/sessions.py)."""
    return p.suite_binding == "vllm"


def _candidate(p: Plan, q: QuantizeResult, run_dir: Path, console: Console,
               base: Measurement, watch: WatchFor | None,
               done: dict[str, SuiteResult] | None = None) -> Measurement:
    """The candidate's session: its suites watched against the baseline's (the cheapest
    decisive first), then its load test unless it was stopped; `done`: the suites a
    stopped run of it measured already."""
    console.print(f"[bold]candidate {p.candidate_name}[/]: measuring" + (
        " (served dense: no load test, its speed and memory would not be "
        f"{q.dense.format}'s)" if q.dense else ""))
    m = measure_bound(p.suite_binding, p.cfg, "candidate", Path(q.served_path or p.model_dir),
                      served_name(p, "candidate"), q.serve_args, p.suites, p.requests,
                      p.model_dir, run_dir / "candidate", console, p.device, further=p.further,
                      watch=watch(base.suites) if watch is not None else None, done=done,
                      load_test=q.dense is None, references=traffic_answers(base.suites),
                      own_memory=q.dense is None)
    if m.stopped is not None:
        _say_stopped(console, p.candidate_name, m.stopped)
    return m


def traffic_answers(suites: dict[str, SuiteResult]) -> dict[str, dict[str, str]]:
    """Each traffic suite's answers by request id: the baseline's, whose likelihood under
    the candidate its runner measures (suites/traffic_ask.py)."""
    return {name: {i.id: i.response for i in r.items} for name, r in suites.items()
            if r.kind == "traffic"}


def _say_stopped(console: Console, name: str, stopped: StoppedEarly) -> None:
    left = ", ".join(stopped.not_measured) or "no suite"
    console.print(f"[bold red]{escape(name)} stopped early[/] after {escape(stopped.after)}: "
                  f"{escape(', '.join(stopped.gates))} failed past doubt "
                  f"({escape(stopped.level)}); not measured: {escape(left)} and the "
                  "load test (--measure-all measures everything)")


def _load_session(p: Plan, role: str, model_dir: Path, serve_args: list[str], out_dir: Path,
                  console: Console, ceiling: bool = True) -> Measurement:
    """An engine session that runs the load test alone."""
    return measure(p.cfg, role, model_dir, served_name(p, role), serve_args, [], p.requests,
                   p.model_dir, out_dir, console, p.device, ceiling, p.further)


def _with_load(p: Plan, q: QuantizeResult, base: Measurement, cand: Measurement,
               base_cached: bool, run_dir: Path, console: Console
               ) -> tuple[Measurement, Measurement]:
    """Both models with every load round the plan asks for: a cached baseline's first
    round in a session of its own, then the later rounds. A candidate stopped early gets
    none, nor one served dense, and nor does a cached baseline: its load is not measured
    in this run."""
    out_dir = run_dir / "baseline"
    if cand.stopped is not None or q.dense is not None:
        if base_cached:
            base = replace(base, load=not_measured_load(p.cfg, p.cfg.load.profile),
                           further_load={name: not_measured_load(p.cfg, name)
                                         for name in base.further_load})
            write_json(out_dir / MEASUREMENT_FILE, base.to_dict())
        return base, cand
    if base_cached:
        fresh = _load_session(p, "baseline", p.model_dir, [], out_dir, console)
        # a baseline whose suites' session ran no load test (its suites on every core) has
        # its headroom from this one, as the candidate's comes from its load session, and
        # this session's time is part of its own
        alone = base.load.boundary == NOT_MEASURED
        base = replace(base, load=fresh.load, further_load=fresh.further_load,
                       headroom=fresh.headroom if alone else base.headroom,
                       wall_time_s=round(base.wall_time_s + fresh.wall_time_s, 2) if alone
                       else base.wall_time_s)
        write_json(out_dir / MEASUREMENT_FILE, base.to_dict())
    return _later_rounds(p, q, base, cand, run_dir, console)


def _later_rounds(p: Plan, q: QuantizeResult, base: Measurement, cand: Measurement,
                  run_dir: Path, console: Console) -> tuple[Measurement, Measurement]:
    """The load test again in fresh engine sessions, baseline and candidate in turn, so
    that the latency gates see the variance between sessions (load.rounds)."""
    if p.cfg.load.rounds < 2:
        return base, cand
    sides = {"baseline": (p.model_dir, []), "candidate": (Path(q.served_path), q.serve_args)}
    later: dict[str, list[Measurement]] = {role: [] for role in ROLES}
    for r in range(2, p.cfg.load.rounds + 1):
        for role, (model_dir, args) in sides.items():
            console.print(f"[bold]{role}[/]: load round {r} of {p.cfg.load.rounds} "
                          "(a fresh engine session)")
            later[role].append(_load_session(p, role, model_dir, args,
                                             run_dir / role / f"round-{r}", console,
                                             ceiling=False))
    out = []
    for role, m in zip(ROLES, (base, cand), strict=True):
        m = with_rounds(m, later[role])
        write_json(run_dir / role / MEASUREMENT_FILE, m.to_dict())
        out.append(m)
    return out[0], out[1]


def with_rounds(first: Measurement, later: list[Measurement]) -> Measurement:
    """The first session's measurement with each load profile's later sessions as its
    rounds (a profile a later session lacks is simply not in its rounds)."""
    further = {name: replace(load, rounds=[m.further_load[name] for m in later
                                           if name in m.further_load])
               for name, load in first.further_load.items()}
    return replace(first, load=replace(first.load, rounds=[m.load for m in later]),
                   further_load=further)


def _what_the_candidate_serves(p: Plan, q: QuantizeResult) -> dict:
    # not q.source: an artifact built now and the same one found in the cache later are
    # the same weights, and their measurement is the same measurement
    return {"candidate": p.candidate.model_dump(mode="json"), "artifact": q.key,
            "serve_args": q.serve_args, **({"served": "dense"} if q.dense else {}),
            "served_name": served_name(p, "candidate"), "rounds": p.cfg.load.rounds}


def _still_stopped(p: Plan, hit: tuple[Measurement, Measurement], watch: WatchFor | None
                   ) -> Measurement | None:
    """A cached pair's candidate as this run would have it: measured in full, or stopped
    where the current watch still stops it (its level and gates as judged now; the policy
    may have changed since). None: its suites are to be completed (--measure-all, or a
    stop the current policy no longer makes)."""
    base, cand = hit
    if cand.stopped is None:
        return cand
    if watch is None:
        return None
    left = [name for s in p.suites for name, _ in s.spec.runs() if name not in cand.suites]
    stopped = watch(base.suites).after(dict(cand.suites), left)
    return replace(cand, stopped=stopped) if stopped is not None else None


def _resume(p: Plan, run_dir: Path, console: Console, cand: Measurement
            ) -> dict[str, SuiteResult]:
    """The suites a stopped candidate measured (its item files already copied into this
    run), to be completed in this run's session; the baseline's folder is laid anew from
    its own cache entry."""
    shutil.rmtree(run_dir / "baseline", ignore_errors=True)
    (run_dir / "candidate" / MEASUREMENT_FILE).unlink(missing_ok=True)
    console.print(f"[green]✓[/] {p.candidate_name}: reused the {len(cand.suites)} suite "
                  "run(s) measured before it was stopped early; measuring the rest and the "
                  "load test")
    return cand.suites


def _reused(p: Plan, q: QuantizeResult, folder: Path, run_dir: Path, console: Console,
            base: Measurement, cand: Measurement) -> MeasuredPair:
    if cand.stopped is not None:  # its stop as this run's watch made it
        write_json(run_dir / "candidate" / MEASUREMENT_FILE, cand.to_dict())
    console.print(f"[green]✓[/] baseline and {p.candidate_name}: reused the pair "
                  f"measured together ({folder}); --remeasure measures them again")
    if cand.stopped is not None:
        _say_stopped(console, p.candidate_name, cand.stopped)
    return MeasuredPair(q, base, cand, {"baseline_results": True, "measurement_pair": True})


def measure_pair(p: Plan, q: QuantizeResult, run_dir: Path, console: Console,
                 remeasure: bool, watch: WatchFor | None = None) -> MeasuredPair:
    """Baseline and candidate, measured together (or the pair from the cache). watch: the
    candidate's suites' order and early stop; None measures everything (--measure-all).
    A cached pair whose candidate was stopped is completed when the watch (or its absence)
    would no longer stop it there."""
    if p.endpoint_roles:
        # what an endpoint serves can change under the same URL: measured every time
        base, base_hit = _baseline(p, run_dir, console)
        base, cand = _with_load(p, q, base, _candidate(p, q, run_dir, console, base, watch),
                                base_hit, run_dir, console)
        return MeasuredPair(q, base, cand, {"baseline_results": False,
                                            "measurement_pair": False})
    folder = cached_pair(pair_key(_baseline_key(p), _what_the_candidate_serves(p, q)))
    done = None
    if remeasure:
        shutil.rmtree(folder, ignore_errors=True)
    elif (hit := load_pair(folder, lambda why: console.print(
            f"[yellow]![/] cached measurement dropped, measuring again: {escape(why)}"))):
        for role in ROLES:  # where the watch reads both sides' log-probabilities
            shutil.copytree(folder / role, run_dir / role, dirs_exist_ok=True)
        if (kept := _still_stopped(p, hit, watch)) is not None:
            return _reused(p, q, folder, run_dir, console, hit[0], kept)
        done = _resume(p, run_dir, console, hit[1])
    base, base_hit = _baseline(p, run_dir, console)
    cand = _candidate(p, q, run_dir, console, base, watch, done)
    base, cand = _with_load(p, q, base, cand, base_hit, run_dir, console)
    if done is not None:  # the completed pair replaces the stopped one, once it exists
        shutil.rmtree(folder, ignore_errors=True)
    if _served_as_planned(p, base) and _served_as_planned(p, cand):
        store_pair(run_dir, folder)
    return MeasuredPair(q, base, cand, {"baseline_results": base_hit,
                                        "measurement_pair": False})
