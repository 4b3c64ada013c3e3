"""A judge model's verdict on two answers to one traffic request (issue 49, step 3): the
question it is asked, its reply read, and the candidate's answer judged as good as the
baseline's only where every order asked says so.

A reply that names neither answer (nor a tie), or names more than one, is no verdict: it
counts against the candidate, never for it, so a judge that rambles or fails cannot pass a
candidate (docs/traffic.md, "The judge").
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["VERDICTS", "as_good", "candidate_first", "judge_messages", "parse_verdict"]

VERDICTS = ("1", "2", "tie")
_TOKEN = re.compile(r"\b(1|2|tie)\b", re.IGNORECASE)


def candidate_first(seed: int, item_id: str) -> bool:
    """Whether the candidate's answer is shown first, drawn per item (seeded): a judge's
    leaning to one position then falls on both models alike."""
    return random.Random(f"{seed}:{item_id}").random() < 0.5


def judge_messages(rubric: str, request: Sequence[dict[str, Any]], first: str, second: str
                   ) -> list[dict[str, str]]:
    """The judge's chat: the team's rubric as the system turn, then the request's turns and
    the two answers, and what to reply."""
    turns = "\n".join(f"[{m.get('role')}] {m.get('content')}" for m in request)
    return [{"role": "system", "content": rubric.strip()},
            {"role": "user", "content": (
                f"A request:\n{turns}\n\nAnswer 1:\n{first}\n\nAnswer 2:\n{second}\n\n"
                "Which answer is better by the rubric? Reply with exactly one of: 1, 2, tie.")}]


def parse_verdict(reply: str) -> str | None:
    """"1", "2" or "tie" where the reply names exactly one of them; else None."""
    found = {m.lower() for m in _TOKEN.findall(reply)}
    return found.pop() if len(found) == 1 else None


def as_good(verdicts: Sequence[tuple[str | None, bool]]) -> float | None:
    """1.0 where every (verdict, candidate shown first) says the candidate's answer is at
    least as good, 0.0 where one says it is worse; None (no verdict) where any order got
    no readable reply."""
    if not verdicts or any(v is None for v, _ in verdicts):
        return None
    worse = [v == ("2" if first else "1") for v, first in verdicts]
    return 0.0 if any(worse) else 1.0


def baseline_preferred(verdicts: Sequence[tuple[str | None, bool]]) -> bool | None:
    """Whether every order picked the baseline's answer as the better one (not a tie): how
    a labelled pair whose baseline is the healthy answer checks a judge (judge_labels.py);
    a judge that always names one position is then right in one order only. None where any
    order got no readable reply."""
    if not verdicts or any(v is None for v, _ in verdicts):
        return None
    return all(v == ("2" if first else "1") for v, first in verdicts)
