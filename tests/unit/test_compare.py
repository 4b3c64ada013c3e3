import numpy as np
import pytest
from builders import suite_result

from workbench.config.gate_policy import GatePolicy, LatencyGate, QualityGate
from workbench.gate.evidence import Evidence, GateOutcome
from workbench.gate.gates import decide, evaluate_gates, non_inferiority
from workbench.gate.paired import paired_delta
from workbench.loadtest.results import LevelResult, LoadResult
from workbench.suites.results import ItemResult, SuiteResult


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
    # an end on the margin itself (6 of 120 items) has not cleared it: a tie, either way
    (-6 / 120, 0.01, "inconclusive"),
    (-0.20, -6 / 120, "inconclusive"),
])
def test_non_inferiority(low: float, high: float, expected: str) -> None:
    d = paired_delta([1.0], [1.0], 0.95, 1000, 0)
    d = d.__class__(**{**d.__dict__, "ci_low": low, "ci_high": high})
    assert non_inferiority(d, margin=0.05) == expected


def test_a_large_drop_fails_the_quality_gate_and_rejects() -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05)])
    base, cand = suite_result([1.0] * 100), suite_result([1.0] * 60 + [0.0] * 40)
    outcomes = evaluate_gates(policy, Evidence({"q": base}, {"q": cand}, None, None, "cpu"), 0)
    assert [o.status for o in outcomes] == ["fail"]
    assert decide(outcomes) == "reject"


def test_equal_results_pass_and_promote() -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05, slice_max_drop=0.1)])
    scores = [1.0, 0.0] * 50
    outcomes = evaluate_gates(policy, Evidence({"q": suite_result(scores)},
                                               {"q": suite_result(scores)}, None, None, "cpu"),
                              0)
    assert {o.gate for o in outcomes} == {"quality:q", "quality:q[s]"}
    assert decide(outcomes) == "promote"


def test_missing_suite_results_fail_closed() -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05)])
    outcomes = evaluate_gates(policy, Evidence({}, {}, None, None, "cpu"), 0)
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
    outcomes = evaluate_gates(policy, Evidence({}, {}, base, cand, "cpu"), 0)
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

    from workbench.config.gate_policy import MemoryGate

    policy = GatePolicy(latency=[LatencyGate(metric="slo_attainment", min_ratio=0.95)],
                        memory=[MemoryGate(metric="kv_cache_tokens", min_ratio=1.0),
                                MemoryGate(metric="weights_bytes", max_ratio=0.5)])
    base = LoadResult("client", {}, [dataclasses.replace(level(1, 10.0, 100.0),
                                                         slo={"attainment": 1.0})])
    cand = LoadResult("client", {}, [dataclasses.replace(level(1, 10.0, 100.0),
                                                         slo={"attainment": 0.9})])
    room = {"kv_cache_tokens": 1000, "weights_bytes": 400}
    outcomes = evaluate_gates(policy, Evidence({}, {}, base, cand, "cpu", room,
                                               {"kv_cache_tokens": 2000, "weights_bytes": 100}),
                              0)
    status = {o.gate: o.status for o in outcomes}
    assert status["latency:slo_attainment:min_ratio@c1"] == "fail"  # 0.9 < 0.95
    assert status["memory:kv_cache_tokens:min_ratio"] == "pass"
    assert status["memory:weights_bytes:max_ratio"] == "pass"  # 0.25 <= 0.5
    # no SLO declared, no headroom measured: both fail closed
    bare = evaluate_gates(policy, Evidence({}, {}, LoadResult("client", {}, [level(1, 1.0, 1.0)]),
                                           LoadResult("client", {}, [level(1, 1.0, 1.0)]),
                                           "cpu"), 0)
    assert all(o.status == "fail" for o in bare)


