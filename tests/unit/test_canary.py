"""The rollback trigger: canary-rules.yaml is a rules file Prometheus's own promtool accepts,
and its alerts fire on series from a degraded candidate and stay silent on series like the
measured one (`promtool test rules`, which evaluates them as Prometheus would)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from builders import record

from workbench.gate.evidence import GateId, GateOutcome
from workbench.mechanisms.paths import cache_root
from workbench.record.canary import CANARY_FILE, canary_rules
from workbench.record.decision import DecisionRecord
from workbench.record.render import render_markdown, write_record

SERVED = "m-int4"
# where scripts/setup-tests.sh unpacks it: the user's cache, read before a test's own
# scratch cache replaces it (conftest.py)
PROMTOOL = shutil.which("promtool") or str(cache_root() / "tools" / "promtool")


def promtool() -> str:
    if not Path(PROMTOOL).is_file():
        pytest.skip("promtool is not installed (scripts/setup-tests.sh unpacks Debian's)")
    return PROMTOOL


def canary_record() -> DecisionRecord:
    """A record whose candidate met an SLO of 1 s / 100 ms, whose baseline's p95 TTFT was
    400 ms under a 2.5x latency gate, and which used 30% of its KV cache, preempting none."""
    rec = record("promote")
    load = {**rec.load["candidate"], "name": "interactive",
            "profile": {"slo": {"ttft_p99_ms": 1000.0, "tpot_p99_ms": 100.0}}}
    gate = GateOutcome.of(GateId("latency", "ttft_p95_ms", check="max_ratio", level="c8"),
                          "pass", "ttft_p95_ms 400 -> 410", 2.5, 1.025,
                          {"baseline": 400.0, "candidate": 410.0})
    room = {**rec.headroom["candidate"], "peak_kv_cache_usage": 0.3, "preemptions": 0}
    return replace(rec, load={**rec.load, "candidate": load}, gates=[*rec.gates, gate],
                   headroom={**rec.headroom, "candidate": room},
                   engine={**rec.engine, "candidate_command": [
                       "python", "-m", "vllm", "--served-model-name", SERVED, "--seed", "0"]})


def series(degraded: bool) -> list[dict]:
    """Ten requests a minute for half an hour, as vLLM's /metrics would count them."""
    sel = f'model_name="{SERVED}"'
    ttft_bucket = "5" if degraded else "0.5"  # all first tokens within this bound
    tpot_bucket = "0.25" if degraded else "0.05"
    rows = [(f'vllm:time_to_first_token_seconds_bucket{{{sel},le="{le}"}}',
             "0+10x30" if float(le) >= float(ttft_bucket) else "0+0x30")
            for le in ("0.25", "0.5", "2.5", "5", "+Inf")]
    rows += [(f'vllm:request_time_per_output_token_seconds_bucket{{{sel},le="{le}"}}',
              "0+10x30" if float(le) >= float(tpot_bucket) else "0+0x30")
             for le in ("0.05", "0.1", "0.25", "+Inf")]
    rows += [(f'vllm:request_success_total{{{sel},finished_reason="stop"}}',
              "0+9x30" if degraded else "0+10x30"),
             (f'vllm:request_success_total{{{sel},finished_reason="error"}}',
              "0+1x30" if degraded else "0+0x30"),
             (f"vllm:kv_cache_usage_perc{{{sel}}}", "0.9x30" if degraded else "0.2x30"),
             (f"vllm:num_preemptions_total{{{sel}}}", "0+1x30" if degraded else "0+0x30")]
    return [{"series": name, "values": values} for name, values in rows]


def expected(rec: DecisionRecord, rule: dict) -> dict:
    """An alert as promtool reports it: the rule's labels, and the series' own labels where
    the expression keeps them (a gauge's or counter's, not an aggregate's)."""
    labels = dict(rule["labels"])
    if rule["expr"].startswith(("max_over_time", "increase")):
        labels["model_name"] = SERVED
    return {"exp_labels": labels, "exp_annotations": rule["annotations"]}


def promtool_test(tmp_path: Path, rec: DecisionRecord, degraded: bool
                  ) -> subprocess.CompletedProcess:
    write_record(tmp_path, rec)
    rules = yaml.safe_load((tmp_path / CANARY_FILE).read_text())["groups"][0]["rules"]
    test = {"rule_files": [CANARY_FILE], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series(degraded),
        "alert_rule_test": [{"eval_time": "20m", "alertname": r["alert"],
                             "exp_alerts": [expected(rec, r)] if degraded else []}
                            for r in rules]}]}
    (tmp_path / "canary-test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run([promtool(), "test", "rules", "canary-test.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def test_the_rules_file_is_valid_and_each_threshold_says_where_it_came_from(
        tmp_path: Path) -> None:
    rec = canary_record()
    write_record(tmp_path, rec)
    check = subprocess.run([promtool(), "check", "rules", CANARY_FILE], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 6 rules found" in check.stdout
    text = (tmp_path / CANARY_FILE).read_text()
    assert "# the load profile `interactive`'s SLO ttft_p99_ms: 1000 ms" in text
    # the baseline's 400 ms times the gate's 2.5: one second, in Prometheus's seconds
    assert "# gate latency:ttft_p95_ms:max_ratio@c8: the baseline measured 400.0 ms" in text
    assert f'rate(vllm:time_to_first_token_seconds_bucket{{model_name="{SERVED}"}}[5m]))) > 1' \
        in text
    md = render_markdown(rec)
    assert "## Rollback trigger (`canary-rules.yaml`)" in md
    assert all(f"**{r.alert}**" in md for r in canary_rules(rec))


def test_a_degraded_candidate_fires_every_rule_and_the_measured_one_none(
        tmp_path: Path) -> None:
    rec = canary_record()
    (tmp_path / "degraded").mkdir()
    (tmp_path / "measured").mkdir()
    fired = promtool_test(tmp_path / "degraded", rec, degraded=True)
    assert fired.returncode == 0, fired.stdout + fired.stderr
    quiet = promtool_test(tmp_path / "measured", rec, degraded=False)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr


def test_the_test_fails_when_a_rule_would_not_fire(tmp_path: Path) -> None:
    """promtool's verdict is not a formality: the degraded series against expectations of
    silence fail it."""
    rec = canary_record()
    write_record(tmp_path, rec)
    rules = yaml.safe_load((tmp_path / CANARY_FILE).read_text())["groups"][0]["rules"]
    test = {"rule_files": [CANARY_FILE], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series(True),
        "alert_rule_test": [{"eval_time": "20m", "alertname": rules[0]["alert"],
                             "exp_alerts": []}]}]}
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    wrong = subprocess.run([promtool(), "test", "rules", "wrong.yaml"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0 and "CanaryTtftP99AboveSlo" in wrong.stdout + wrong.stderr
