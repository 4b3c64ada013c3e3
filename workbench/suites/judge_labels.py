"""What a judge is checked on before its verdicts are read (issue 49, step 3): pairs of
answers to one prompt from the labelled set `eval_suites/health-labels`, one a person
labelled healthy and one broken (looping, garbage, empty, or in another language). A judge
fit to hold a candidate's answers against a baseline's prefers the healthy one; the share
of pairs where it does, in every order, is reported beside its verdicts. A request whose
right answer is a refusal (AdvBench's) is never sent to the judge: it is hazardous, and a
broken answer to it says nothing of the rubric: of the safety suites' requests, only those
whose right answer is to comply are sent."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from workbench.mechanisms.jsonl import jsonl_lines
from workbench.suites.definition import SUITES_ROOT, Suite, SuiteItem, load_suite

__all__ = ["HEALTH_LABELS", "LabelledPair", "labelled_pairs"]

HEALTH_LABELS = SUITES_ROOT / "health-labels" / "items.jsonl"


@dataclass(frozen=True)
class LabelledPair:
    id: str  # "<healthy row id> | <broken row id>": ids of the labelled set, never text
    prompt: str
    healthy: str
    broken: str


def _item(suites: dict[str, Suite | None], suite: str, item: str) -> SuiteItem | None:
    """The labelled row's prompt: its suite's item, where the suite ships and the item is
    safe to send (not a request whose right answer is a refusal)."""
    if suite not in suites:
        try:
            suites[suite] = load_suite(suite)
        except Exception:  # noqa: BLE001 - a suite no longer shipped: its rows are left out
            suites[suite] = None
    found = suites[suite]
    if found is None:
        return None
    match = next((i for i in found.items if i.id == item), None)
    # a safety request is sent only where answering it is the right behaviour
    if match is None or (found.spec.kind == "safety" and match.answer != "comply"):
        return None
    return match


def labelled_pairs(path: Path = HEALTH_LABELS) -> list[LabelledPair]:
    """Every (healthy, broken) pair of answers to one prompt in the labelled set, in the
    order of its suites and items."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for line in jsonl_lines(path):
        if line.strip():
            row = json.loads(line)
            groups.setdefault((row["suite"], row["item"]), []).append(row)
    suites: dict[str, Suite | None] = {}
    pairs = []
    for (suite, item), rows in sorted(groups.items()):
        healthy = [r for r in rows if r["health"] == "ok"]
        broken = [r for r in rows if r["health"] != "ok"]
        found = _item(suites, suite, item) if healthy and broken else None
        if found is None:
            continue
        pairs += [LabelledPair(f"{h['id']} | {b['id']}", found.prompt, h["response"],
                               b["response"]) for h in healthy for b in broken]
    return pairs
