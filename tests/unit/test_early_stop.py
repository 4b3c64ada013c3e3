"""Stopping a candidate that has already failed (gate/early.py): only a fail that no later
suite can turn back stops it, judged by the code that judges it at the end; an A/A and a
borderline candidate run to the end; the final judgement marks what the stop left out as
not measured, and a stopped candidate can never be promoted."""

from __future__ import annotations

import random
from dataclasses import replace

from workbench.config.gate_policy import GatePolicy, HealthGate, QualityGate
from workbench.gate.early import (
    Decisive,
    EarlyStop,
    decisiveness,
    mark_not_measured,
    past_doubt,
    suite_order,
)
from workbench.gate.evidence import Evidence, GateId, GateOutcome
from workbench.gate.gates import decide, evaluate_gates
from workbench.measure.watch import StoppedEarly
from workbench.suites.results import ItemResult, SuiteResult


def result(name: str, scores: list[float], healthy: list[float] | None = None,
           seconds: float = 10.0) -> SuiteResult:
    """A suite's result: its items' scores, and their health when it generates."""
    items = [ItemResult(f"{name}-{k:03d}", ("all",), "h", f"answer {k}", s, 0.1, 4,
                        checks={"healthy": healthy[k]} if healthy else {})
             for k, s in enumerate(scores)]
    return SuiteResult(name, "1", f"d-{name}", len(items), sum(scores) / len(scores),
                       {"all": {"n": len(items), "accuracy": sum(scores) / len(scores)}},
                       "f", items, generates=healthy is not None, seconds=seconds)


def flipped(r: SuiteResult, share: float, seed: int = 0, to: float = 0.0,
            health: bool = False) -> SuiteResult:
    """The result with a share of its right items (or its healthy ones) turned wrong."""
    rng = random.Random(seed)
    items = []
    for i in r.items:
        if rng.random() < share:
            i = replace(i, checks={**i.checks, "healthy": to}) if health else replace(i, score=to)
        items.append(i)
    return replace(r, items=items, accuracy=sum(i.score for i in items) / len(items))


POLICY = GatePolicy(
    quality=[QualityGate(suite="arithmetic", max_drop=0.05),
             QualityGate(suite="multilingual", max_drop=0.05),
             QualityGate(suite="long", max_drop=0.10)],
    health=HealthGate(max_drop=0.10, pooled_max_drop=0.03),
    bootstrap_resamples=2000).for_look(2)


def baseline() -> dict[str, SuiteResult]:
    rng = random.Random(1)
    return {
        "arithmetic": result("arithmetic", [float(rng.random() < 0.6) for _ in range(200)],
                             [1.0] * 200, seconds=20),
        "multilingual": result("multilingual", [float(rng.random() < 0.3) for _ in range(300)],
                               [1.0] * 300, seconds=100),
        "long": result("long", [float(rng.random() < 0.9) for _ in range(100)],
                       [1.0] * 100, seconds=90),
    }


def watch(base: dict[str, SuiteResult]) -> EarlyStop:
    return EarlyStop(POLICY, base, "cpu", 0, 1, lambda _name, r: r, lambda _measured: {})


RUNS = [(None, "arithmetic", False), (None, "multilingual", False), (None, "long", False)]


def test_a_candidate_that_lost_a_suite_is_stopped_after_it() -> None:
    base = baseline()
    broken = flipped(flipped(base["arithmetic"], 0.5, to=0.0), 0.5, seed=2, health=True)
    stop = watch(base).after({"arithmetic": broken}, ["multilingual", "long"])
    assert stop is not None and stop.after == "arithmetic"
    assert "quality:arithmetic" in stop.gates and "health:arithmetic" in stop.gates
    assert stop.not_measured == ["multilingual", "long"] and stop.load_not_measured
    assert "tests: p <=" in stop.level


def test_an_aa_candidate_is_never_stopped() -> None:
    base = baseline()
    w = watch(base)
    done: dict[str, SuiteResult] = {}
    for name in ("arithmetic", "multilingual", "long"):
        done[name] = base[name]
        assert w.after(dict(done), []) is None