def test_a_small_slice_is_reported_too_small_and_a_check_can_be_gated() -> None:

    items = [ItemResult(f"i{k}", ("big" if k < 40 else "tiny",), "h", "", 1.0, 0.1, 1,
                        checks={"schema_valid": 1.0}) for k in range(44)]
    suite = SuiteResult("q", "1", "d", 44, 1.0, {"big": {"n": 40, "accuracy": 1.0},
                                                 "tiny": {"n": 4, "accuracy": 1.0}}, "f", items)
    worse = SuiteResult("q", "1", "d", 44, 1.0, suite.slices, "f", [
        ItemResult(i.id, i.slices, "h", "", 1.0, 0.1, 1, checks={"schema_valid": float(k % 2)})
        for k, i in enumerate(items)])
    policy = GatePolicy(structured=[QualityGate(suite="q", metric="schema_valid", max_drop=0.05,
                                                slice_max_drop=0.1, min_value=0.9)])
    status = {o.gate: o for o in evaluate_gates(policy, Evidence({"q": suite}, {"q": worse},
                                                                 None, None, "cpu"), 0)}
    assert status["structured:q.schema_valid"].status == "fail"  # half the items lost it
    assert status["structured:q.schema_valid[tiny]"].status == "not_applicable"
    assert "too small to decide: n=4" in status["structured:q.schema_valid[tiny]"].detail
    assert status["structured:q.schema_valid:floor"].status == "fail"  # 0.5 < 0.9


def test_recovery_floor_catches_a_loss_the_margin_allows() -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.2, min_recovery=0.99)])
    base, cand = suite_result([1.0] * 90 + [0.0] * 10), suite_result([1.0] * 85 + [0.0] * 15)
    status = {o.gate: o.status for o in evaluate_gates(
        policy, Evidence({"q": base}, {"q": cand}, None, None, "cpu"), 0)}
    assert status == {"quality:q": "pass", "quality:q:recovery": "fail"}  # 0.85/0.90 < 0.99


def test_holm_adjustment_matches_the_textbook_example() -> None:
    from workbench.gate.paired import holm_adjust

    # p-values 0.01, 0.04, 0.03 over three tests: 0.03, 0.06, 0.06 after Holm
    assert holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_holm_leaves_passes_alone_and_turns_a_borderline_fail_inconclusive() -> None:
    base = suite_result([1.0] * 200)
    passing = suite_result([1.0] * 196 + [0.0] * 4)  # delta -0.02, margin 0.05
    borderline = suite_result([1.0] * 180 + [0.0] * 20)  # delta -0.10: just a fail alone
    gates = [QualityGate(suite=f"q{k}", max_drop=0.05) for k in range(20)]
    suites = {f"q{k}": base for k in range(20)}
    cands = {f"q{k}": passing for k in range(20)}
    cands["q0"] = borderline
    plain = evaluate_gates(GatePolicy(quality=gates, multiple_comparisons="none"),
                           Evidence(suites, cands, None, None, "cpu"), 0)
    holm = evaluate_gates(GatePolicy(quality=gates, multiple_comparisons="holm"),
                          Evidence(suites, cands, None, None, "cpu"), 0)
    # a pass needs no adjustment: the decision needs every gate to pass
    assert [o.status for o in plain[1:]] == [o.status for o in holm[1:]] == ["pass"] * 19
    assert plain[0].status == "fail"
    assert holm[0].status == "inconclusive" and "Holm-adjusted p=" in holm[0].detail
    assert holm[0].evidence["p_fail_adjusted"] > 0.025


def test_holm_keeps_a_clear_fail() -> None:
    base, cand = suite_result([1.0] * 200), suite_result([1.0] * 100 + [0.0] * 100)
    gates = [QualityGate(suite=f"q{k}", max_drop=0.05) for k in range(20)]
    out = evaluate_gates(GatePolicy(quality=gates), Evidence(
        {f"q{k}": base for k in range(20)}, {f"q{k}": cand for k in range(20)}, None, None,
        "cpu"), 0)
    assert GatePolicy().multiple_comparisons == "holm"  # the default
    assert all(o.status == "fail" for o in out)


