"""Gates a broken model cannot pass, and intervals that hold on an A/A (no engine)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from builders import suite_result

from workbench.config.gate_policy import (
    FidelityGate,
    GatePolicy,
    HealthGate,
    LatencyGate,
    QualityGate,
)
from workbench.gate.evidence import Evidence
from workbench.gate.gates import decide, evaluate_gates
from workbench.gate.latency import session_ratio_interval
from workbench.gate.paired import constant_answers, evidence_strength, paired_delta
from workbench.loadtest.results import LevelResult, LoadResult
from workbench.suites.results import ItemResult, SuiteResult
from workbench.suites.scorers.fidelity import first_divergence, generation_agreement


def generated(healthy: list[bool], name: str = "g", health_checked: bool = True
              ) -> SuiteResult:
    items = [ItemResult(f"i{k:03d}", ("s",), "h", f"answer {k}", 1.0, 0.1, 5,
                        checks={"healthy": float(h)} if health_checked else {},
                        health=("ok" if h else "looping: 0.9") if health_checked else "")
             for k, h in enumerate(healthy)]
    return SuiteResult(name, "1", "d", len(items), 1.0, {"s": {"n": len(items),
                                                              "accuracy": 1.0}},
                       "f", items, generates=True)


HEALTH = GatePolicy(health=HealthGate(max_drop=0.05, pooled_max_drop=0.03))


def test_health_gate_per_suite_and_pooled() -> None:
    fine = {"a": generated([True] * 60, "a"), "b": generated([True] * 60, "b")}
    broken = {"a": generated([True] * 20 + [False] * 40, "a"), "b": generated([True] * 60, "b")}
    same = evaluate_gates(HEALTH, Evidence(fine, fine, None, None, "cpu"), 0)
    assert {o.gate: o.status for o in same} == {"health:a": "pass", "health:b": "pass",
                                                "health:(pooled)": "pass"}
    assert decide(same) == "promote"
    worse = {o.gate: o.status for o in evaluate_gates(
        HEALTH, Evidence(fine, broken, None, None, "cpu"), 0)}
    assert worse == {"health:a": "fail", "health:b": "pass", "health:(pooled)": "fail"}


def test_health_gate_fails_closed_on_records_without_health_and_skips_runs_without_text(
        ) -> None:
    old = {"a": generated([True] * 30, "a", health_checked=False)}
    [outcome] = evaluate_gates(HEALTH, Evidence(old, old, None, None, "cpu"), 0)
    assert outcome.status == "fail" and "recorded before health checks" in outcome.detail
    choice = suite_result([1.0, 0.0] * 20)  # multiple choice: generates nothing
    [outcome] = evaluate_gates(HEALTH, Evidence({"q": choice}, {"q": choice}, None, None,
                                                "cpu"), 0)
    assert outcome.status == "not_applicable"


def test_old_records_infer_which_suites_generated() -> None:
    data = generated([True] * 3).to_dict()
    del data["generates"]
    assert SuiteResult.from_dict(data).generates
    data["items"] = [{**i, "choice_probs": [0.4, 0.6]} for i in data["items"]]
    assert not SuiteResult.from_dict(data).generates


def test_a_baseline_that_answers_everything_alike_cannot_pass_silently() -> None:
    same_pick = suite_result([1.0] * 60 + [0.0] * 60)
    same_pick = dataclasses.replace(same_pick, items=[
        dataclasses.replace(i, response="yes") for i in same_pick.items])
    assert constant_answers(same_pick)
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05)])
    [outcome] = evaluate_gates(policy, Evidence({"q": same_pick}, {"q": same_pick}, None, None,
                                                "cpu"), 0)
    assert outcome.status == "inconclusive" and "cannot see a change" in outcome.detail
    assert outcome.evidence["constant_baseline"]
    # a candidate that does change answers gives the suite something to see
    changed = dataclasses.replace(same_pick, items=[
        dataclasses.replace(i, score=1.0 - i.score) if k in (0, 119) else i
        for k, i in enumerate(same_pick.items)])  # one lost, one gained
    [outcome] = evaluate_gates(policy, Evidence({"q": same_pick}, {"q": changed}, None, None,
                                                "cpu"), 0)
    assert outcome.status == "pass" and "cannot see a change" not in outcome.detail


def test_evidence_strength_says_what_could_be_seen_and_what_would_decide() -> None:
    none_flipped = paired_delta([1.0] * 40, [1.0] * 40, 0.95, 2000, 0)
    strength = evidence_strength(none_flipped, 0.10, 0.95, "pass")
    # no flips in 40 items: a drop of about 2.8 / sqrt(40) / sqrt(40) ~ 0.07 is detectable
    assert 0.05 < strength["detectable_drop"] < 0.1 and strength["items_to_decide"] is None
    more = paired_delta([1.0] * 400, [1.0] * 400, 0.95, 2000, 0)
    assert evidence_strength(more, 0.1, 0.95, "pass")["detectable_drop"] < \
        strength["detectable_drop"]
    base = [1.0] * 40
    cand = [1.0] * 36 + [0.0] * 4  # -0.10 on 40 items vs a 0.05 margin: inconclusive
    d = paired_delta(base, cand, 0.95, 2000, 0)
    decide_n = evidence_strength(d, 0.05, 0.95, "inconclusive")["items_to_decide"]
    assert decide_n is not None and decide_n > 40
    # the gate's detail carries both
    [outcome] = evaluate_gates(GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05)]),
                               Evidence({"q": suite_result(base)}, {"q": suite_result(cand)},
                                        None, None, "cpu"), 0)
    assert "could detect a drop of" in outcome.detail
    if outcome.status == "inconclusive":
        assert "more items would decide it" in outcome.detail


def test_a_churning_candidate_with_no_loss_passes_as_often_as_tolerable_churn_says() -> None:
    """tolerable_churn is the share of answers a candidate may change, as many lost as
    gained, and still pass with 80% chance; twice that share passes far less often."""
    from workbench.gate.gates import non_inferiority
    from workbench.gate.paired import tolerable_churn

    n, margin = 120, 0.05
    most = tolerable_churn(n, margin, 0.95)
    assert abs(most - n * (margin / 2.8016) ** 2) < 1e-3  # 3.8% at the smoke size
    assert tolerable_churn(4 * n, margin, 0.95) == pytest.approx(4 * most)
    rng = np.random.default_rng(0)

    def passes(share: float) -> float:
        runs = 300
        hits = 0
        for run in range(runs):
            base = (rng.random(n) < 0.5).astype(float)
            cand = np.where(rng.random(n) < share, 1 - base, base)
            hits += non_inferiority(paired_delta(list(base), list(cand), 0.95, 1000, run),
                                    margin) == "pass"
        return hits / runs

    assert 0.7 <= passes(most) <= 0.92
    assert passes(2 * most) < 0.6
    # the inconclusive gate says how much the candidate changed and how much could pass
    base = [1.0, 0.0] * 60
    cand = [0.0 if k < 10 else v for k, v in enumerate(base)]  # 5 lost
    cand = [1.0 if 10 <= k < 16 and v == 0.0 else v for k, v in enumerate(cand)]  # 3 gained
    [outcome] = evaluate_gates(GatePolicy(quality=[QualityGate(suite="q", max_drop=margin)]),
                               Evidence({"q": suite_result(base)}, {"q": suite_result(cand)},
                                        None, None, "cpu"), 0)
    assert outcome.status == "inconclusive", outcome.detail
    assert outcome.evidence["churn"] == pytest.approx(8 / 120, abs=1e-4)
    assert "it changed 6.7% of the answers, and 120 items pass a candidate with no loss " \
        "that changes at most 3.8%" in outcome.detail
    # the record's headline: the sizes held the release, not a loss
    from workbench.record.policy_text import undersized_headline

    headline = undersized_headline([outcome])
    assert headline.startswith("Inconclusive at these sizes, not rejected: on 1 gate(s)")
    assert "`quality:q` changed 6.7% of 120, which pass at most 3.8%" in headline
    failed = dataclasses.replace(outcome, gate="quality:other", status="fail")
    assert undersized_headline([outcome, failed]) == ""  # a fail decides: no excuse
    quiet = dataclasses.replace(outcome, evidence={**outcome.evidence, "churn": 0.01})
    assert undersized_headline([quiet]) == ""  # within what the items can pass: no claim


def test_generation_agreement_counts_identical_continuations_and_first_divergence() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) == 3
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    base = {"a": {"continuation": [1, 2, 3, 4]}, "b": {"continuation": [5, 6, 7, 8]}}
    cand = {"a": {"continuation": [1, 2, 3, 4]}, "b": {"continuation": [5, 6, 0, 0]}}
    got = generation_agreement(base, cand, {"a": ("x",), "b": ("y",)})
    assert got["identical_share"] == 0.5 and got["prefix_agreement"] == 0.75
    assert got["slices"]["y"]["identical_share"] == 0.0 and got["tokens"] == 4
    policy = GatePolicy(fidelity=[FidelityGate(suite="t", min_identical_share=0.9,
                                               min_prefix_agreement=0.7)])
    status = {o.gate: o.status for o in evaluate_gates(policy, Evidence(
        {}, {}, None, None, "cpu", fidelity={"t": {"agreement": got}}), 0)}
    assert status == {"fidelity:t:identical_share": "fail",
                      "fidelity:t:prefix_agreement": "pass"}
    # a record from before generation agreement: fail closed, saying why
    [outcome, _] = evaluate_gates(policy, Evidence({}, {}, None, None, "cpu",
                                                   fidelity={"t": {"kl_mean": 0.1}}), 0)
    assert outcome.status == "fail" and "before generation agreement" in outcome.detail


def session_level(e2el: float, thr: float) -> LevelResult:
    stats = {"p50": e2el, "p95": e2el, "p99": e2el, "max": e2el, "mean": e2el}
    return LevelResult(1, 10, 0, 1.0, 1.0, thr, stats, stats, stats, stats, "raw")


def test_latency_gates_judge_all_sessions_with_a_between_session_interval() -> None:
    def load(values: list[tuple[float, float]]) -> LoadResult:
        first, *rest = [LoadResult("client", {}, [session_level(e, t)]) for e, t in values]
        return dataclasses.replace(first, rounds=rest)

    base = load([(100.0, 50.0), (110.0, 47.0), (95.0, 52.0)])
    same = load([(104.0, 49.0), (99.0, 51.0), (107.0, 48.0)])
    slower = load([(300.0, 20.0), (310.0, 19.0), (290.0, 21.0)])
    policy = GatePolicy(latency=[LatencyGate(metric="e2el_p50_ms", max_ratio=1.5),
                                 LatencyGate(metric="output_throughput", min_ratio=0.8)])
    aa = evaluate_gates(policy, Evidence({}, {}, base, same, "cpu"), 0)
    assert [o.status for o in aa] == ["pass", "pass"]
    for o in aa:
        low, high = o.evidence["ratio_interval"]
        assert low < 1.0 < high and "3 + 3 engine sessions" in o.detail
    worse = evaluate_gates(policy, Evidence({}, {}, base, slower, "cpu"), 0)
    assert [o.status for o in worse] == ["fail", "fail"]


@pytest.mark.parametrize("sessions", [2, 3])
def test_session_interval_covers_an_aa_at_the_stated_confidence(sessions: int) -> None:
    """Simulated A/A: each session's figure = the model's true value x a session effect x
    within-session noise (log-normal). The interval holds 1.0 in about 95% of runs; the
    within-session-only interval of one session each does not (docs/gates.md)."""
    rng = np.random.default_rng(0)
    runs, covered, naive = 2000, 0, 0
    session_sd, within_sd = 0.08, 0.03
    for _ in range(runs):
        def figures() -> list[float]:
            return list(np.exp(rng.normal(0, session_sd, sessions)
                               + rng.normal(0, within_sd, sessions)))

        _, (low, high) = session_ratio_interval(figures(), figures(), 0.95)
        covered += low <= 1.0 <= high
        one_b, one_c = figures()[0], figures()[0]
        ratio, half = math.log(one_c / one_b), 1.96 * within_sd * math.sqrt(2)
        naive += abs(ratio) <= half
    assert 0.93 <= covered / runs <= 0.97, covered / runs
    assert naive / runs < 0.6  # ignoring the session effect: far below 95%


def test_a_health_gate_naming_a_suite_that_generates_nothing_is_refused_up_front(
        tmp_path) -> None:
    from workbench.plan.checks import policy_problems
    from workbench.suites.definition import load_suite

    suites = [load_suite("arithmetic"), load_suite("mmlu-sample")]
    policy = GatePolicy(health=HealthGate(max_drop=0.05, suites=["arithmetic", "mmlu-sample",
                                                                 "advbench"]))
    problems = policy_problems(policy, tmp_path / "gates.yaml", suites)
    assert any("'advbench', which the config does not run" in p for p in problems)
    assert any("'mmlu-sample', which generates no text (its scoring is choice)" in p
               for p in problems)
    assert not any("'arithmetic'" in p for p in problems)
