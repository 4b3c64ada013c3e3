"""The tune search's schedule, against oracles with a known answer."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workbench.tune.schedule import next_kept, settled


def search(threshold: int | None, most: int, budget: int = 100
           ) -> tuple[dict[int, str], int | None]:
    """Run the schedule against a candidate promoted exactly when k >= threshold."""
    tried: dict[int, str] = {}
    while (k := next_kept(tried, most)) is not None and len(tried) < budget:
        assert k not in tried and 0 <= k <= most
        tried[k] = "promote" if threshold is not None and k >= threshold else "reject"
    return tried, settled(tried, most)


@given(most=st.integers(1, 64), data=st.data())
def test_it_finds_the_smallest_promoted_k_in_logarithmic_trials(most: int, data) -> None:
    threshold = data.draw(st.integers(0, most))
    tried, found = search(threshold, most)
    assert found == threshold
    assert len(tried) <= 2 * math.ceil(math.log2(threshold + 1)) + 2


@given(most=st.integers(1, 64))
def test_nothing_promoted_ends_after_keeping_the_most(most: int) -> None:
    tried, found = search(None, most)
    assert found is None and max(tried) == most
    assert list(tried)[:3] == [0, 1, 2][:len(tried)]


def test_the_plain_recipe_first_then_doubling_then_bisection() -> None:
    tried, found = search(5, 30)
    assert list(tried) == [0, 1, 2, 4, 8, 6, 5] and found == 5


@pytest.mark.parametrize("decision", ["inconclusive", "reject"])
def test_only_a_promotion_counts_as_a_pass(decision: str) -> None:
    assert next_kept({0: decision, 1: decision}, 30) == 2
    assert settled({0: "promote"}, 30) == 0
    assert settled({0: "reject", 1: "promote"}, 30) == 1
    assert settled({0: "reject", 2: "promote"}, 30) is None  # 1 not tried yet


def test_a_trial_keeps_the_top_ranked_blocks_and_nothing_else() -> None:
    from workbench.config.run_config import Candidate
    from workbench.quantize.sensitivity import BlockScore, Sensitivity
    from workbench.tune.trials import trial_candidate, trial_name

    scores = {0: 0.05, 1: 0.01, 2: 0.40, 3: 0.05}
    sens = Sensitivity("int4", 4, 64, [BlockScore(b, 7, 10, kl, 0.9) for b, kl in
                                       scores.items()], 100, 8, 1.0, "k", False)
    assert sens.ranked() == [2, 0, 3, 1]  # ties by index
    cand = Candidate(recipe="w4a16", group_size=64)
    assert trial_candidate(cand, sens, 0) == cand
    two = trial_candidate(cand, sens, 2)
    assert two.ignore[0] == "lm_head" and len(two.ignore) == 2
    kept = [b for b in range(12) if re.match(two.ignore[1][3:], f"model.layers.{b}.mlp.up_proj")]
    assert kept == [0, 2]
    assert cand.ignore == ["lm_head"]  # the config's candidate is untouched
    assert two.recipe_params() != cand.recipe_params()  # so its artifact key differs
    assert trial_name("int4", 2) == "int4-keep2"
