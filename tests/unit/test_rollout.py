"""The Rollout section (issue 38): the twelve things a serving decision states, each from
what the run measured or configured, the team's `rollout:` section, or "not declared"; the
fleet for a declared peak from each model's capacity at the SLO; bad `rollout:` values
refused up front, naming the key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from builders import record

from workbench.config.rollout import RolloutConfig
from workbench.config.run_config import load_config
from workbench.mechanisms.errors import InputError
from workbench.record.decision import DecisionRecord
from workbench.record.render import render_markdown
from workbench.record.rollout import FIELDS, NOT_DECLARED, rollout_rejudged, rollout_section

REPO = Path(__file__).resolve().parents[2]
DECLARED = RolloutConfig(peak_requests_per_s=10, routing="5% of traffic by header, then 50%",
                         fallback="the baseline deployment", security=["API key at the gateway",
                                                                       "no prompt logging"],
                         telemetry="Prometheus at prom.internal", recovery_objective="10 min")


def with_capacity(rec: DecisionRecord, role: str, served_rps: float | None) -> DecisionRecord:
    """The record as a capacity search leaves it: the heaviest arrival rate that held the
    SLO, and the requests per second served within it there."""
    cap = {"knob": "request_rate", "held": 2.0, "not_held": 2.5, "request_throughput":
           served_rps} if served_rps else {}
    return replace(rec, load={**rec.load, role: {**rec.load[role], "capacity": cap}})


def test_nothing_declared_says_so_and_everything_measured_is_filled() -> None:
    section = rollout_section(record("promote"), RolloutConfig())
    assert tuple(section["fields"]) == FIELDS  # twelve, in the order decision.md shows them
    for key in ("routing_and_fallback", "security", "telemetry"):
        assert section["fields"][key] == {"text": NOT_DECLARED, "source": NOT_DECLARED}
    for key in ("model_and_precision", "cache", "rollback_trigger"):
        assert section["fields"][key]["source"] == "measured"
    assert section["replicas"]["candidate"]["replicas"] is None
    assert "no peak traffic declared" in section["replicas"]["candidate"]["why"]
    assert "canary-rules.yaml" in section["fields"]["rollback_trigger"]["text"]


def test_a_declared_peak_becomes_a_fleet_from_the_pessimistic_capacity() -> None:
    rec = with_capacity(with_capacity(record("promote"), "candidate", 1.8), "baseline", None)
    section = rollout_section(rec, DECLARED)
    cand, base = section["replicas"]["candidate"], section["replicas"]["baseline"]
    # 10 requests/s over the 1.8 a replica served within the SLO: 6 replicas (5 would not)
    assert cand["capacity_rps"] == 1.8 and cand["replicas"] == 6
    assert cand["fleet_price_per_hour"] == pytest.approx(6 * rec.cost["candidate"]
                                                         ["price_per_hour"])
    assert base["replicas"] is None and "--load-profile capacity" in base["why"]
    fields = section["fields"]
    assert "6 replicas of the candidate" in fields["device_and_replicas"]["text"]
    assert fields["routing_and_fallback"] == {
        "text": "routing: 5% of traffic by header, then 50%; fallback: the baseline deployment",
        "source": "declared"}
    assert fields["security"]["text"] == "API key at the gateway; no prompt logging"
    assert "recovery objective: 10 min" in fields["rollback_trigger"]["text"]


def test_cost_is_written_as_its_formula_over_accepted_tokens() -> None:
    rec = record("promote")
    level = {**rec.load["candidate"]["levels"][0],
             "slo": {"meets_slo": True, "goodput_rps": 1.0, "good_output_throughput": 40.0}}
    cost = {**rec.cost["candidate"], "level": level["label"], "devices": 2,
            "price_per_device_hour": 0.5, "usd_per_million_accepted_tokens": 6.9444}
    rec = replace(rec, load={**rec.load, "candidate": {**rec.load["candidate"],
                                                       "levels": [level]}},
                  cost={**rec.cost, "candidate": cost})
    text = rollout_section(rec, RolloutConfig())["fields"]["cost_formula"]["text"]
    assert "price per device-hour × devices ÷ 3600 ÷ accepted output tokens per second" in text
    assert "= 0.5 × 2 ÷ 3600 ÷ 40 × 10^6 = $6.9444" in text
    # without accepted tokens recorded (an older measurement) the formula stands, unvalued
    assert "not computed" in rollout_section(record("promote"), RolloutConfig())[
        "fields"]["cost_formula"]["text"]


def test_decision_md_shows_the_section_with_its_sources() -> None:
    rec = record("promote")
    rec.rollout = rollout_section(rec, DECLARED)
    md = render_markdown(rec)
    table = md[md.index("## Rollout"):].split("\n\n")[1]
    assert len(table.splitlines()) == 2 + len(FIELDS)
    assert "| Routing and fallback | routing: 5% of traffic by header" in table
    assert "| Telemetry | Prometheus at prom.internal | declared |" in table


@pytest.mark.parametrize(("value", "why"), [
    ("{peak_requests_per_s: 0}", "rollout.peak_requests_per_s: Input should be greater than 0"),
    ("{routing: ''}", "rollout.routing"),
    ("{canary_share: 5}", "rollout.canary_share: unknown key"),
])
def test_bad_rollout_values_name_the_key(tmp_path: Path, value: str, why: str) -> None:
    bad = tmp_path / "bad.yaml"
    text = (REPO / "configs" / "default.yaml").read_text()
    bad.write_text(text.replace("gates: gates/default.yaml", f"rollout: {value}\ngates: "
                                f"{REPO}/configs/gates/default.yaml"))
    with pytest.raises(InputError) as err:
        load_config(bad)
    assert why in str(err.value) and str(bad) in str(err.value)


def test_a_regated_record_rebuilds_the_section_from_what_was_declared() -> None:
    rec = record("promote")
    rec.rollout = rollout_section(rec, DECLARED)
    rejudged = replace(rec, decision="reject")
    section = rollout_rejudged(rejudged)
    assert section is not None and section["declared"] == DECLARED.model_dump()
    assert "decision reject" in section["fields"]["quality_threshold"]["text"]
    assert section["fields"]["telemetry"]["text"] == "Prometheus at prom.internal"
    assert rollout_rejudged(record("promote")) is None  # an older record gets none