def test_a_fail_at_the_margin_is_left_for_the_end() -> None:
    """A loss that fails when only its own suite is judged (Holm over the few tests there
    are so far) but not at alpha over every planned test: the end might turn it back, so
    it does not stop the run."""
    base = baseline()
    w = watch(base)
    for share in (0.16, 0.18, 0.2, 0.22):
        cand = flipped(base["arithmetic"], share, seed=5)
        so_far = [o for o in evaluate_gates(POLICY, Evidence(base, {"arithmetic": cand},
                                                             None, None, "cpu"), 0)
                  if o.gate == "quality:arithmetic"][0]
        if so_far.status == "fail" and so_far.evidence["p_fail"] > w._bound:
            assert w.after({"arithmetic": cand}, ["multilingual", "long"]) is None
            return
    raise AssertionError("no share of lost items gave a fail at the margin")


def test_what_stops_early_fails_at_the_end_too() -> None:
    """The stop's gates, judged again with every suite measured (the later ones fine), still
    fail after Holm's adjustment: no later suite turned them back."""
    base = baseline()
    broken = flipped(base["arithmetic"], 0.5, to=0.0)
    stop = watch(base).after({"arithmetic": broken}, ["multilingual", "long"])
    assert stop is not None
    final = evaluate_gates(POLICY, Evidence(base, {**base, "arithmetic": broken}, None, None,
                                            "cpu"), 0)
    assert {o.gate for o in final if o.status == "fail"} >= set(stop.gates)


def test_pooled_and_load_gates_never_stop_a_run() -> None:
    pooled = GateOutcome.of(GateId("health", "(pooled)"), "fail", "x", evidence={"p_fail": 0.0})
    latency = GateOutcome.of(GateId("latency", "tpot_p50_ms", check="max_ratio"), "fail", "x")
    fidelity = GateOutcome.of(GateId("fidelity", "heldout", check="kl_mean"), "fail", "x")
    info = replace(fidelity, informational=True)
    measured = {"heldout", "(pooled)"}
    assert not past_doubt(pooled, measured, 1.0) and not past_doubt(latency, measured, 1.0)
    assert past_doubt(fidelity, measured, 1e-9) and not past_doubt(info, measured, 1.0)
    assert not past_doubt(fidelity, set(), 1.0)  # its suite not measured: not decided


def test_the_cheapest_decisive_suite_runs_first_and_ungated_ones_last() -> None:
    base = baseline()
    base["ungated"] = result("ungated", [1.0] * 10, seconds=1)
    planned = evaluate_gates(POLICY, Evidence(base, base, None, None, "cpu"), 0)
    runs = [*RUNS, (None, "ungated", False)]
    order = [name for _, name, _ in suite_order(runs, base, planned)]  # type: ignore[arg-type]
    assert order == ["arithmetic", "long", "multilingual", "ungated"]


def test_the_final_judgement_says_what_was_not_measured_and_never_promotes() -> None:
    base = baseline()
    stop = StoppedEarly("arithmetic", ["quality:arithmetic"], ["lost"], "alpha", ["long"])
    outcomes = [GateOutcome.of(GateId("quality", "arithmetic"), "fail", "lost"),
                GateOutcome.of(GateId("quality", "long"), "fail", "results missing"),
                GateOutcome.of(GateId("health", "(pooled)"), "pass", "over a part"),
                GateOutcome.of(GateId("latency", "tpot_p50_ms"), "fail", "no load")]
    marked = mark_not_measured(outcomes, stop, base, POLICY.health)
    status = {o.gate: o.status for o in marked}
    assert status == {"quality:arithmetic": "fail", "quality:long": "not_measured",
                      "health:(pooled)": "not_measured", "latency:tpot_p50_ms": "not_measured",
                      "health:long": "not_measured"}
    assert "stopped after arithmetic" in marked[1].detail
    assert decide(marked) == "reject"
    passed = [replace(o, status="pass") if o.status == "fail" else o for o in marked]
    assert decide(passed) == "inconclusive"  # re-judged under a laxer policy: still no promote
    assert decide(passed, inconclusive_blocks=False) == "inconclusive"
    assert mark_not_measured(outcomes, None, base, POLICY.health) == outcomes


