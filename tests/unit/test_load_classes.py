"""Several load profiles gated in one run (docs/load.md, "Several load classes"): the
config names them, each profile's load gates judge its own results under its own name, a
profile a gate does not name leaves it not applicable, and a profile one side lacks fails
closed."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import record
from click.testing import CliRunner

from workbench.cli import main
from workbench.config.gate_policy import CapacityGate, GatePolicy, LatencyGate, SLOGate
from workbench.config.load import LoadConfig
from workbench.config.run_config import load_config
from workbench.gate.evidence import Evidence, LoadView
from workbench.gate.gates import decide, evaluate_gates
from workbench.loadtest.results import LevelResult, LoadResult
from workbench.measure.measurement import Measurement
from workbench.measure.pair import with_rounds
from workbench.mechanisms.errors import InputError
from workbench.record.decision import record_metrics
from workbench.record.render import render_markdown
from workbench.serve.engine import ServerInfo

REPO = Path(__file__).resolve().parents[2]
SERVER = ServerInfo("/m", "m", "cpu", [], 1.0, "log")
DEFAULT = REPO / "configs" / "default.yaml"


def level(key: str, tpot: float, attainment: float = 1.0) -> LevelResult:
    stats = {"mean": tpot, "p50": tpot, "p95": tpot, "p99": tpot, "max": tpot}
    slo = {"ttft_p99_ms": 1000.0, "tpot_p99_ms": 100.0, "goodput_rps": attainment,
           "attainment": attainment, "meets_slo": attainment == 1.0}
    return LevelResult(8, 200, 0, 10.0, 20.0, 640.0, stats, stats, stats, stats, "raw",
                       label=key, slo=slo)


def load(name: str, key: str, tpot: float, attainment: float = 1.0) -> LoadResult:
    return LoadResult("client", {}, [level(key, tpot, attainment)], name=name)


def test_a_list_of_profiles_is_the_runs_own_then_the_further_ones() -> None:
    cfg = LoadConfig.model_validate({"profile": ["interactive", "batch"]})
    assert (cfg.profile, cfg.also, cfg.gated) == ("interactive", ["batch"],
                                                  ["interactive", "batch"])
    assert list(cfg.further) == ["batch"] and "batch" in cfg.declared()
    for bad, said in (({"profile": ["interactive", "nope"]}, "unknown load profile 'nope'"),
                      ({"profile": ["batch", "batch"]}, "named twice"),
                      ({"profile": []}, "1 to 4 load profiles, got 0"),
                      ({"profile": ["batch"] * 5}, "1 to 4 load profiles, got 5"),
                      ({"profile": ["batch"], "also": ["interactive"]}, "not both")):
        with pytest.raises(ValueError, match=said):
            LoadConfig.model_validate(bad)


def test_every_gated_profile_must_fit_the_context_and_the_command_line_names_several(
        tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(DEFAULT.read_text().replace("profile: interactive ",
                                               "profile: [interactive, batch] ")
                   .replace("max_model_len: 2048", "max_model_len: 512")
                   .replace("gates: gates/default.yaml",
                            f"gates: {REPO / 'configs' / 'gates' / 'default.yaml'}"))
    with pytest.raises(InputError, match=r"load.profiles.batch: its longest request \(896"):
        load_config(cfg)
    wide = load_config(DEFAULT).with_load_profile("batch,interactive")
    assert wide.load.gated == ["batch", "interactive"] and wide.workload.request_rate
    assert load_config(DEFAULT).with_load_profile("batch").load.also == []
    with pytest.raises(InputError, match="--load-profile 'nope' is not a load profile"):
        load_config(DEFAULT).with_load_profile("interactive,nope")


def test_a_gate_naming_an_unknown_profile_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    gates = tmp_path / "g.yaml"
    gates.write_text("latency:\n  - metric: tpot_p50_ms\n    max_ratio: 2\n"
                     "    profiles: [interactiv]\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(DEFAULT.read_text().replace("gates: gates/default.yaml", f"gates: {gates}"))
    result = CliRunner().invoke(main, ["evaluate", "--config", str(cfg), "--candidate",
                                       "int4", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    assert "latency[0].profiles: 'interactiv' is not a load profile of c.yaml" in result.output
    assert not (tmp_path / "runs").exists()
    result = CliRunner().invoke(main, ["validate", "--config", str(cfg)])
    assert result.exit_code == 2 and "'interactiv' is not a load profile" in result.output


def _evidence(batch_cand: LoadResult | None) -> Evidence:
    return Evidence({}, {}, load("interactive", "c8", 20.0), load("interactive", "c8", 22.0),
                    "cpu", profile="interactive",
                    further={"batch": LoadView(load("batch", "r4", 50.0), batch_cand)})


def test_each_profile_is_judged_on_its_own_results_under_its_own_name() -> None:
    policy = GatePolicy(latency=[LatencyGate(metric="tpot_p50_ms", max_ratio=1.5)],
                        slo=[SLOGate(min_attainment=0.9, profiles=["batch"])])
    # the batch candidate is three times slower and misses its SLO on a third of requests
    outcomes = evaluate_gates(policy, _evidence(load("batch", "r4", 150.0, 2 / 3)), 0)
    status = {o.gate: o.status for o in outcomes}
    assert status["latency:tpot_p50_ms:max_ratio@interactive/c8"] == "pass"  # 1.1
    assert status["latency:tpot_p50_ms:max_ratio@batch/r4"] == "fail"  # 3.0
    assert status["slo@batch/r4"] == "fail"
    assert not any("slo@interactive" in g for g in status)  # the gate names batch only
    assert {o.identity.profile for o in outcomes} == {"interactive", "batch"}
    assert decide(outcomes) == "reject"
    # the same run with a batch candidate as good as its baseline passes both
    fine = evaluate_gates(policy, _evidence(load("batch", "r4", 52.0)), 0)
    assert decide(fine) == "promote", [(o.gate, o.status, o.detail) for o in fine]


def test_a_profile_the_candidate_lacks_fails_closed_and_an_ungated_one_is_not_applicable(
        ) -> None:
    policy = GatePolicy(latency=[LatencyGate(metric="tpot_p50_ms", max_ratio=1.5)])
    missing = {o.gate: o for o in evaluate_gates(policy, _evidence(None), 0)}
    assert missing["latency:tpot_p50_ms:max_ratio@batch"].status == "fail"
    assert "missing" in missing["latency:tpot_p50_ms:max_ratio@batch"].detail
    # a run gating one profile keeps the names it always had; a gate for another profile
    # says it does not apply
    one = Evidence({}, {}, load("interactive", "c8", 20.0), load("interactive", "c8", 22.0),
                   "cpu", profile="interactive")
    policy = GatePolicy(latency=[LatencyGate(metric="tpot_p50_ms", max_ratio=1.5)],
                        capacity=[CapacityGate(min_ratio=0.85, profiles=["batch"])])
    status = {o.gate: (o.status, o.detail) for o in evaluate_gates(policy, one, 0)}
    assert status["latency:tpot_p50_ms:max_ratio@c8"][0] == "pass"
    assert status["capacity:at_slo:min_ratio"] == (
        "not_applicable", "judges load profile(s) batch; this run gates interactive")


def test_a_measurement_keeps_each_profile_with_its_own_rounds() -> None:
    def side(tpot: float) -> Measurement:
        return Measurement("baseline", SERVER, {}, load("interactive", "c8", tpot), 1.0,
                           further_load={"batch": load("batch", "r4", 2 * tpot)})

    joined = with_rounds(side(20.0), [side(21.0), side(22.0)])
    assert [r.levels[0].tpot_ms["p50"] for r in joined.load.all_rounds()] == [20, 21, 22]
    assert [r.levels[0].tpot_ms["p50"] for r in joined.further_load["batch"].all_rounds()] \
        == [40, 42, 44]
    back = Measurement.from_dict(joined.to_dict())
    assert back.further_load["batch"].rounds[1].levels[0].tpot_ms["p50"] == 44
    assert "batch.r4.tpot_p50_ms" in back.metrics() and "r4.tpot_p50_ms" not in back.metrics()
    # a measurement with one profile is stored as before
    assert "further_load" not in Measurement("b", SERVER, {}, load("i", "c1", 1.0),
                                             1.0).to_dict()


def test_decision_md_shows_each_further_profile_with_its_slo_and_cost() -> None:
    rec = record("reject")
    batch = {role: load("batch", "r4", 50.0).to_dict() for role in ("baseline", "candidate")}
    cost = {"price_per_hour": 1.0, "level": "r4", "concurrency": 8,
            "usd_per_million_output_tokens": 0.43, "usd_per_good_request": 0.0001,
            "price_source": "config"}
    rec.further_load = {"batch": {"load": batch,  # type: ignore[typeddict-item]
                                  "cost": {"baseline": cost, "candidate": cost}}}
    md = render_markdown(rec)
    section = md[md.index("## Load profile `batch`"):]
    assert "gates carry `@batch`" in section
    assert "| candidate | r4 | 20.00 |" in section and "SLO: TTFT p99 ≤ 1000 ms" in section
    assert "Cost (candidate, level r4" in section
    assert "## Load profile" not in render_markdown(record("reject"))
    figures = record_metrics(rec)  # MLflow: each profile's cost beside the run's own
    assert figures["candidate.batch.cost.usd_per_million_output_tokens"] == 0.43
    assert "candidate.cost.usd_per_million_output_tokens" in figures
