"""Progress that a log can read: rich's bars and spinners on a terminal, plain lines
elsewhere.

rich draws a progress bar or a status spinner only on a terminal; in a CI log it prints a
bar once, when its task ends, and a status never, so a model's suites ran for twelve
minutes without a line (docs/architecture.md, "Progress"). Off a terminal these print a
line when work starts, one at least every EVERY_S seconds while it runs (items done, items
per second and about how long is left, for counted work), and one when a counted task
ends. A thread ticks the lines, so a slow item does not silence them. The lines go where the
console wrote when the work began: a library that redirects sys.stdout into its own log
while it runs (lm-eval, suites/lmeval.py) must not swallow them.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

__all__ = ["EVERY_S", "Counter", "counted", "plain_line", "status"]

EVERY_S = 20.0  # below CI's 30 s, whatever a tick's jitter


class Counter(Protocol):
    """What counted work reports to: rich's Progress, or the plain lines."""

    def add_task(self, description: str, total: float | None = ...) -> int: ...

    def advance(self, task_id: int, advance: float = ...) -> None: ...


@dataclass
class _Task:
    description: str
    total: int
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    ended: bool = False
    stopped: bool = False  # ended by an error, not by its last item
    said: float = field(default_factory=time.monotonic)  # its last line


def plain_line(task: _Task, now: float) -> str:
    """`name: 240/600 items, 2.5 items/s, about 2 min 24 s left (1 min 36 s so far)`."""
    spent = now - task.started
    rate = task.done / spent if spent > 0 else 0.0
    left = (task.total - task.done) / rate if rate > 0 else None
    tail = ("stopped" if task.stopped else "done") if task.ended else (
        f"about {_duration(left)} left" if left is not None else "first item pending")
    return (f"  {task.description}: {task.done}/{task.total} items, {rate:.1f} items/s, "
            f"{tail} ({_duration(spent)} {'in all' if task.ended else 'so far'})")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def _say(out: IO[str], line: str) -> None:
    """One plain line to the stream the work began on (markup and highlighting never
    apply off a terminal)."""
    out.write(line + "\n")
    out.flush()


class _PlainCounter:
    """Counted work as lines: a ticker thread prints the running task every EVERY_S."""

    def __init__(self, console: Console, every_s: float) -> None:
        self.console, self.every_s = console, every_s
        self.tasks: list[_Task] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._out: IO[str] = console.file

    def __enter__(self) -> _PlainCounter:
        self._out = self.console.file
        self._ticker.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._stop.set()
        self._ticker.join()
        self._end_running(stopped=exc_type is not None)

    def add_task(self, description: str, total: float | None = None) -> int:
        self._end_running()
        with self._lock:
            self.tasks.append(_Task(description, int(total or 0)))
            return len(self.tasks) - 1

    def advance(self, task_id: int, advance: float = 1) -> None:
        with self._lock:
            self.tasks[task_id].done += int(advance)

    def _end_running(self, stopped: bool = False) -> None:
        with self._lock:
            running = [t for t in self.tasks if not t.ended]
            for t in running:
                t.ended, t.stopped = True, stopped
        for t in running:
            _say(self._out, plain_line(t, time.monotonic()))

    def _tick(self) -> None:
        # each task speaks every_s after it started or last spoke: a short task says
        # only that it is done
        while not self._stop.wait(min(1.0, self.every_s / 4)):
            now = time.monotonic()
            with self._lock:
                due = [t for t in self.tasks if not t.ended and now - t.said >= self.every_s]
                for t in due:
                    t.said = now
            for t in due:
                _say(self._out, plain_line(t, now))


@contextlib.contextmanager
def counted(console: Console, every_s: float = EVERY_S) -> Iterator[Counter]:
    """A bar per task on a terminal; plain lines elsewhere."""
    if console.is_terminal:
        with Progress(TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=False) as bars:
            yield bars  # type: ignore[misc]
        return
    with _PlainCounter(console, every_s) as lines:
        yield lines


class _Status(Protocol):
    def update(self, status: str) -> None: ...


class _PlainStatus:
    """A status as lines: the text once, then a line every every_s until the block ends."""

    def __init__(self, console: Console, text: str, every_s: float) -> None:
        self.console, self.text, self.every_s = console, text, every_s
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="status", daemon=True)
        self._out: IO[str] = sys.stdout

    def __enter__(self) -> _PlainStatus:
        self.console.print(f"  {self.text}")
        self._out = self.console.file
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._ticker.join()

    def update(self, status: str) -> None:
        self.text = status

    def _tick(self) -> None:
        while not self._stop.wait(self.every_s):
            text = Text.from_markup(self.text).plain  # as console.print would render it
            _say(self._out, f"  … {text} ({_duration(time.monotonic() - self.started)} so far)")


@contextlib.contextmanager
def status(console: Console, text: str, every_s: float = EVERY_S) -> Iterator[_Status]:
    """A spinner on a terminal; elsewhere the text once, then a line every every_s until
    the work ends (the caller prints how it ended)."""
    if console.is_terminal:
        with console.status(text) as spinner:
            yield spinner
        return
    with _PlainStatus(console, text, every_s) as plain:
        yield plain