def test_a_stop_after_a_suite_that_generates_nothing_leaves_health_not_measured() -> None:
    """Stopped after a multiple-choice suite, the judgement sees no generating suite
    measured; the health gates of those left out, and their pooled one, are not measured,
    not "not applicable"."""
    base = baseline()
    base["choice"] = result("choice", [1.0] * 40)
    stop = StoppedEarly("choice", ["quality:choice"], ["lost"], "alpha",
                        ["arithmetic", "multilingual", "long"])
    outcomes = [GateOutcome.of(GateId("quality", "choice"), "fail", "lost"),
                GateOutcome.of(GateId("health"), "not_applicable", "no suite generates")]
    status = {o.gate: o.status for o in mark_not_measured(outcomes, stop, base, POLICY.health)}
    assert status == {"quality:choice": "fail", "health:arithmetic": "not_measured",
                      "health:multilingual": "not_measured", "health:long": "not_measured",
                      "health:(pooled)": "not_measured"}


def aa_candidate(base: dict[str, SuiteResult], seed: int) -> dict[str, SuiteResult]:
    """The same model served again: a few items flip either way, at the same rate, in
    score and in health alike (greedy decoding differs by a token now and then)."""
    rng = random.Random(seed)
    share = rng.uniform(0.0, 0.06)
    out = {}
    for name, r in base.items():
        items = []
        for i in r.items:
            if rng.random() < share:
                i = replace(i, score=1.0 - i.score)
            if rng.random() < share / 2:
                i = replace(i, checks={**i.checks, "healthy": 1.0 - i.checks["healthy"]})
            items.append(i)
        out[name] = replace(r, items=items, accuracy=sum(i.score for i in items) / len(items))
    return out


def test_no_aa_is_stopped_over_many_seeds() -> None:
    """The property the rule must keep: a candidate that is the baseline again, up to
    symmetric noise, is never stopped, whatever the seed and whichever suite comes first."""
    base = baseline()
    for seed in range(60):
        w = watch(base)  # one watch a run: it keeps the candidate's comparisons
        cand = aa_candidate(base, seed)
        order = list(cand)
        random.Random(seed).shuffle(order)
        done: dict[str, SuiteResult] = {}
        for k, name in enumerate(order):
            done[name] = cand[name]
            assert w.after(dict(done), order[k + 1:]) is None, (seed, name)


def test_peak_memory_without_its_load_test_is_not_measured_but_static_figures_are_judged(
        ) -> None:
    """A stopped candidate's peak memory was sampled without the load test its baseline's
    ran under: not comparable, so not measured; its weights and KV pool are its own."""
    stop = StoppedEarly("arithmetic", ["quality:arithmetic"], ["lost"], "alpha", [])
    outcomes = [GateOutcome.of(GateId("quality", "arithmetic"), "fail", "lost"),
                GateOutcome.of(GateId("memory", "peak_engine_rss_bytes", check="max_ratio"),
                               "pass", "x"),
                GateOutcome.of(GateId("memory", "weights_bytes", check="max_ratio"),
                               "pass", "x")]
    status = {o.gate: o.status for o in mark_not_measured(outcomes, stop, baseline(), None)}
    assert status == {"quality:arithmetic": "fail",
                      "memory:peak_engine_rss_bytes:max_ratio": "not_measured",
                      "memory:weights_bytes:max_ratio": "pass"}


