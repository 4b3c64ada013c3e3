"""The judge stage (issue 49, step 3), after both sides are measured: where the config
declares a `judge`, each traffic request the candidate answered is put to it with the
baseline's answer (both orders by default), and the candidate's item gets
`judge_as_good` (1: as good, 0: worse or no verdict) and `judge_no_verdict`. Its items
file is written again with them, so a stored run re-judged reads the same values; the
verdicts by id and order, never the text, go to judge-<suite>.jsonl beside it."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rich.console import Console

from workbench.config.judge import JudgeConfig
from workbench.measure.measurement import MEASUREMENT_FILE
from workbench.measure.pair import MeasuredPair
from workbench.mechanisms.files import read_text, write_json
from workbench.mechanisms.jsonl import write_jsonl
from workbench.suites.definition import Suite, SuiteItem
from workbench.suites.judge_ask import ask_judge
from workbench.suites.judge_labels import labelled_pairs
from workbench.suites.results import ItemResult, SuiteResult, check_means
from workbench.suites.scorers.judge import (
    as_good,
    baseline_preferred,
    candidate_first,
    judge_messages,
    parse_verdict,
)
from workbench.suites.traffic import redact_secrets

__all__ = ["JudgeRun", "LabelCheck", "check_on_labels", "judge_pair"]


@dataclass(frozen=True)
class LabelCheck:
    """How the judge did on pairs of a healthy and a broken answer to one prompt."""

    asked: int
    healthy_preferred: int  # in every order it was shown
    no_verdict: int


@dataclass(frozen=True)
class JudgeRun:
    """Who judged and by what: the record's `judge` section."""

    model: str
    url: str
    rubric_sha256: str
    both_orders: bool
    asked: int  # requests put to it
    as_good: int
    no_verdict: int
    # the labelled pairs put to it first (suites/judge_labels.py), where judge.check_labels
    labels: LabelCheck | None = None


def _redacted(messages: tuple[dict, ...]) -> list[dict]:
    """The request's turns with every credential-shaped string replaced by its kind: the
    judge is another server, and a key pasted into a prompt goes no further."""
    return [{**m, "content": redact_secrets(m["content"])} if isinstance(m.get("content"), str)
            else m for m in messages]


def _orders(judge: JudgeConfig, seed: int, item_id: str) -> list[bool]:
    first = candidate_first(seed, item_id)
    return [first, not first] if judge.both_orders else [first]


def _judged(judge: JudgeConfig, rubric: str, seed: int, items: dict[str, SuiteItem],
            base: SuiteResult, cand: SuiteResult) -> tuple[list[ItemResult], list[dict]]:
    """The candidate's items with the judge's checks, and the verdicts by id."""
    answers = {i.id: i.response for i in base.items}
    asked = [i for i in cand.items if i.id in answers and items.get(i.id) is not None
             and items[i.id].request is not None]
    chats, where = [], []
    for item in asked:
        request = items[item.id].request
        assert request is not None
        for cand_first in _orders(judge, seed, item.id):
            pair = (item.response, answers[item.id])
            first, second = pair if cand_first else pair[::-1]
            chats.append(judge_messages(rubric, _redacted(request.messages), first, second))
            where.append((item.id, cand_first))
    replies = ask_judge(judge, chats)
    verdicts: dict[str, list[tuple[str | None, bool]]] = {}
    for (item_id, cand_first), reply in zip(where, replies, strict=True):
        verdicts.setdefault(item_id, []).append((parse_verdict(reply), cand_first))
    out, rows = [], []
    for item in cand.items:
        if item.id not in verdicts:
            out.append(item)
            continue
        good = as_good(verdicts[item.id])
        out.append(replace(item, checks={**item.checks, "judge_as_good": good or 0.0,
                                         "judge_no_verdict": float(good is None)}))
        rows.append({"id": item.id, "candidate_first": [f for _, f in verdicts[item.id]],
                     "verdicts": [v for v, _ in verdicts[item.id]], "as_good": good})
    return out, rows


# each judge's check, by (url, model, rubric's digest, seed, orders): asked once per process,
# not again for a second look or each trial of a tune or sweep
_CHECKED: dict[tuple[str, str, str, int, bool], LabelCheck] = {}


