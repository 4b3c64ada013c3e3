import pytest

from workbench.compare import GateOutcome, decide, evaluate_gates, non_inferiority, paired_delta
from workbench.evaluate.runner import ItemResult, SuiteResult
from workbench.gates import GatePolicy, LatencyGate, QualityGate
from workbench.loadtest import LevelResult, LoadResult


def suite_result(scores: list[float], slices: list[str] | None = None) -> SuiteResult:
    slices = slices or ["s"] * len(scores)
    items = [ItemResult(f"i{k:03d}", (sl,), "h", "", sc, 0.1, 1)
             for k, (sc, sl) in enumerate(zip(scores, slices, strict=True))]
    by = {}
    for it in items:
        by.setdefault(it.slices[0], []).append(it.score)
    return SuiteResult("q", "1", "d", len(items), sum(scores) / len(scores),
                       {k: {"n": len(v), "accuracy": sum(v) / len(v)} for k, v in by.items()},
                       "f", items)


def test_paired_delta_counts_flips_and_brackets_the_mean() -> None:
    base = [1.0] * 60 + [0.0] * 40
    cand = [1.0] * 50 + [0.0] * 10 + [1.0] * 5 + [0.0] * 35  # 10 lost, 5 gained
    d = paired_delta(base, cand, 0.95, 2000, seed=0)
    assert (d.flips_to_wrong, d.flips_to_right) == (10, 5)
    assert d.delta == pytest.approx(-0.05)
    assert d.ci_low < -0.05 < d.ci_high
    assert 0.2 < d.mcnemar_p < 0.4  # exact two-sided binomial: 5 of 15 discordant, p = 0.3018


def test_identical_answers_give_a_point_interval_and_p_one() -> None:
    d = paired_delta([1, 0, 1], [1, 0, 1], 0.95, 1000, seed=0)
    assert (d.delta, d.ci_low, d.ci_high, d.mcnemar_p) == (0.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize("low,high,expected", [
    (-0.02, 0.01, "pass"),        # whole interval above -margin
    (-0.20, -0.08, "fail"),       # whole interval below -margin
    (-0.09, 0.00, "inconclusive"),  # straddles -margin
])
def test_non_inferiority(low: float, high: float, expected: str) -> None:
    d = paired_delta([1.0], [1.0], 0.95, 1000, 0)
    d = d.__class__(**{**d.__dict__, "ci_low": low, "ci_high": high})
    assert non_inferiority(d, margin=0.05) == expected


def test_a_large_drop_fails_the_quality_gate_and_rejects() -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05)])
    base, cand = suite_result([1.0] * 100), suite_result([1.0] * 60 + [0.0] * 40)
    outcomes = evaluate_gates(policy, {"q": base}, {"q": cand}, None, None, "cpu", 0)
    assert [o.status for o in outcomes] == ["fail"]
    assert decide(outcomes) == "reject"


def test_equal_results_pass_and_promote() -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05, slice_max_drop=0.1)])
    scores = [1.0, 0.0] * 50
    outcomes = evaluate_gates(policy, {"q": suite_result(scores)}, {"q": suite_result(scores)},
                              None, None, "cpu", 0)
    assert {o.gate for o in outcomes} == {"quality:q", "quality:q[s]"}
    assert decide(outcomes) == "promote"


def test_missing_suite_results_fail_closed() -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05)])
    outcomes = evaluate_gates(policy, {}, {}, None, None, "cpu", 0)
    assert outcomes[0].status == "fail" and "fail closed" in outcomes[0].detail


def level(c: int, tpot: float, thr: float) -> LevelResult:
    stats = {"mean": tpot, "p50": tpot, "p95": tpot, "p99": tpot}
    return LevelResult(c, 10, 0, 1.0, 1.0, thr, stats, stats, stats, stats, "raw")


def test_latency_ratio_gate_per_level_and_device() -> None:
    policy = GatePolicy(latency=[LatencyGate(metric="tpot_p50_ms", max_ratio=1.5),
                                 LatencyGate(metric="output_throughput", min_ratio=1.0,
                                             devices=["cuda"])])
    base = LoadResult("client", {}, [level(1, 10.0, 100.0), level(8, 20.0, 400.0)])
    cand = LoadResult("client", {}, [level(1, 12.0, 90.0), level(8, 40.0, 300.0)])
    outcomes = evaluate_gates(policy, {}, {}, base, cand, "cpu", 0)
    status = {o.gate: o.status for o in outcomes}
    assert status["latency:tpot_p50_ms:max_ratio@c1"] == "pass"   # 1.2 <= 1.5
    assert status["latency:tpot_p50_ms:max_ratio@c8"] == "fail"   # 2.0 > 1.5
    assert status["latency:output_throughput:min_ratio"] == "not_applicable"
    assert decide(outcomes) == "reject"


def test_inconclusive_without_failures_is_inconclusive() -> None:
    outcomes = [GateOutcome("a", "pass", ""), GateOutcome("b", "inconclusive", ""),
                GateOutcome("c", "not_applicable", "")]
    assert decide(outcomes) == "inconclusive"
    assert decide([GateOutcome("c", "not_applicable", "")]) == "reject"  # nothing judged


def test_slo_attainment_and_memory_floors_gate_as_ratios() -> None:
    import dataclasses

    from workbench.gates import MemoryGate

    policy = GatePolicy(latency=[LatencyGate(metric="slo_attainment", min_ratio=0.95)],
                        memory=[MemoryGate(metric="kv_cache_tokens", min_ratio=1.0),
                                MemoryGate(metric="weights_bytes", max_ratio=0.5)])
    base = LoadResult("client", {}, [dataclasses.replace(level(1, 10.0, 100.0),
                                                         slo={"attainment": 1.0})])
    cand = LoadResult("client", {}, [dataclasses.replace(level(1, 10.0, 100.0),
                                                         slo={"attainment": 0.9})])
    room = {"kv_cache_tokens": 1000, "weights_bytes": 400}
    outcomes = evaluate_gates(policy, {}, {}, base, cand, "cpu", 0, room,
                              {"kv_cache_tokens": 2000, "weights_bytes": 100})
    status = {o.gate: o.status for o in outcomes}
    assert status["latency:slo_attainment:min_ratio@c1"] == "fail"  # 0.9 < 0.95
    assert status["memory:kv_cache_tokens:min_ratio"] == "pass"
    assert status["memory:weights_bytes:max_ratio"] == "pass"  # 0.25 <= 0.5
    # no SLO declared, no headroom measured: both fail closed
    bare = evaluate_gates(policy, {}, {}, LoadResult("client", {}, [level(1, 1.0, 1.0)]),
                          LoadResult("client", {}, [level(1, 1.0, 1.0)]), "cpu", 0, {}, {})
    assert all(o.status == "fail" for o in bare)