@pytest.mark.parametrize("right,n,expected", [
    (27, 30, "inconclusive"),   # 0.90 [0.73, 0.98] straddles 0.85
    (270, 300, "pass"),         # 0.90 [0.86, 0.93] clears it
    (20, 30, "fail"),           # 0.67 [0.47, 0.83] wholly below
    (25, 30, "inconclusive"),   # 0.833 [0.65, 0.94]: a point floor would fail this
])
def test_a_floor_is_judged_on_the_rates_exact_interval(right: int, n: int, expected: str
                                                       ) -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=1.0, min_value=0.85)])
    scores = [1.0] * right + [0.0] * (n - right)
    out = {o.gate: o for o in evaluate_gates(policy, Evidence(
        {"q": suite_result(scores)}, {"q": suite_result(scores)}, None, None, "cpu"), 0)}
    floor = out["quality:q:floor"]
    assert floor.status == expected
    assert floor.baseline_status == expected  # the same rates: the baseline is held alike
    assert floor.evidence["candidate"]["ci_low"] <= right / n <= floor.evidence[
        "candidate"]["ci_high"]
    if expected == "inconclusive":
        assert "more items would decide it" in floor.detail


def test_a_floor_the_baseline_misses_is_named_so() -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=1.0, min_value=0.9)])
    low = [1.0] * 150 + [0.0] * 50  # 0.75 [0.68, 0.81]
    out = {o.gate: o for o in evaluate_gates(policy, Evidence(
        {"q": suite_result(low)}, {"q": suite_result(low)}, None, None, "cpu"), 0)}
    floor = out["quality:q:floor"]
    assert floor.status == floor.baseline_status == "fail"
    assert "the baseline misses it" in floor.detail


def test_a_ceiling_fails_only_when_the_interval_lies_above_it() -> None:
    policy = GatePolicy(safety=[QualityGate(suite="q", metric="score", max_drop=1.0,
                                            max_value=0.2)])
    few, many = [1.0] * 2 + [0.0] * 58, [1.0] * 90 + [0.0] * 210  # 0.033 and 0.30
    for cand, expected in ((few, "pass"), (many, "fail")):
        out = {o.gate: o.status for o in evaluate_gates(policy, Evidence(
            {"q": suite_result(few)}, {"q": suite_result(cand)}, None, None, "cpu"), 0)}
        assert out["safety:q:ceiling"] == expected, (cand, out)


def test_every_measured_suite_gets_the_policys_default_unless_ungated() -> None:
    from workbench.config.gate_policy import SuiteDefault, SuiteDefaults, Ungated

    def named(name: str, scores: list[float]) -> SuiteResult:
        import dataclasses
        return dataclasses.replace(suite_result(scores), suite=name)

    good, bad = [1.0] * 100, [1.0] * 50 + [0.0] * 50
    base = {n: named(n, good) for n in ("a", "b", "c")}
    cand = {"a": named("a", good), "b": named("b", bad), "c": named("c", bad)}
    policy = GatePolicy(quality=[QualityGate(suite="a", max_drop=0.05)],
                        defaults=SuiteDefaults(quality=SuiteDefault(max_drop=0.1)),
                        ungated=[Ungated(suite="c", reason="measured for the record")])
    out = {o.gate: o.status for o in evaluate_gates(policy, Evidence(base, cand, None, None,
                                                                     "cpu"), 0)}
    assert out == {"quality:a": "pass", "quality:b": "fail"}  # b defaulted, c not judged
    said = policy.gated_by({"a": "quality", "b": "quality", "c": "quality", "d": "safety"})
    assert said["b"] == "the policy's quality default" and "measured for the record" in said["c"]
    assert said["d"].startswith("not gated")


def test_an_informational_gate_is_shown_and_not_counted() -> None:
    policy = GatePolicy(latency=[LatencyGate(metric="tpot_p50_ms", max_ratio=1.5,
                                             informational=True)])
    base = LoadResult("client", {}, [level(1, 10.0, 100.0)])
    cand = LoadResult("client", {}, [level(1, 30.0, 100.0)])
    outcomes = evaluate_gates(policy, Evidence({}, {}, base, cand, "cpu"), 0)
    assert outcomes[0].status == "fail" and outcomes[0].informational
    assert decide(outcomes + [GateOutcome("a", "pass", "")]) == "promote"


def test_a_latency_interval_wider_than_its_margin_does_not_pass() -> None:
    from workbench.gate.latency import wider_than_margin

    assert wider_than_margin((0.671, 1.964), 2.0, "max")  # issue 22's CPU tpot interval
    assert not wider_than_margin((0.9, 1.15), 2.0, "max")
    assert not wider_than_margin((0.5, 0.9), 1.0, "max")  # a speed-up gate has no room
    assert wider_than_margin((0.3, 1.2), 0.5, "min")


