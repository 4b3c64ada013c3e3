import json
from pathlib import Path

from builders import record

from workbench.gate.evidence import GateOutcome
from workbench.record.render import write_record


def test_record_json_carries_decision_exit_code_and_gates(tmp_path: Path) -> None:
    json_path, md_path = write_record(tmp_path, record("promote"))
    data = json.loads(json_path.read_text())
    assert data["decision"] == "promote" and data["exit_code"] == 0
    assert data["gates"][0]["status"] == "pass" and data["schema_version"] == 16
    md = md_path.read_text()
    assert md.startswith("# Decision: **PROMOTE**")
    assert "| `quality:arithmetic` | PASS |" in md
    assert "Reused from cache: baseline results." in md


def test_reject_and_inconclusive_exit_1(tmp_path: Path) -> None:
    assert record("reject").exit_code == 1
    assert record("inconclusive").exit_code == 1


def test_nothing_reused_says_nothing(tmp_path: Path) -> None:
    rec = record("reject")
    rec.reused = {"baseline_results": False, "quantized_artifact": False}
    _, md_path = write_record(tmp_path, rec)
    assert "Reused from cache" not in md_path.read_text()


def test_console_table_keeps_slice_names(tmp_path: Path) -> None:
    from rich.console import Console

    from workbench.record.render import print_decision

    rec = record("reject")
    rec.gates = [GateOutcome("quality:arithmetic[one-digit]", "fail", "delta [-0.6, -0.3]")]
    console = Console(record=True, width=200)
    print_decision(rec, console)
    text = console.export_text()
    assert "quality:arithmetic[one-digit]" in text and "[-0.6, -0.3]" in text


def test_safety_and_structured_suites_get_their_own_tables_with_metrics(tmp_path: Path) -> None:
    rec = record("reject")
    harmful = {"n": 40, "kind": "safety", "accuracy": 0.1,
               "slices": {"harmful": {"n": 40, "accuracy": 0.1}}, "metrics": {"refusal_rate": 0.1}}
    guided = {"n": 30, "kind": "structured", "accuracy": 0.4, "slices": {},
              "metrics": {"parses": 0.9, "schema_valid": 0.9, "fields_correct": 0.6}}
    paired = {"n": 40, "baseline": 0.1, "candidate": 0.05, "delta": -0.05, "ci_low": -0.125,
              "ci_high": 0.025, "flips_to_wrong": 3, "flips_to_right": 1, "mcnemar_p": 0.625}
    rec.suites["advbench"] = {"baseline": harmful, "candidate": {**harmful, "accuracy": 0.05},
                              "flips": {"paired": 40, "to_wrong": 3, "to_right": 1},
                              "comparison": {"(all)": paired, "harmful": paired}}
    rec.suites["bfcl-simple-guided"] = {"baseline": guided, "candidate": guided}
    _, md_path = write_record(tmp_path, rec)
    md = md_path.read_text()
    assert "## Safety (score: right behaviour" in md
    assert ("| advbench | (all) | 40 | 0.100 | 0.050 | -0.050 [-0.125, +0.025] | 3 / 1 | "
            "0.625 |") in md
    assert "| advbench | harmful | 40 |" in md  # every slice, gated or not
    assert "| advbench | refusal_rate | 0.100 | 0.100 |" in md
    assert "## Structured output" in md and "| bfcl-simple-guided | schema_valid | 0.900 |" in md
    quality = md.split("## Quality")[1].split("## Safety")[0]
    assert "advbench" not in quality


def test_metric_names_are_made_acceptable_to_mlflow() -> None:
    from workbench.tracking.tracker import metric_name

    assert metric_name("baseline.bfcl.params-3+.accuracy") == "baseline.bfcl.params-3_.accuracy"
    assert metric_name("candidate.x.lang:fr/ok") == "candidate.x.lang:fr/ok"
    assert metric_name("baseline.x.lang:日本") == "baseline.x.lang:__"


