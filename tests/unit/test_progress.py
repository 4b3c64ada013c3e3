"""Progress off a terminal (a CI log): plain lines, at least one per interval while work
runs, even when no item finishes in it."""

from __future__ import annotations

import contextlib
import io
import sys
import time

from rich.console import Console

from workbench.mechanisms.progress import counted, status


def log_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=200), out


def test_counted_work_prints_lines_while_it_runs_and_when_it_ends() -> None:
    console, out = log_console()
    with counted(console, every_s=0.1) as progress:
        task = progress.add_task("arithmetic (smoke)", total=10)
        progress.advance(task)
        time.sleep(0.35)  # a slow item: the ticker still speaks
        for _ in range(9):
            progress.advance(task)
        second = progress.add_task("[bracketed] suite", total=4)  # ends the first
        progress.advance(second, 4)
    lines = out.getvalue().splitlines()
    ticks = [ln for ln in lines if ln.startswith("  arithmetic (smoke): 1/10 items")]
    assert len(ticks) >= 2 and "left" in ticks[0] and "so far" in ticks[0]
    assert any(ln.startswith("  arithmetic (smoke): 10/10 items") and "done" in ln
               for ln in lines)
    assert lines[-1].startswith("  [bracketed] suite: 4/4 items")  # no markup read


def test_a_status_says_what_it_waits_for_and_keeps_saying_it() -> None:
    console, out = log_console()
    with status(console, "\\[baseline] starting vLLM", every_s=0.1) as shown:
        time.sleep(0.25)
        shown.update("\\[baseline] starting vLLM: loading weights")
        time.sleep(0.15)
    lines = out.getvalue().splitlines()
    assert lines[0] == "  [baseline] starting vLLM"
    assert any(ln.startswith("  … [baseline] starting vLLM (") for ln in lines[1:])
    assert lines[-1].startswith("  … [baseline] starting vLLM: loading weights (")


def test_on_a_terminal_the_bars_are_rich_s() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with counted(console) as progress:
        task = progress.add_task("suite", total=2)
        progress.advance(task, 2)
    assert "2/2" in out.getvalue() and "items/s" not in out.getvalue()


def test_a_task_ended_by_an_error_says_stopped_not_done() -> None:
    console, out = log_console()
    try:
        with counted(console, every_s=10) as progress:
            task = progress.add_task("long-context (smoke)", total=144)
            progress.advance(task, 12)
            raise RuntimeError("engine died")
    except RuntimeError:
        pass
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("  long-context (smoke): 12/144 items") and "stopped" in last


def test_lines_reach_the_console_while_a_library_redirects_stdout(monkeypatch) -> None:
    """lm-eval runs inside contextlib.redirect_stdout (suites/lmeval.py): the CLI's console,
    which writes to whatever sys.stdout is, must still tick into the run's log, not into
    lm-eval's file (49 s without a line on a slow CPU)."""
    log, library_log = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", log)
    console = Console(force_terminal=False, width=200)  # the CLI's: no file of its own
    with counted(console, every_s=0.1) as progress:
        task = progress.add_task("openbookqa-lmeval (smoke)", total=60)
        with contextlib.redirect_stdout(library_log):
            time.sleep(0.35)
            progress.advance(task, 60)
    with status(console, "waiting", every_s=0.1), contextlib.redirect_stdout(library_log):
        time.sleep(0.25)
    ticks = [ln for ln in log.getvalue().splitlines() if "openbookqa-lmeval" in ln]
    assert len(ticks) >= 3 and "60/60" in ticks[-1]
    assert "… waiting (" in log.getvalue()
    assert library_log.getvalue() == ""