def test_a_cached_stopped_candidate_is_stopped_again_only_where_the_watch_still_stops_it(
        ) -> None:
    """A pair cached from a stopped run is reused stopped only where this run's watch (its
    policy now) stops it on the same suites; otherwise, and under --measure-all, it is
    completed."""
    from workbench.measure.measurement import Measurement
    from workbench.measure.pair import _still_stopped
    from workbench.serve.engine import ServerInfo

    base = baseline()
    broken = flipped(base["arithmetic"], 0.5, to=0.0)
    old = StoppedEarly("arithmetic", ["quality:arithmetic"], ["lost"], "old level",
                       ["multilingual", "long"])

    def side(role: str, suites: dict[str, SuiteResult], stopped: StoppedEarly | None
             ) -> Measurement:
        return Measurement(role, ServerInfo.__new__(ServerInfo), suites, None,  # type: ignore[arg-type]
                           0.0, stopped=stopped)

    class Plan:
        suites = [type("S", (), {"spec": type("Spec", (), {
            "runs": staticmethod(lambda name=name: [(name, False)])})()})()
            for name in ("arithmetic", "multilingual", "long")]

    hit = (side("baseline", base, None), side("candidate", {"arithmetic": broken}, old))
    again = _still_stopped(Plan(), hit, watch)  # type: ignore[arg-type]
    assert again is not None and again.stopped is not None
    assert again.stopped.level != "old level" and again.stopped.not_measured == [
        "multilingual", "long"]
    assert _still_stopped(Plan(), hit, None) is None  # type: ignore[arg-type]
    lax = GatePolicy(quality=[QualityGate(suite="arithmetic", max_drop=0.9)])
    assert _still_stopped(Plan(), hit, lambda b: EarlyStop(  # type: ignore[arg-type]
        lax, b, "cpu", 0, 1, lambda _n, r: r, lambda _m: {})) is None
    whole = (hit[0], side("candidate", base, None))
    assert _still_stopped(Plan(), whole, watch) is whole[1]  # type: ignore[arg-type]


def test_a_suite_that_often_decided_earlier_runs_goes_first() -> None:
    """History from earlier records: multilingual failed all five runs, arithmetic none;
    per second of the baseline's time multilingual (100 s) now decides more often than
    arithmetic (20 s), while long (90 s, no history) keeps its even chance."""
    base = baseline()
    planned = evaluate_gates(POLICY, Evidence(base, base, None, None, "cpu"), 0)
    records = [{"gates": [
        {"gate": "quality:multilingual", "status": "fail"},
        {"gate": "health:multilingual", "status": "pass"},
        {"gate": "quality:arithmetic", "status": "pass"},
        {"gate": "quality:arithmetic[digits]", "status": "inconclusive"},
        {"gate": "quality:long", "status": "not_measured"},  # a stopped run: no evidence
        {"gate": "health:(pooled)", "status": "fail"},  # every suite's: none of them alone
    ]} for _ in range(5)]
    history = decisiveness(records)
    assert history == {"multilingual": Decisive(5, 5), "arithmetic": Decisive(5, 0)}
    order = [name for _, name, _ in suite_order(RUNS, base, planned, history)]  # type: ignore[arg-type]
    assert order == ["multilingual", "arithmetic", "long"]
    assert [name for _, name, _ in suite_order(RUNS, base, planned)] == [  # type: ignore[arg-type]
        "arithmetic", "long", "multilingual"]


def test_the_judgement_does_not_depend_on_the_order_the_suites_ran_in() -> None:
    """The candidate's results gathered in another order (the watch's, not the config's)
    are judged alike: every gate, its status, detail and interval."""
    base = baseline()
    cand = {"long": flipped(base["long"], 0.1, seed=3),
            "arithmetic": flipped(base["arithmetic"], 0.2, seed=4, health=True),
            "multilingual": flipped(base["multilingual"], 0.05, seed=6)}
    ordered = evaluate_gates(POLICY, Evidence(base, cand, None, None, "cpu"), 0)
    reordered = evaluate_gates(POLICY, Evidence(base, dict(reversed(list(cand.items()))),
                                                None, None, "cpu"), 0)
    key = sorted((o.gate, o.status, o.detail) for o in ordered)
    assert key == sorted((o.gate, o.status, o.detail) for o in reordered)
    assert any(o.status == "fail" for o in ordered)  # something to agree about


def test_history_reads_stored_ids_and_passes_over_what_is_not_a_record() -> None:
    """A suite whose name holds a dot is read by the id the record stores; a file that is
    valid JSON but no record, and a gate that is no object, are passed over."""
    records = [None, [], {"gates": None}, {"gates": [1, "x"]},
               {"gates": [{"gate": "quality:arith.v2", "status": "fail",
                           "id": {"section": "quality", "subject": "arith.v2"}}]}]
    assert decisiveness(records) == {"arith.v2": Decisive(1, 1)}  # type: ignore[arg-type]
