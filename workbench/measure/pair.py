"""Baseline and candidate measured together: the baseline's suites from the cache when they
are there, the load test always beside the candidate's, in `load.rounds` engine sessions
each (docs/load.md). A pair measured before with nothing changed comes from the cache
whole: latency is still compared only between sessions that ran side by side.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.markup import escape

from workbench.measure.measurement import (
    MEASUREMENT_FILE,
    Measurement,
    baseline_key,
    cached_measurement,
    cached_pair,
    load_cached,
    load_pair,
    measure,
    pair_key,
    store_in_cache,
    store_pair,
)
from workbench.mechanisms.files import write_json
from workbench.plan.plan import Plan
from workbench.quantize.build import QuantizeResult
from workbench.suites.definition import Suite
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
                        p.requests, p.further)


def baseline_entry(p: Plan) -> Path:
    """The cache entry of the baseline's suites under this plan (model, engine, suites,
    sampling, load): the one key serial runs and Ray tasks share."""
    return cached_measurement(_baseline_key(p))


def measure_baseline_suites(p: Plan, out_dir: Path, console: Console) -> Measurement:
    """The baseline measured in full (suites and load) and its suites cached for every
    later candidate; a fanned-out sweep's first Ray task runs this too."""
    m = measure(p.cfg, "baseline", p.model_dir, served_name(p, "baseline"), [], p.suites,
                p.requests, p.model_dir, out_dir, console, p.device, further=p.further)
    store_in_cache(out_dir, baseline_entry(p))
    return m


def _baseline(p: Plan, run_dir: Path, console: Console) -> tuple[Measurement, bool]:
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
        console.print("[bold]baseline[/]: measuring (cached afterwards)")
        return measure_baseline_suites(p, out_dir, console), False
    shutil.copytree(cached, out_dir, dirs_exist_ok=True)
    console.print(f"[green]✓[/] baseline: reused cached results ({cached}); its load "
                  "test runs again now, beside the candidate's (latency is compared only "
                  "between sessions measured together)")
    fresh = _load_session(p, "baseline", p.model_dir, [], out_dir, console)
    m = replace(hit, load=fresh.load, further_load=fresh.further_load)
    write_json(out_dir / MEASUREMENT_FILE, m.to_dict())
    return m, True


def _candidate(p: Plan, q: QuantizeResult, run_dir: Path, console: Console) -> Measurement:
    console.print(f"[bold]candidate {p.candidate_name}[/]: measuring")
    return measure(p.cfg, "candidate", Path(q.path or p.model_dir),
                   served_name(p, "candidate"), q.serve_args, p.suites, p.requests,
                   p.model_dir, run_dir / "candidate", console, p.device, further=p.further)


def _load_session(p: Plan, role: str, model_dir: Path, serve_args: list[str], out_dir: Path,
                  console: Console, ceiling: bool = True) -> Measurement:
    """An engine session that runs the load test alone."""
    return measure(p.cfg, role, model_dir, served_name(p, role), serve_args, [], p.requests,
                   p.model_dir, out_dir, console, p.device, ceiling, p.further)


def _later_rounds(p: Plan, q: QuantizeResult, base: Measurement, cand: Measurement,
                  run_dir: Path, console: Console) -> tuple[Measurement, Measurement]:
    """The load test again in fresh engine sessions, baseline and candidate in turn, so
    that the latency gates see the variance between sessions (load.rounds)."""
    if p.cfg.load.rounds < 2:
        return base, cand
    sides = {"baseline": (p.model_dir, []), "candidate": (Path(q.path), q.serve_args)}
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
            "serve_args": q.serve_args,
            "served_name": served_name(p, "candidate"), "rounds": p.cfg.load.rounds}


def measure_pair(p: Plan, q: QuantizeResult, run_dir: Path, console: Console,
                 remeasure: bool) -> MeasuredPair:
    """Baseline and candidate, measured together (or the pair from the cache)."""
    if p.endpoint_roles:
        # what an endpoint serves can change under the same URL: measured every time
        base = _baseline(p, run_dir, console)[0]
        base, cand = _later_rounds(p, q, base, _candidate(p, q, run_dir, console), run_dir,
                                   console)
        return MeasuredPair(q, base, cand, {"baseline_results": False,
                                            "measurement_pair": False})
    folder = cached_pair(pair_key(_baseline_key(p), _what_the_candidate_serves(p, q)))
    if remeasure:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        hit = load_pair(folder, lambda why: console.print(
            f"[yellow]![/] cached measurement dropped, measuring again: {escape(why)}"))
        if hit is not None:
            for role in ROLES:
                shutil.copytree(folder / role, run_dir / role, dirs_exist_ok=True)
            console.print(f"[green]✓[/] baseline and {p.candidate_name}: reused the pair "
                          f"measured together ({folder}); --remeasure measures them again")
            return MeasuredPair(q, hit[0], hit[1], {"baseline_results": True,
                                                    "measurement_pair": True})
    base, base_hit = _baseline(p, run_dir, console)
    base, cand = _later_rounds(p, q, base, _candidate(p, q, run_dir, console), run_dir,
                               console)
    store_pair(run_dir, folder)
    return MeasuredPair(q, base, cand, {"baseline_results": base_hit,
                                        "measurement_pair": False})