def test_fidelity_and_slo_gates() -> None:
    import dataclasses

    from workbench.config.gate_policy import FidelityGate, SLOGate

    base = LoadResult("client", {}, [level(1, 10.0, 100.0)])
    good = dataclasses.replace(level(1, 10.0, 100.0), completed=300, slo={
        "meets_slo": True, "attainment": 0.95, "ttft_p99_ms": 1000, "tpot_p99_ms": 100})
    policy = GatePolicy(fidelity=[FidelityGate(suite="text", max_kl_mean=0.1,
                                               min_top1_agreement=0.9),
                                  FidelityGate(suite="q", max_flip_rate=0.05)],
                        slo=[SLOGate(min_attainment=0.99)])
    ev = Evidence({"q": suite_result([1.0] * 100)}, {"q": suite_result([0.0] * 3 + [1.0] * 97)},
                  base, LoadResult("client", {}, [good]), "cpu",
                  fidelity={"text": {"kl_mean": 0.05, "top1_agreement": 0.85}})
    status = {o.gate: o.status for o in evaluate_gates(policy, ev, 0)}
    assert status == {"fidelity:text:kl_mean": "pass", "fidelity:text:top1_agreement": "fail",
                      "fidelity:q:flip_rate": "pass",
                      "slo@c1": "fail"}  # 285 of 300 [0.92, 0.97] < 0.99
    # no fidelity suite measured, no SLO declared: fail closed
    bare = Evidence({}, {}, base, base, "cpu")
    assert all(o.status == "fail" for o in evaluate_gates(policy, bare, 0))


def test_inconclusive_can_be_made_non_blocking() -> None:
    outcomes = [GateOutcome("a", "pass", ""), GateOutcome("b", "inconclusive", "")]
    assert decide(outcomes) == "inconclusive"
    assert decide(outcomes, inconclusive_blocks=False) == "promote"


def simulate_aa(runs: int, n: int, flip_rate: float, policy: GatePolicy, seed: int
                ) -> dict[str, float]:
    """A/A runs: the candidate is the baseline with each item's outcome flipped, either
    way, with probability flip_rate (the nondeterminism of re-running one model); the
    baseline's outcomes are drawn afresh every run."""
    rng = np.random.default_rng(seed)
    outcomes = {"fail": 0, "inconclusive": 0, "pass": 0}
    for run in range(runs):
        base = (rng.random(n) < 0.6).astype(float)
        flip = rng.random(n) < flip_rate
        cand = np.where(flip, 1 - base, base)
        got = evaluate_gates(policy, Evidence({"q": suite_result(list(base))},
                                              {"q": suite_result(list(cand))}, None, None,
                                              "cpu"), seed=run)
        outcomes[got[0].status] += 1
    return {k: v / runs for k, v in outcomes.items()}


def test_aa_false_reject_rate_is_within_alpha() -> None:
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05)],
                        bootstrap_resamples=2000)
    alpha = (1 - policy.confidence) / 2
    # a 2% flip rate is well above what greedy decoding on one engine shows (0 flips in the
    # integration A/A run); at the margin itself the test's size is alpha by construction
    rates = simulate_aa(runs=300, n=300, flip_rate=0.02, policy=policy, seed=1)
    print(f"A/A over 300 simulated runs (n=300, 2% flips): {rates}")
    assert rates["fail"] <= alpha
    assert rates["fail"] + rates["inconclusive"] <= 1 - policy.confidence


def test_a_regression_in_one_slice_rejects_while_the_aggregate_passes() -> None:
    slices = [f"s{k}" for k in range(10) for _ in range(60)]
    base = [1.0 if i % 5 else 0.0 for i in range(600)]  # 80% right in every slice
    cand = list(base)
    lost = [i for i in range(600) if slices[i] == "s3" and base[i] == 1.0][:18]
    for i in lost:
        cand[i] = 0.0  # slice s3: 0.80 -> 0.50; overall 0.80 -> 0.77
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.05, slice_max_drop=0.1)])
    outcomes = {o.gate: o.status for o in evaluate_gates(
        policy, Evidence({"q": suite_result(base, slices)}, {"q": suite_result(cand, slices)},
                         None, None, "cpu"), 0)}
    assert outcomes["quality:q"] == "pass"
    assert outcomes["quality:q[s3]"] == "fail"
    assert all(v == "pass" for k, v in outcomes.items() if k not in ("quality:q[s3]",))
    assert decide([GateOutcome(k, v, "") for k, v in outcomes.items()]) == "reject"


