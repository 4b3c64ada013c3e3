"""A watch on the candidate's suites as they finish: the order to run them in, and whether
what is already measured has decided the run, so that nothing more is worth measuring.

The measure stage knows no gates; the judge does (gate/early.py implements SuiteWatch) and
the pipeline hands the watch in (pipeline/evaluate.py). A watch may only ever stop a
candidate that has failed: any failed gate rejects, so what was not measured could not
have changed the decision, while a promotion needs every gate (docs/gates.md, "Stopping
early").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol

from workbench.suites.definition import Suite
from workbench.suites.results import SuiteResult

__all__ = ["StoppedEarly", "SuiteRun", "SuiteWatch", "WatchFor"]

SuiteRun = tuple[Suite, str, bool]  # a suite, the name of this run of it, guided decoding


@dataclass(frozen=True)
class StoppedEarly:
    """Why the candidate's measurement ended before its plan did, and what it left out."""

    after: str  # the suite run whose result decided it
    gates: list[str]  # the gates that failed past doubt then
    evidence: list[str]  # each of those gates' one-line evidence, in the same order
    level: str  # the level they failed at, in words (the look's alpha over every test)
    not_measured: list[str] = field(default_factory=list)  # suite runs never started
    # the candidate's load test did not run (it comes after the suites), nor a cached
    # baseline's (its session comes after the candidate's suites)
    load_not_measured: bool = True

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> StoppedEarly | None:
        return cls(**data) if data else None


class SuiteWatch(Protocol):
    """What the candidate's session asks between its suites."""

    def order(self, runs: list[SuiteRun]) -> list[SuiteRun]:
        """The runs in the order to measure them (the cheapest decisive first)."""
        ...

    def after(self, done: dict[str, SuiteResult], left: list[str]) -> StoppedEarly | None:
        """After each run: a StoppedEarly when the results so far have failed the
        candidate past doubt (left: the runs not yet measured), else None."""
        ...


class WatchFor(Protocol):
    """Makes the watch once the baseline it compares against is measured."""

    def __call__(self, baseline_suites: dict[str, SuiteResult]) -> SuiteWatch: ...
