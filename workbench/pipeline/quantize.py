"""`workbench quantize`, and the quantise step of `evaluate`: each candidate's checkpoint
built (or found in the artifact cache) with a line saying which, and its manifest kept in
the run folder.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from workbench.config.run_config import Candidate, RunConfig
from workbench.mechanisms.digests import folder_digest
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.files import new_run_dir, write_json
from workbench.mechanisms.progress import status
from workbench.plan.plan import Outputs, Plan, check_candidates
from workbench.quantize.build import QuantizeResult, quantize, show_candidates
from workbench.quantize.checks import serving_problem
from workbench.quantize.dense import dense_checkpoint
from workbench.quantize.formats import served_dense
from workbench.serve.engine import detect_device

__all__ = ["as_served_here", "quantize_planned", "run_quantize"]


def quantize_planned(p: Plan, run_dir: Path, console: Console) -> QuantizeResult:
    """The plan's candidate, built or found; nothing to build for one served at an
    endpoint. A recipe file's format is known only once built: checked against this
    device then."""
    ep = p.cfg.endpoints.candidate
    if ep is not None:
        console.print(f"[green]✓[/] quantise {p.candidate_name}: nothing to build, it is "
                      f"served at {ep.url} (its recipe is recorded as declared)")
        q = QuantizeResult(candidate=p.candidate_name, path="", cache_hit=False, key="",
                           manifest={"candidate": p.candidate_name, "source": "endpoint",
                                     "recipe": p.candidate.model_dump(mode="json")},
                           source="endpoint", serve_args=[])
        write_json(run_dir / "quantize.json", q.to_dict())
        return q
    q = _quantize_one(p.cfg, p.candidate_name, p.candidate, p.model_dir, p.model_digest,
                      run_dir, console, p.device)
    if p.candidate.recipe_file is not None and q.path:
        unsupported = serving_problem(p.cfg, p.candidate_name, p.device, Path(q.path))
        if unsupported:
            raise InputError(unsupported)
    served = as_served_here(q, p.model_dir, p.model_digest, p.device, run_dir, console,
                            said=p.dense is not None)
    if served.dense is not None:
        write_json(run_dir / "quantize.json", served.to_dict())
    return served


def as_served_here(q: QuantizeResult, model_dir: Path, model_digest: str, device: str,
                   run_dir: Path, console: Console, said: bool = False) -> QuantizeResult:
    """The artifact as this device serves it: where the engine has no kernel for its
    format, its weights dequantised into a dense checkpoint (quantize/dense.py), which the
    engine is given instead; its format, manifest and key stay the artifact's. run_dir:
    where the dequantiser's log goes. said: the run's first lines said so already (a
    recipe file's format is known only now)."""
    found = served_dense(q.candidate, q.format, device) \
        if q.source in ("built", "cache") else None
    if found is None:
        return q
    what = f"dequantising {q.candidate} ({found.format}) for dense serving"
    with status(console, what) as shown:
        dense = dense_checkpoint(Path(q.path), model_dir, model_digest,
                                 run_dir / "dequantize.log",
                                 lambda step: shown.update(f"{what} {escape(step)}"))
    if not said:
        console.print(f"[bold yellow]served dense:[/] {escape(found.line)}")
    console.print(f"[green]✓[/] dequantised {q.candidate} -> {dense} (served dense: its own "
                  "weights, in the baseline's dtype)")
    return replace(q, dense=replace(found, checkpoint=str(dense)))


def _quantize_one(cfg: RunConfig, name: str, cand: Candidate, model_dir: Path,
                  model_digest: str, run_dir: Path, console: Console, device: str
                  ) -> QuantizeResult:
    """device: the engine's, where the quantiser must calibrate (quantize/checks.py)."""
    what = f"quantising {name} ({cand.recipe or cand.recipe_file or 'checkpoint'})"

    def progress(step: str) -> None:
        if step.startswith("cached artifact dropped"):  # worth a line that stays
            console.print(f"[yellow]![/] {escape(step)}")
        shown.update(f"{what} {escape(step)}")

    with status(console, what) as shown:
        q = quantize(cfg, name, cand, model_dir, model_digest, run_dir / "quantize.log",
                     on_progress=progress, device=device)
    console.print(f"[green]✓[/] quantise {name}: {_summary(q)}")
    write_json(run_dir / "quantize.json", q.to_dict())
    return q


def _summary(q: QuantizeResult) -> str:
    m = q.manifest
    text = {"cache": f"reused cached artifact {q.path}",
            "built": f"built in {m.get('wall_time_s', 0):.0f}s -> {q.path}",
            "checkpoint": f"ready checkpoint {q.path}",
            "endpoint": "served at an endpoint",
            "baseline weights": "baseline weights, served with " + (
                " ".join(q.serve_args) or "the baseline's arguments")}[q.source]
    fid = m.get("fidelity")
    if fid:
        text += (f" · held-out perplexity {fid['baseline_perplexity']:.2f} -> "
                 f"{fid['candidate_perplexity']:.2f} (x{fid['perplexity_ratio']:.3f})")
    return text


def run_quantize(cfg: RunConfig, candidates: list[str], runs_root: Path,
                 console: Console) -> list[QuantizeResult]:
    """Build (or find) each candidate's checkpoint; say which ones this device can serve.

    Needs only the model and the candidates: suites and gates are not loaded."""
    check_candidates(cfg, candidates, Outputs(runs_dir=runs_root), serving=False)
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    run_dir = new_run_dir(runs_root, "quantize-" + "-".join(candidates)[:80])
    digest, device = folder_digest(model_dir), detect_device()
    results = []
    for name in candidates:
        sub = run_dir / name if len(candidates) > 1 else run_dir
        sub.mkdir(exist_ok=True)
        results.append(_quantize_one(cfg, name, cfg.candidate(name), model_dir, digest, sub,
                                     console, device))
    write_json(run_dir / "quantize-summary.json", [q.to_dict() for q in results])
    if len(results) == 1:
        console.print_json(json.dumps(results[0].manifest, default=str))
    show_candidates(cfg, results, device, console)
    return results