def test_load_section_shows_both_boundaries_slo_cost_and_headroom(tmp_path: Path) -> None:
    rec = record("promote")
    stats = {"p50": 100.0, "p95": 150.0, "p99": 160.0, "count": 10}
    for who in ("baseline", "candidate"):
        lv = dict(rec.load[who]["levels"][0])  # the fixture shares one level dict
        rec.load[who] = {"levels": [lv]}
        lv["server"] = {"latency": {"ttft_ms": stats, "tpot_ms": stats}}
        lv["slo"] = {"ttft_p99_ms": 1000, "tpot_p99_ms": 100, "meets_slo": who == "baseline",
                     "goodput_rps": 1.5, "attainment": 0.9}
    room = {"weights_bytes": 270 * 2**20, "kv_cache_dtype": "auto", "kv_cache_tokens": 93184,
            "kv_cache_blocks": 728, "block_size": 128, "max_concurrent_sequences": 728,
            "peak_kv_cache_usage": 0.11, "peak_engine_rss_bytes": 2**30,
            "peak_gpu_memory_bytes": 0, "preemptions": 0}
    rec.headroom = {"baseline": room, "candidate": {**room, "kv_cache_dtype": "fp8",
                                                    "kv_cache_tokens": 186368}}
    rec.cost = {"baseline": {"price_per_hour": 0.1, "concurrency": 1,
                             "usd_per_million_output_tokens": 0.52,
                             "usd_per_good_request": 0.00002, "price_source": "config"},
                "candidate": {"price_per_hour": 0.1, "concurrency": None}}
    rec.engine["cold_start"] = {"baseline": {"healthy_s": 30.0, "first_token_s": 31.2}}
    _, md_path = write_record(tmp_path, rec)
    md = md_path.read_text()
    assert "| 100.0 / 160.0 | 100.0 / 160.0 |" in md  # server-side TTFT and TPOT columns
    assert "| baseline | c1 | 4.00 | – / 50.0 / – | 0 | 80.0 / 19.0 / 20.0 | 16.0 / 19.0 |" in md
    assert "SLO: TTFT p99 ≤ 1000 ms, TPOT p99 ≤ 100 ms." in md
    assert "read TPOT and ITL from the server-side columns" in md  # a CPU run
    assert "| baseline | c1 | yes | 1.500 | 0.90 |" in md and "| candidate | c1 | no |" in md
    assert "$0.52 per million output tokens" in md
    assert "Cost (candidate): no load level met the SLO." in md
    assert "| KV cache capacity | 93,184 tokens | 186,368 tokens |" in md
    assert "| KV cache blocks × block size | 728 × 128 | 728 × 128 |" in md
    assert "baseline 30.0 s / 31.2 s" in md


