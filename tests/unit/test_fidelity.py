import json
import math
from pathlib import Path

import pytest

from workbench.suites.definition import load_suite
from workbench.suites.results import ItemResult, summarise
from workbench.suites.scorers.fidelity import compare_fidelity, position_kl


def lp(*pairs: tuple[int, float]) -> list[list[float]]:
    return [[t, math.log(p)] for t, p in pairs]


def test_kl_is_zero_for_the_same_distribution_and_matches_the_closed_form() -> None:
    base = lp((1, 0.5), (2, 0.3))
    assert position_kl(base, base) == pytest.approx(0.0, abs=1e-12)
    swapped = lp((2, 0.5), (1, 0.3))  # same tail of 0.2
    expected = 0.5 * math.log(0.5 / 0.3) + 0.3 * math.log(0.3 / 0.5)
    assert position_kl(base, swapped) == pytest.approx(expected)


def test_kl_grows_as_the_candidate_moves_away() -> None:
    base = lp((1, 0.7), (2, 0.2))
    near, far = lp((1, 0.6), (2, 0.3)), lp((1, 0.2), (2, 0.7))
    assert 0 < position_kl(base, near) < position_kl(base, far)
    # a baseline token the candidate does not rank gets at most its smallest top-k prob
    assert position_kl(base, lp((3, 0.9), (2, 0.05))) > position_kl(base, far)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_compare_pairs_items_counts_agreement_and_skips_mismatched_tokens(
        tmp_path: Path) -> None:
    same = lp((5, 0.6), (6, 0.3))
    other = lp((6, 0.6), (5, 0.3))
    base = _write(tmp_path / "b.jsonl", [
        {"id": "a", "tokens": [1, 2, 3], "actual": [math.log(0.5)] * 2, "top": [same, same]},
        {"id": "b", "tokens": [1, 9], "actual": [math.log(0.5)], "top": [same]},
    ])
    cand = _write(tmp_path / "c.jsonl", [
        {"id": "a", "tokens": [1, 2, 3], "actual": [math.log(0.25)] * 2, "top": [same, other]},
        {"id": "b", "tokens": [1, 8], "actual": [math.log(0.5)], "top": [same]},
    ])
    r = compare_fidelity("s", base, cand, {"a": ("x",), "b": ("x",)})
    assert (r.items, r.tokens, r.skipped_items) == (1, 2, 1)
    assert r.top1_agreement == 0.5
    assert r.kl_mean == pytest.approx(position_kl(same, other) / 2)
    assert r.baseline_perplexity == pytest.approx(2.0)
    assert r.candidate_perplexity == pytest.approx(4.0)
    assert r.slices["x"]["tokens"] == 2


def test_fidelity_suite_summary_is_a_token_weighted_perplexity(tmp_path: Path) -> None:
    suite = load_suite("heldout-text")
    items = [ItemResult("a", ("code",), "h", "", math.log(0.5), 0.1, 3),
             ItemResult("b", ("drama",), "h", "", math.log(0.25), 0.1, 1)]
    r = summarise(suite, items, tmp_path / "items-heldout-text.jsonl")
    assert r.kind == "fidelity" and r.metrics["tokens"] == 4
    assert r.metrics["perplexity"] == pytest.approx(math.exp(-(3 * math.log(0.5)
                                                              + math.log(0.25)) / 4))
    assert r.slices["drama"]["perplexity"] == pytest.approx(4.0)