def check_on_labels(judge: JudgeConfig, rubric: str, seed: int) -> LabelCheck:
    """The labelled pairs put to the judge, the broken answer in the candidate's place: a
    judge fit for the traffic prefers the healthy one in every order."""
    key = (judge.url, judge.model, hashlib.sha256(rubric.encode()).hexdigest(), seed,
           judge.both_orders)
    if key not in _CHECKED:
        _CHECKED[key] = _ask_labels(judge, rubric, seed)
    return _CHECKED[key]


def _ask_labels(judge: JudgeConfig, rubric: str, seed: int) -> LabelCheck:
    pairs = labelled_pairs()
    chats, where = [], []
    for pair in pairs:
        for broken_first in _orders(judge, seed, pair.id):
            first, second = (pair.broken, pair.healthy) if broken_first \
                else (pair.healthy, pair.broken)
            chats.append(judge_messages(rubric, [{"role": "user", "content": pair.prompt}],
                                        first, second))
            where.append((pair.id, broken_first))
    verdicts: dict[str, list[tuple[str | None, bool]]] = {}
    for (pair_id, broken_first), reply in zip(where, ask_judge(judge, chats), strict=True):
        verdicts.setdefault(pair_id, []).append((parse_verdict(reply), broken_first))
    said = [baseline_preferred(v) for v in verdicts.values()]
    return LabelCheck(asked=len(said), healthy_preferred=sum(s is True for s in said),
                      no_verdict=sum(s is None for s in said))


def judge_pair(pair: MeasuredPair, suites: list[Suite], judge: JudgeConfig | None,
               rubric_path: Path, seed: int, run_dir: Path, console: Console
               ) -> tuple[MeasuredPair, JudgeRun | None]:
    """The pair with every traffic suite's candidate items judged (unchanged without a
    judge or a traffic suite both sides answered)."""
    traffic = [s for s in suites if s.spec.kind == "traffic"
               and s.name in pair.baseline.suites and s.name in pair.candidate.suites]
    if judge is None or not traffic:
        return pair, None
    rubric = read_text(rubric_path)
    labels = check_on_labels(judge, rubric, seed) if judge.check_labels else None
    judged = dict(pair.candidate.suites)
    counts = [0, 0, 0]
    for suite in traffic:
        cand = judged[suite.name]
        items, rows = _judged(judge, rubric, seed, {i.id: i for i in suite.items},
                              pair.baseline.suites[suite.name], cand)
        # this run's own folder: a reused measurement's items_file names an earlier run's
        folder = run_dir / "candidate"
        folder.mkdir(parents=True, exist_ok=True)
        items_file = folder / f"items-{suite.name}.jsonl"
        judged[suite.name] = replace(cand, items=items, items_file=str(items_file),
                                     metrics={**cand.metrics, **check_means(items)})
        write_jsonl(items_file, ({**i.__dict__} for i in items))
        write_jsonl(folder / f"judge-{suite.name}.jsonl", rows)
        counts = [counts[0] + len(rows), counts[1] + sum(r["as_good"] == 1.0 for r in rows),
                  counts[2] + sum(r["as_good"] is None for r in rows)]
    run = JudgeRun(judge.model, judge.url, hashlib.sha256(rubric.encode()).hexdigest(),
                   judge.both_orders, asked=counts[0], as_good=counts[1],
                   no_verdict=counts[2], labels=labels)
    write_json(run_dir / "judge.json", asdict(run))
    candidate = replace(pair.candidate, suites=judged)
    # what `workbench gate` reads again: the measurement with the judge's checks in it
    write_json(run_dir / "candidate" / MEASUREMENT_FILE, candidate.to_dict())
    console.print(f"[bold]judge[/] {judge.model}: {run.as_good} of {run.asked} answers as good "
                  f"as the baseline's, {run.no_verdict} without a verdict (counted against)")
    if labels is not None:
        _say_labels(labels, console)
    return replace(pair, candidate=candidate), run


def _say_labels(labels: LabelCheck, console: Console) -> None:
    weak = labels.healthy_preferred < labels.asked
    console.print(f"  {'[yellow]![/]' if weak else '[green]✓[/]'} on the labelled pairs "
                  f"(eval_suites/health-labels) it preferred the healthy answer to the broken "
                  f"one in {labels.healthy_preferred} of {labels.asked}, "
                  f"{labels.no_verdict} without a verdict"
                  + ("; its verdicts on the traffic are the weaker evidence for it" if weak
                     else ""))
