"""`workbench tune`: the cheapest variant of a candidate's recipe that the policy promotes."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import click

from workbench.cli.options import (
    candidate_job,
    console,
    load_run_config,
    profile_option,
)
from workbench.config.gate_policy import Objective
from workbench.mechanisms.processes import install_sigterm_as_interrupt
from workbench.tune.budget import Budget
from workbench.tune.run import run_tune

__all__ = ["tune"]


@click.command()
@click.option("--max-trials", type=int, default=6, show_default=True,
              help="At most this many trials (each a candidate built and evaluated).")
@click.option("--max-hours", type=float, default=1.5, show_default=True,
              help="Start no trial whose first look could end past this (priced at the "
                   "dearest so far), and take no second look that would.")
@click.option("--objective", type=click.Choice(get_args(Objective)), default="weights",
              show_default=True, help="What 'cheapest' means among the trials promoted: "
              "weights on disk, $ per million output tokens at the SLO, throughput there, "
              "KV-cache capacity.")
@click.option("--measure-all", is_flag=True,
              help="Measure every trial in full, even once a gate has failed past doubt "
                   "(by default a trial is stopped there, as evaluate stops a candidate).")
@profile_option
@candidate_job
def tune(config_path: str, candidate: str, runs_dir: Path, max_trials: int,
         max_hours: float, objective: Objective, measure_all: bool,
         profile: str | None) -> int:
    """Search for the cheapest variant of a rejected candidate that the policy promotes.

    Where the config declares tune.space (the default config does, for int4), tries its
    recipes (methods, symmetric or not, group sizes, overrides, blocks kept in 16-bit)
    cheapest first until the policy promotes one. Without one, ranks the candidate's
    decoder blocks by layer sensitivity and tries keeping the k most sensitive in 16-bit
    (k = 0, 1, 2, 4, ... then bisection). Each trial is judged by the policy's gates on
    the search half of every suite's items; the chosen trial is judged again on the
    held-out half. Writes tune.json, tune.md, a plot and the recipe file. Every trial is
    cached by content: run it again to resume. Exit 0 with a confirmed recipe, 1 without,
    2 bad input, 3 when a trial's measurement failed.
    """

    install_sigterm_as_interrupt()
    cfg = load_run_config(config_path, None, profile=profile)
    budget = Budget(max_trials, max_hours, objective, measure_all)
    return run_tune(cfg, candidate, runs_dir, console, budget).exit_code
