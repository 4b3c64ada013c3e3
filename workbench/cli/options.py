"""What every `workbench` command shares: the consoles, the error handling that turns
domain errors into the CI contract's exit codes, the common options, reading the config."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from workbench.config.run_config import RunConfig, load_config
from workbench.mechanisms.errors import InfraError, InputError, WorkbenchError
from workbench.mechanisms.paths import SHIPPED
from workbench.plan.plan import Outputs
from workbench.record.render import render_summary, write_junit

__all__ = ["DEFAULT_CONFIG", "candidate_job", "config_option", "console", "debug_option",
           "endpoint_options", "err_console", "handle_errors", "junit_option",
           "load_run_config", "outputs_of", "profile_option", "remeasure_option",
           "resolve_config", "runs_option", "summary_option", "write_ci_outputs"]

DEFAULT_CONFIG = "configs/default.yaml"
console = Console(highlight=False, soft_wrap=True)
if not console.is_terminal:
    console.width = 160  # CI logs: rich's 80-column default folds the gate table badly
err_console = Console(stderr=True, highlight=False)


def resolve_config(value: str) -> Path:
    """The config as given; the shipped default also resolves from outside the checkout."""
    path = Path(value)
    if not path.exists() and value == DEFAULT_CONFIG:
        return SHIPPED / DEFAULT_CONFIG
    return path


def handle_errors(fn: Callable[..., int | None]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, debug: bool = False, **kwargs: Any) -> None:
        try:
            code = fn(*args, **kwargs) or 0
        except WorkbenchError as err:
            if debug:
                raise
            problems = err.problems if isinstance(err, InputError) else [str(err)]
            for line in problems:
                err_console.print(f"[red]error:[/] {line}", soft_wrap=True)
            code = err.exit_code
        except KeyboardInterrupt as err:
            err_console.print(
                "[yellow]interrupted[/]: engine stopped; anything measured so far is kept")
            code = 128 + getattr(err, "signum", 2)  # Ctrl-C 130, SIGTERM 143, as a shell has
        except Exception as err:  # noqa: BLE001 - a crash must never read as "reject" (1)
            if debug:
                raise
            err_console.print(f"[red]error:[/] unexpected {type(err).__name__}: "
                              f"{escape(str(err))} (rerun with --debug for the traceback)",
                              soft_wrap=True)
            code = InfraError.exit_code
        sys.exit(code)

    return wrapper


config_option = click.option(
    "--config", "config_path", default=DEFAULT_CONFIG, show_default=True,
    help="Run configuration (YAML).",
)
candidate_option = click.option(
    "--candidate", required=True, help="Candidate name from the config's 'candidates'.",
)
runs_option = click.option(
    "--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
    help="Where run folders (stage results, logs, decision record) are written.",
)
debug_option = click.option("--debug", is_flag=True, help="Show tracebacks on errors.")


def candidate_job(fn: Callable[..., int | None]) -> Callable[..., None]:
    """The options and error handling shared by commands that work on one candidate."""
    command = handle_errors(fn)
    for option in (debug_option, runs_option, candidate_option, config_option):
        command = option(command)
    return command

# Output paths are checked by the plan (plan/plan.py: one line, exit 2), not by click.
junit_option = click.option("--junit", type=click.Path(path_type=Path),
                            default=None, help="Also write JUnit XML: one test case per gate.")
summary_option = click.option("--summary", type=click.Path(path_type=Path),
                              default=None, help="Also write a short Markdown summary (for a "
                                                 "CI job summary, e.g. $GITHUB_STEP_SUMMARY).")


remeasure_option = click.option(
    "--remeasure", is_flag=True, help="Measure the candidate and its baseline's load again "
    "even when a measurement of the same inputs is cached (the baseline's suite results, "
    "deterministic for the same weights, are still reused).")


profile_option = click.option(
    "--profile", type=click.Choice(["smoke", "full"]), default=None,
    help="Run the suites' smoke sample or every item, instead of the config's profile "
    "(full decides gates the smoke sizes leave inconclusive; docs/gates.md).")


def endpoint_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--baseline-endpoint / --candidate-endpoint: a side measured where it is already
    served (its key and model from the config's endpoints.<side>, if any)."""
    for side in ("candidate", "baseline"):
        fn = click.option(f"--{side}-endpoint", f"{side}_endpoint", default=None,
                          metavar="URL", help=f"Measure the {side} at this running "
                          f"OpenAI-compatible vLLM server instead of serving it here (the "
                          f"API key's variable: endpoints.{side}.api_key_env).")(fn)
    return fn


def write_ci_outputs(rec: Any, junit: Path | None, summary: Path | None) -> None:

    if junit is not None:
        write_junit(rec, junit)
    if summary is not None:
        summary.parent.mkdir(parents=True, exist_ok=True)
        with summary.open("a") as out:  # appending: a CI summary file may hold other steps
            out.write(render_summary(rec))

def load_run_config(config_path: str, load_profile: str | None,
                    baseline_endpoint: str | None = None, candidate_endpoint: str | None = None,
                    profile: str | None = None) -> RunConfig:
    cfg = load_config(resolve_config(config_path))
    if profile is not None:
        cfg = cfg.with_profile(profile)  # type: ignore[arg-type]  # click.Choice checked it
    if baseline_endpoint is not None or candidate_endpoint is not None:
        cfg = cfg.with_endpoints(baseline_endpoint, candidate_endpoint)
    return cfg.with_load_profile(load_profile) if load_profile is not None else cfg


def outputs_of(runs_dir: Path | None, junit: Path | None, summary: Path | None) -> Any:

    return Outputs(runs_dir=runs_dir, files={"--junit": junit, "--summary": summary})