def test_latency_ratios_carry_a_per_request_bootstrap_interval(tmp_path) -> None:
    import json

    from workbench.gate.latency import ratio_interval

    rng = np.random.default_rng(0)
    base = rng.lognormal(np.log(100), 0.1, 200)
    slower = rng.lognormal(np.log(150), 0.1, 200)
    low, high = ratio_interval(base, slower, 50, 0.95, 2000, 0)
    assert low < 1.5 < high and high - low < 0.1

    def raw(ttfts: np.ndarray) -> dict:
        n = len(ttfts)
        return {"ttfts": list(ttfts / 1000), "latencies": list(ttfts / 1000 + 0.5),
                "output_lens": [11] * n, "itls": [[0.05] * 10] * n, "errors": [""] * n}

    for role, values in (("b", base), ("c", slower)):
        (tmp_path / role).mkdir()
        (tmp_path / role / "bench-c1.json").write_text(json.dumps(raw(values)))

    def lv(values: np.ndarray) -> LevelResult:
        stats = {"p50": float(np.percentile(values, 50)), "p99": 1.0, "p95": 1.0, "mean": 1.0}
        return LevelResult(1, 200, 0, 1.0, 1.0, 1.0, stats, stats, stats, stats,
                           "/elsewhere/bench-c1.json")

    ev = Evidence({}, {}, LoadResult("client", {}, [lv(base)]),
                  LoadResult("client", {}, [lv(slower)]), "cpu",
                  raw_dirs=(tmp_path / "b", tmp_path / "c"))
    for limit, expected in ((2.0, "pass"), (1.2, "fail"), (1.5, "inconclusive")):
        policy = GatePolicy(latency=[LatencyGate(metric="ttft_p50_ms", max_ratio=limit)],
                            bootstrap_resamples=2000)
        (outcome,) = evaluate_gates(policy, ev, 0)
        assert outcome.status == expected, outcome.detail
    assert outcome.evidence["ratio_interval"][0] < 1.5 < outcome.evidence["ratio_interval"][1]


def test_a_gate_whose_baseline_is_within_its_margin_cannot_pass() -> None:
    """A baseline that gets 1 item in 20 right can lose at most 0.05: inside a 0.15 margin
    even a candidate that answers nothing right would pass. Such a pass is no evidence."""
    policy = GatePolicy(quality=[QualityGate(suite="q", max_drop=0.15, slice_max_drop=0.15,
                                             min_slice_items=10)])
    base = suite_result([1.0] + [0.0] * 39, ["low"] * 20 + ["high"] * 20)
    base_high = suite_result([1.0] + [0.0] * 19 + [1.0] * 20, ["low"] * 20 + ["high"] * 20)
    broken = suite_result([0.0] * 20 + [1.0] * 20, ["low"] * 20 + ["high"] * 20)
    status = {o.gate: o for o in evaluate_gates(
        policy, Evidence({"q": base}, {"q": suite_result([0.0] * 40, ["low"] * 20 +
                                                          ["high"] * 20)}, None, None, "cpu"), 0)}
    whole = status["quality:q"]
    assert whole.status == "inconclusive"  # 0.025 -> 0.000 would have passed -0.15
    assert "a candidate that lost every item would pass" in whole.detail
    assert status["quality:q[low]"].status == "not_applicable"
    assert "nothing to lose" in status["quality:q[low]"].detail
    # the same candidate against a baseline with something to lose is judged as usual
    judged = {o.gate: o.status for o in evaluate_gates(
        policy, Evidence({"q": base_high}, {"q": broken}, None, None, "cpu"), 0)}
    assert judged["quality:q"] == "pass" and judged["quality:q[high]"] == "pass"
    assert judged["quality:q[low]"] == "not_applicable"  # its baseline 0.05 <= 0.15