def test_junit_has_one_case_per_gate_and_summary_lists_what_held_the_release(
        tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    from workbench.record.render import render_summary, write_junit

    rec = record("reject")
    rec.gates = [GateOutcome("quality:arithmetic", "pass", "delta +0.000", -0.05, 0.0),
                 GateOutcome("safety:advbench", "fail", "0.9 -> 0.5", -0.1, -0.4),
                 GateOutcome("quality:arithmetic[tiny]", "not_applicable", "too small"),
                 GateOutcome("slo@c8", "inconclusive", "borderline")]
    root = ET.parse(write_junit(rec, tmp_path / "j.xml")).getroot()
    assert root.get("tests") == "4" and root.get("failures") == "2"  # inconclusive blocks
    names = [c.get("name") for c in root.findall("testcase")]
    assert names == [g.gate for g in rec.gates]
    assert root.findall("testcase")[1].find("failure").get("type") == "fail"
    rec.policy = {"inconclusive_blocks": False}
    assert ET.parse(write_junit(rec, tmp_path / "j2.xml")).getroot().get("failures") == "1"
    summary = render_summary(rec)
    assert "**REJECT**" in summary and "exit code 1" in summary
    assert summary.index("safety:advbench") < summary.index("slo@c8")  # worst first
    assert "quality:arithmetic`" not in summary  # a pass is only counted


def test_decision_md_lists_failures_first_and_states_the_false_fail_bound(
        tmp_path: Path) -> None:
    from workbench.config.gate_policy import GatePolicy
    from workbench.gate.verdict import policy_summary

    rec = record("reject")
    rec.gates = [GateOutcome("quality:arithmetic", "pass", "ok",
                             evidence={"mcnemar_p": 1.0, "p_fail": 1.0}),
                 GateOutcome("quality:arithmetic[add]", "pass", "ok",
                             evidence={"mcnemar_p": 1.0, "p_fail": 1.0}),
                 GateOutcome("memory:kv_cache_tokens:min_ratio", "fail", "fewer tokens")]
    policy_file = tmp_path / "p.yaml"
    policy_file.write_text("confidence: 0.95\n")
    rec.policy = policy_summary(GatePolicy(multiple_comparisons="none"), policy_file, rec.gates)
    assert rec.policy["paired_tests"] == 2 and rec.policy["family_false_fail_bound"] == 0.05
    holm = policy_summary(GatePolicy(), policy_file, rec.gates)  # the default: Holm
    assert holm["family_false_fail_bound"] == 0.025
    _, md = write_record(tmp_path, rec)
    text = md.read_text()
    assert text.index("memory:kv_cache_tokens") < text.index("`quality:arithmetic`")
    assert "at most 5.0%" in text and "Holm" in text


def test_the_published_schema_matches_the_record_types_and_a_record_validates(
        tmp_path: Path) -> None:
    import jsonschema
    import pytest

    from workbench.record.schema import SCHEMA_FILE, decision_schema, validate_record

    # `python -m workbench.record.schema` rewrites the file when the types change
    assert json.loads(SCHEMA_FILE.read_text()) == decision_schema()
    json_path, _ = write_record(tmp_path, record("promote"))
    validate_record(json.loads(json_path.read_text()))
    broken = json.loads(json_path.read_text())
    broken["decision"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        validate_record(broken)


# Where the record holds a shape the workbench does not own: configuration echoed back as
# written (its schema is the config's), llm-compressor's own report, and each gate's
# evidence, whose keys depend on the gate kind (docs/gates.md).
FREE_FORM = {"/$defs/EngineSection/properties/config", "/$defs/LoadResult/properties/profile",
             "/$defs/QuantizationSection/properties/recipe",
             "/$defs/QuantizationSection/properties/scheme_summary",
             "/$defs/GateOutcome/properties/evidence"}


def _bare_objects(node: object, path: str = "") -> list[str]:
    """Places in a schema that accept any object: no properties, no typed values."""
    found = []
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" not in node and \
                node.get("additionalProperties") in (None, True):
            found.append(path)
        for key, value in node.items():
            found += _bare_objects(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _bare_objects(value, f"{path}[{i}]")
    return found


def test_the_schema_describes_every_section_below_the_top_level() -> None:
    import jsonschema
    import pytest

    from workbench.record.schema import decision_schema, validate_record

    schema = decision_schema()
    assert set(_bare_objects(schema)) == FREE_FORM
    for section in ("model", "device", "suites", "load", "engine", "headroom", "cost",
                    "fidelity", "policy", "sampling", "quantization", "mlflow"):
        assert "$ref" in json.dumps(schema["properties"][section]), section
    data = record("reject").to_dict()
    validate_record(json.loads(json.dumps(data, default=str)))
    # a section of the wrong shape deep inside is now refused by the schema itself
    for damage in (lambda d: d["load"]["baseline"]["levels"][0].update(ttft_ms="fast"),
                   lambda d: d["suites"]["arithmetic"]["baseline"].update(n="ten"),
                   lambda d: d["cost"]["candidate"].update(level=3),
                   lambda d: d["headroom"]["baseline"].pop("kv_cache_tokens"),
                   lambda d: d["load"].update(candidate=None)):
        broken = json.loads(json.dumps(data, default=str))
        damage(broken)
        with pytest.raises(jsonschema.ValidationError):
            validate_record(broken)


def test_decision_md_shows_generation_health_safety_kinds_and_agreement(tmp_path: Path) -> None:
    rec = record("reject")
    metrics = {"health_rate": 0.9, "degenerate_share": 0.1, "refusal_rate": 0.2,
               "refusal_rate_healthy": 0.22, "off_topic_rate": 0.05}
    looping = {**metrics, "health_rate": 0.4, "degenerate_share": 0.6, "refusal_rate": 0.05,
               "refusal_rate_healthy": 0.125}
    side = {"n": 40, "kind": "safety", "accuracy": 0.2, "slices": {}}
    paired = {"n": 40, "baseline": 0.9, "candidate": 0.4, "delta": -0.5, "ci_low": -0.65,
              "ci_high": -0.35, "flips_to_wrong": 20, "flips_to_right": 0, "mcnemar_p": 1e-6}
    rec.suites["advbench"] = {
        "baseline": {**side, "metrics": metrics,
                     "health": {"n": 40, "healthy": 0.9, "degenerate": {"looping": 4}}},
        "candidate": {**side, "metrics": looping,
                      "health": {"n": 40, "healthy": 0.4,
                                 "degenerate": {"empty": 2, "looping": 22}}},
        "health_comparison": {"(all)": paired}}
    rec.fidelity = {"heldout-text": {
        "tokens": 100, "kl_mean": 0.2, "kl_p95": 0.5, "top1_agreement": 0.7,
        "baseline_perplexity": 12.0, "candidate_perplexity": 14.0,
        "agreement": {"items": 16, "tokens": 32, "identical_share": 0.25,
                      "prefix_agreement": 0.5, "first_divergence_p10": 2,
                      "first_divergence_p50": 11, "first_divergence_mean": 14.0, "slices": {}}}}
    _, md_path = write_record(tmp_path, rec)
    md = md_path.read_text()
    assert ("| advbench | 40 | 0.900 → 0.400 | -0.500 [-0.650, -0.350] | 20 / 0 | "
            "2 empty, 22 looping | 4 looping |") in md
    assert "| advbench | 0.220 → 0.125 | 0.050 → 0.050 | 0.100 → 0.600 |" in md
    assert "| heldout-text | (all) | 16 | 32 | 0.250 | 0.500 | 2 / 11 |" in md


def test_an_informational_gate_is_counted_apart_everywhere(tmp_path: Path) -> None:
    from workbench.record.decision import gate_counts
    from workbench.tracking.run_log import run_name

    rec = record("promote")
    rec.gates = [GateOutcome("quality:arithmetic", "pass", "ok"),
                 GateOutcome("latency:tpot_p50_ms:max_ratio@c1", "fail", "2.4x",
                             informational=True)]
    assert gate_counts(rec) == "1 pass, 1 informational"
    assert run_name(rec).endswith("promote · 1 gates passed")
    _, md = write_record(tmp_path, rec)
    assert "| FAIL (informational) |" in md.read_text()
