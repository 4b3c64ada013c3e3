"""The `workbench` command line: parses arguments, calls one stage function, prints.

Domain errors become one line per problem on stderr and the exit code of the CI contract
(0 promote, 1 reject/inconclusive, 2 invalid input, 3 infrastructure); --debug shows the
traceback instead.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.markup import escape

from workbench.cli.options import (
    candidate_job,
    config_option,
    console,
    debug_option,
    endpoint_options,
    handle_errors,
    junit_option,
    load_run_config,
    outputs_of,
    profile_option,
    remeasure_option,
    resolve_config,
    runs_option,
    summary_option,
    write_ci_outputs,
)
from workbench.cli.traffic import traffic_trace
from workbench.cli.tune import tune
from workbench.config.run_config import load_config
from workbench.mechanisms.digests import folder_digest
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.files import inside
from workbench.mechanisms.processes import install_sigterm_as_interrupt
from workbench.pipeline.coverage import coverage_lines
from workbench.pipeline.evaluate import run_evaluate
from workbench.pipeline.gate import regate_stored
from workbench.pipeline.log import log_stored_run
from workbench.pipeline.quantize import as_served_here, run_quantize
from workbench.plan.plan import check_candidates, check_config, check_outputs, plan
from workbench.record.render import print_decision, write_record
from workbench.serve.engine import EngineServer, detect_device
from workbench.suites.definition import SUITES_ROOT, load_suite
from workbench.sweep.run import run_sweep
from workbench.tune.budget import Budget
from workbench.tune.run import check_tune

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """quant-workbench: may a quantised LLM replace its full-precision baseline?

    The main job is `workbench evaluate --candidate int4`: quantise, serve baseline and
    candidate through vLLM, evaluate and load-test both, gate, record, log to MLflow.
    Exit codes: 0 promote, 1 reject or inconclusive, 2 invalid input, 3 infrastructure.
    """


@main.command()
@click.option("--load-profile", default=None, metavar="NAME[,NAME...]",
              help="Measure this named load profile instead of the config's load.profile "
                   "(built in: interactive, batch); several, comma-separated, are each "
                   "measured in the same engine sessions and gated.")
@profile_option
@remeasure_option
@click.option("--measure-all", is_flag=True,
              help="Measure every suite and the load test even after a gate has failed "
                   "past doubt (by default the candidate is stopped there: any failed gate "
                   "rejects, so the rest could not change the decision; docs/gates.md, "
                   "'Stopping early').")
@endpoint_options
@junit_option
@summary_option
@candidate_job
def evaluate(config_path: str, candidate: str, runs_dir: Path, load_profile: str | None,
             profile: str | None, remeasure: bool, measure_all: bool,
             baseline_endpoint: str | None, candidate_endpoint: str | None,
             junit: Path | None, summary: Path | None) -> int:
    """Run the whole pipeline for one candidate and decide promote / reject / inconclusive.

    Reuses the cached quantised artifact, the cached baseline results and, with nothing
    changed, the cached measurement of this candidate beside its baseline (the record is
    then rebuilt from it without starting an engine). Writes decision.json and decision.md
    in a new run folder and logs the run to MLflow (./mlflow.db unless MLFLOW_TRACKING_URI
    or tracking.uri says otherwise).
    """

    install_sigterm_as_interrupt()
    cfg = load_run_config(config_path, load_profile, baseline_endpoint, candidate_endpoint, profile)
    rec = run_evaluate(cfg, candidate, runs_dir, console, outputs_of(runs_dir, junit, summary),
                       remeasure, measure_all)
    write_ci_outputs(rec, junit, summary)
    return rec.exit_code



@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--policy", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Gate policy YAML (default: the one the run was judged under).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write decision.json / decision.md here (default: RUN_DIR/gate-<policy>).")
@junit_option
@summary_option
@debug_option
@handle_errors
def gate(run_dir: Path, policy: Path | None, out: Path | None, junit: Path | None,
         summary: Path | None) -> int:
    """Judge a stored run again under a gate policy, without an engine or a GPU.

    Reads RUN_DIR's measurements and record, evaluates every gate of the policy, prints the
    decision and exits 0 promote / 1 reject or inconclusive / 2 bad input. The run's own
    decision.json is left as it was.
    """

    rec, _ = regate_stored(run_dir, policy)  # every stored input read and checked first
    target = out or inside(run_dir, f"gate-{(policy or Path('stored')).stem}")
    problems = check_outputs(outputs_of(target, junit, summary))
    if problems:
        raise InputError(problems[0], problems)
    target.mkdir(parents=True, exist_ok=True)
    write_record(target, rec)
    write_ci_outputs(rec, junit, summary)
    print_decision(rec, console)
    console.print(f"re-gated record: {target / 'decision.json'}")
    return rec.exit_code


@main.command()
@config_option
@click.option("--candidate", "candidates", multiple=True,
              help="Candidate name from the config's 'candidates' (repeatable).")
@click.option("--all", "all_candidates", is_flag=True, help="Every candidate in the config.")
@runs_option
@debug_option
@handle_errors
def quantize(config_path: str, candidates: tuple[str, ...], all_candidates: bool,
             runs_dir: Path) -> int:
    """Build (or find in the cache) candidates' quantised checkpoints.

    Prints each manifest's figures (size, compression ratio, held-out perplexity against the
    baseline) and whether the engine on this device can serve each candidate.
    """

    if all_candidates == bool(candidates):
        raise InputError("give --candidate NAME (repeatable) or --all")
    cfg = load_config(resolve_config(config_path))
    names = list(cfg.candidates) if all_candidates else list(dict.fromkeys(candidates))
    run_quantize(cfg, names, runs_dir, console)  # checks every input first
    return 0


@main.command()
@config_option
@click.option("--candidate", "candidates", multiple=True,
              help="Candidate name from the config's 'candidates' (repeatable).")
@click.option("--all", "all_candidates", is_flag=True, help="Every candidate in the config.")
@click.option("--include-slow", is_flag=True,
              help="Also measure candidates this device runs only by slow emulation (FP8 "
                   "weights on a CPU), which are otherwise skipped with their estimated time.")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="Measure the candidates in parallel as Ray tasks, each holding its "
                   "engine's devices: a cluster's address (host:port, ray://host:10001), or "
                   "'local' to start Ray on this host and split its GPUs between them.")
@profile_option
@remeasure_option
@runs_option
@debug_option
@handle_errors
def sweep(config_path: str, candidates: tuple[str, ...], all_candidates: bool,
          include_slow: bool, ray_address: str | None, profile: str | None, remeasure: bool,
          runs_dir: Path) -> int:
    """Which candidate to ship: every candidate against one baseline.

    Each candidate runs through evaluate's stages into runs/<sweep>/<candidate>/ with its
    own decision record; then sweep.json, sweep.md and a Pareto plot (quality retained
    against the policy's sweep.objective) and a recommendation: the best promoted
    candidate. Cached measurements are reused, so an interrupted sweep run again measures
    only what is missing. Exit 0 with a recommendation, 1 when none was promoted, 3 when a
    candidate's measurement failed.
    """

    if all_candidates == bool(candidates):
        raise InputError("give --candidate NAME (repeatable) or --all")
    install_sigterm_as_interrupt()
    cfg = load_run_config(config_path, None, profile=profile)
    names = list(cfg.candidates) if all_candidates else list(dict.fromkeys(candidates))
    return run_sweep(cfg, names, runs_dir, console, include_slow, remeasure,
                     ray_address).exit_code


@main.command()
@config_option
@click.option("--candidate", default=None,
              help="Serve this candidate (quantising it first if needed); default: the baseline.")
@runs_option
@debug_option
@handle_errors
def serve(config_path: str, candidate: str | None, runs_dir: Path) -> int:
    """Start vLLM for the baseline or a candidate and keep it up until Ctrl-C, for poking."""

    install_sigterm_as_interrupt()
    cfg = load_config(resolve_config(config_path))
    check_candidates(cfg, [candidate] if candidate else [], outputs_of(runs_dir, None, None),
                     serving=True)
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    name, extra = cfg.model.name, []
    if candidate is not None:
        q = run_quantize(cfg, [candidate], runs_dir, console)[0]
        q = as_served_here(q, model_dir, folder_digest(model_dir), detect_device(), runs_dir,
                           console)
        model_dir, name, extra = Path(q.served_path), f"{cfg.model.name}-{candidate}", \
            q.serve_args
    runs_dir.mkdir(parents=True, exist_ok=True)
    log = inside(runs_dir, f"serve-{name}-{time.strftime('%Y%m%d-%H%M%S')}.log")
    server = EngineServer(model_dir, name, cfg.engine, log, extra)
    try:
        with console.status(f"starting vLLM for {model_dir} (log {log})"):
            server.start()
        console.print(f"serving [bold]{name}[/] at {server.base_url}/v1 "
                      f"(OpenAI-compatible; log {log}). Ctrl-C stops it.")
        while server.alive():
            time.sleep(1)
        server.check_alive()
    finally:
        server.stop()
    return 0


@main.command()
@config_option
@click.option("--candidate", default=None,
              help="Check exactly what `evaluate --candidate NAME` checks, including whether "
                   "this device can serve it (default: every candidate's recipe and data).")
@click.option("--load-profile", default=None, metavar="NAME",
              help="As `evaluate --load-profile`.")
@profile_option
@click.option("--all-suites", is_flag=True,
              help="Also check every suite shipped in eval_suites/, not only the config's.")
@click.option("--tune", "for_tune", is_flag=True,
              help="With --candidate: also what `tune` checks on top of evaluate (an "
                   "integer grid, held-out text, no endpoints).")
@endpoint_options
@runs_option
@junit_option
@summary_option
@debug_option
@handle_errors
def validate(config_path: str, candidate: str | None, load_profile: str | None,
             profile: str | None, all_suites: bool, for_tune: bool,
             baseline_endpoint: str | None,
             candidate_endpoint: str | None, runs_dir: Path, junit: Path | None,
             summary: Path | None) -> int:
    """Check a config, its gate policy, suites, data, engine arguments, tracking server and
    output paths; report every problem at once. Runs the very checks `evaluate` runs, so a
    config that passes here is not refused there; writes and starts nothing."""

    path = resolve_config(config_path)
    cfg = load_run_config(config_path, load_profile, baseline_endpoint, candidate_endpoint, profile)
    outputs = outputs_of(runs_dir, junit, summary)
    if for_tune and candidate is None:
        raise InputError("--tune: needs --candidate NAME (the candidate tune would start from)")
    if candidate is not None:
        p = plan(cfg, candidate, outputs)  # evaluate's own check
        if for_tune:
            check_tune(p, Budget(max_trials=1, max_hours=1.0))  # tune's own, on top
        policy, suites, checked = p.policy, p.suites, f"candidate {candidate}"
        if p.dense is not None:
            console.print(f"[bold yellow]served dense:[/] {escape(p.dense.line)}")
    else:
        p = None
        policy, suites = check_config(cfg, outputs)
        checked = f"{len(cfg.candidates)} candidate(s)"
    sizes = {run: len(s.sample(cfg.profile, cfg.seed)) for s in suites for run, _ in s.spec.runs()}
    coverage = coverage_lines(policy, suites, p, sizes)
    if all_suites:
        extra = sorted(str(p.parent) for p in SUITES_ROOT.glob("*/*/suite.yaml")
                       if p.parent.name not in cfg.suites)
        problems = []
        for name in extra:
            try:
                load_suite(name)
            except InputError as err:
                problems += err.problems
        if problems:
            raise InputError(problems[0], problems)
    n_suites = len(cfg.suites) + (len(extra) if all_suites else 0)
    console.print(f"[green]ok[/]: {path} — {checked}, {n_suites} suite(s) checked "
                  f"(profile {cfg.profile}: {sum(sizes.values()):,} items per model), gates "
                  f"{cfg.gates}, load profiles {', '.join(sorted(cfg.load.profiles))} "
                  f"(this run: {', '.join(cfg.load.gated)})")
    console.print("how each suite is judged:\n" + "\n".join(coverage), markup=False)
    return 0


@main.command(name="log")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@debug_option
@handle_errors
def log_command(run_dir: Path) -> int:
    """Log a finished run folder to MLflow: for a run whose tracking server was lost or
    down. Uses the tracking URI of the run's config (or MLFLOW_TRACKING_URI)."""

    log_stored_run(run_dir, console)
    return 0


main.add_command(tune)  # in a module of its own (cli/tune.py), with the shared options
main.add_command(traffic_trace)  # cli/traffic.py
