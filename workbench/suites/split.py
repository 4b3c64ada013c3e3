"""Every suite's items in two halves, by a hash of their id: the search half that `tune`
judges its trials on, and the confirmation half that only the chosen trial's final
decision reads (docs/tune.md, "Selection cannot fool the verdict").

A search that tries several candidates against one baseline and keeps the one that passed
overstates it: the winner is partly the one whose noise fell its way. Items whose outcomes
no search decision read are independent of that choice, so a decision judged on them alone
holds at the policy's level. The halves are fixed by the item ids and a seed, not by the
sample, so a smoke sample and every item split alike and a rerun splits the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from typing_extensions import TypedDict

from workbench.suites.definition import Suite
from workbench.suites.results import SuiteResult, summarise

__all__ = ["ItemSplit", "SplitJson", "SplitPart"]

SplitPart = Literal["search", "confirm"]


class SplitJson(TypedDict):
    part: SplitPart
    seed: int
    rule: str  # which items the part holds, in words


@dataclass(frozen=True)
class ItemSplit:
    part: SplitPart
    seed: int = 0

    def keeps(self, item_id: str) -> bool:
        """Whether the item is in this part: sha256 of 'seed:id', even first byte search."""
        first = hashlib.sha256(f"{self.seed}:{item_id}".encode()).digest()[0]
        return (first % 2 == 0) == (self.part == "search")

    def restrict(self, result: SuiteResult, suite: Suite) -> SuiteResult:
        """The suite's result over this part's items only, summed up again."""
        items = [i for i in result.items if self.keeps(i.id)]
        if not items:  # nothing to sum up: the gates that need this suite fail closed
            return replace(result, n=0, items=[], accuracy=0.0, slices={}, metrics={})
        return summarise(suite, items, Path(result.items_file), result.suite)

    def to_json(self) -> SplitJson:
        return {"part": self.part, "seed": self.seed,
                "rule": f"items whose sha256('{self.seed}:<id>') starts with an "
                        f"{'even' if self.part == 'search' else 'odd'} byte"}
