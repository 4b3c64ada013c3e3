"""The judge's checks before anything starts (issue 49): a gate on its verdicts needs a
judge, and a judge a rubric file and a traffic suite to read."""

from __future__ import annotations

from pathlib import Path

from workbench.config.gate_policy import GatePolicy
from workbench.config.run_config import RunConfig
from workbench.suites.definition import Suite

__all__ = ["judge_problems"]


def judge_problems(cfg: RunConfig, policy: GatePolicy, path: Path, suites: list[Suite]
                   ) -> list[str]:
    """A gate on the judge's verdicts needs a judge, and a judge a rubric file and a
    traffic suite to read."""
    measured = {run: s.spec.kind for s in suites for run, _ in s.spec.runs()}
    judged = [g.suite for _, g in policy.paired(measured) if g.metric.startswith("judge_")]
    if cfg.judge is None:
        return [f"{path}: a gate on {suite!r} reads the judge's verdicts, but "
                f"{cfg.source} declares no judge" for suite in judged]
    problems = []
    rubric = cfg.resolve(cfg.judge.rubric)
    if not rubric.is_file():
        problems.append(f"{cfg.source}: judge.rubric: {cfg.judge.rubric!r} not found "
                        f"(looked at {rubric})")
    if not any(s.spec.kind == "traffic" for s in suites):
        problems.append(f"{cfg.source}: judge: no traffic suite among the suites for it to "
                        "read (it judges a traffic suite's answers only)")
    return problems
