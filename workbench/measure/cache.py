"""The baseline cache: a baseline's measurement keyed by everything it depends on (model
digest, engine, device, suites, sampling, load requests, the suites' binding), and a
candidate measured beside its baseline kept as a pair, both sealed and checked on read
(mechanisms/cache_entry.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from workbench.config.run_config import RunConfig
from workbench.loadtest.workload import Request
from workbench.measure.measurement import MEASUREMENT_FILE, SAMPLING, Measurement
from workbench.mechanisms import cache_entry
from workbench.mechanisms.digests import sha256_json
from workbench.mechanisms.paths import cache_root
from workbench.serve.device import Binding, DeviceFacts, device_facts
from workbench.suites.definition import Suite
from workbench.suites.results import SCORING_VERSION

__all__ = ["baseline_key", "cached_measurement", "cached_pair", "load_cached", "load_pair",
           "pair_key", "store_in_cache", "store_pair"]


def baseline_key(cfg: RunConfig, model_digest: str, suites: list[Suite], device: str,
                 engine_version: str, requests: list[Request],
                 further: dict[str, list[Request]] | None = None,
                 suite_binding: Binding = "vllm") -> str:
    facts = device_facts(device, cfg.engine)
    return sha256_json({
        # the dtype the engine really ran in (`auto` resolved for this device): a bf16
        # baseline's key is the same as before `auto` existed
        "model": model_digest, "engine": {**cfg.engine.identity(), "dtype": facts.serve_dtype},
        "device": device,
        "engine_version": engine_version, "profile": cfg.profile, "seed": cfg.seed,
        "suites": {s.name: s.digest for s in suites}, "sampling": SAMPLING,
        "in_flight": facts.suite_in_flight,
        "load": cfg.workload.model_dump(), "requests": [_request_key(r) for r in requests],
        # 5: the server facts comparability reads; 6: on a CPU the load test runs with the
        # engine and its client on separate cores (placement.py), so an unplaced cached
        # baseline's latency is not comparable with a placed candidate's
        "scoring": SCORING_VERSION, "format": 6,
        # a GPU host's type and whether the suites ran batch-invariant (serve/device.py);
        # absent on a CPU, so the keys of CPU baselines measured before stay valid
        **_device_key(facts),
        # further load profiles (load.also): absent when there are none, as before
        **({"further_load": {name: [cfg.load.profiles[name].model_dump(),
                                    [_request_key(r) for r in reqs]]
                             for name, reqs in further.items()}} if further else {}),
        # the suites on every core (measure/sessions.py): absent on vLLM's binding, as
        # before sessions had another
        **({"suite_binding": suite_binding} if suite_binding != "vllm" else {}),
    })


def _request_key(r: Request) -> dict:
    """A load request as the key holds it: a trace's shared chunks only where it has some,
    so the keys of baselines measured before traces carried them stay valid."""
    fields = asdict(r)
    if not r.prefix_chunks:
        del fields["prefix_chunks"]
    else:
        fields["prefix_chunks"] = list(r.prefix_chunks)
    return fields


def _device_key(facts: DeviceFacts) -> dict:
    key: dict = {}
    if facts.identity():
        key["gpu"] = facts.identity()
    if facts.batch_invariant:
        key["batch_invariant"] = True
    if facts.zen_platform:  # absent on vLLM's CPU platform, as before zentorch was installed
        key["platform"] = "zen"
    return key


def cached_measurement(key: str) -> Path:
    return cache_root() / "results" / f"baseline-{key[:24]}"


def load_cached(folder: Path, on_dropped: Callable[[str], None] = lambda _p: None
                ) -> Measurement | None:
    """The cached measurement, or None: absent, or failing its digest check (then the
    entry is dropped, on_dropped hears why, and the caller measures again)."""
    found = _checked(folder, [folder], on_dropped)
    return found[0] if found else None


def _read(file: Path) -> Measurement:
    return Measurement.from_dict(json.loads(file.read_text()))


def _checked(folder: Path, parts: list[Path], on_dropped: Callable[[str], None]
             ) -> list[Measurement] | None:
    """The measurements in a sealed cache entry's parts, or None (dropped if damaged)."""
    cache_entry.sweep_staging(folder.parent)
    if not folder.exists():
        return None
    problem = cache_entry.check(folder)
    if problem is None:
        try:
            return [_read(part / MEASUREMENT_FILE) for part in parts]
        except (OSError, ValueError, KeyError, TypeError) as err:
            problem = f"{folder}: a measurement.json is unreadable ({type(err).__name__})"
    on_dropped(problem)
    shutil.rmtree(folder, ignore_errors=True)
    return None


def pair_key(baseline: str, candidate: dict) -> str:
    """A candidate measured beside its baseline: the baseline's key (model, engine,
    suites, load), what the candidate serves (artifact key, serving arguments, name) and
    how many load rounds were run."""
    return sha256_json({"baseline": baseline, "candidate": candidate, "format": 1})


def cached_pair(key: str) -> Path:
    return cache_root() / "results" / f"pair-{key[:24]}"


def load_pair(folder: Path, on_dropped: Callable[[str], None] = lambda _p: None
              ) -> tuple[Measurement, Measurement] | None:
    """A cached (baseline, candidate) pair measured together: reused only together, so a
    latency comparison is never made between sessions that were not measured side by side."""
    found = _checked(folder, [folder / "baseline", folder / "candidate"], on_dropped)
    return (found[0], found[1]) if found else None


def store_pair(run_dir: Path, dest: Path) -> None:
    cache_entry.store_together({role: run_dir / role for role in ("baseline", "candidate")},
                               dest)


def store_in_cache(src: Path, dest: Path) -> None:
    """Copy a finished measurement folder into the cache, sealed, atomically."""
    cache_entry.store(src, dest)
