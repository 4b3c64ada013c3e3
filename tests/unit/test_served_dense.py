"""A candidate served as its weights dequantised (int4 where the engine has no int4 kernel:
quantize/formats.py) is judged on its quality only: no latency, throughput, capacity or
memory gate ever passes on the dense model's figures, which are not the candidate's own;
the decision never promotes on them, and the record, decision.md, the CI summary and the
MLflow tags say so (gate/served.py, record/policy_text.py, tracking/run_log.py)."""

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from builders import record, suite_result
from click.testing import CliRunner

from workbench.cli import main
from workbench.gate.evidence import GateId, GateOutcome
from workbench.gate.gates import decide
from workbench.gate.served import NOT_OWN_SECTIONS, decided_here, mark_not_own
from workbench.loadtest.results import LoadResult
from workbench.measure.measurement import MEASUREMENT_FILE, Measurement
from workbench.mechanisms.digests import model_file_digests
from workbench.quantize.build import QuantizeResult
from workbench.quantize.formats import NO_INT4_KERNEL, DenseServing
from workbench.record.migrate import migrate
from workbench.record.render import render_markdown, render_summary, write_record
from workbench.record.sections import ServedDenseJson
from workbench.serve.engine import ServerInfo
from workbench.sweep.report import render_sweep
from workbench.sweep.table import SweepRecord, SweepRow, rank, row_of
from workbench.tracking.run_log import served_tags

DENSE = DenseServing("int4", "W4A16", NO_INT4_KERNEL, "/cache/dense/abc")
# every kind of gate, each passing on the figures it was given
PASSING = [GateOutcome.of(gate, "pass", "fine", 1.0, 1.0, {"ratio": 1.0}) for gate in (
    GateId("quality", "arithmetic"), GateId("fidelity", "heldout-text", check="kl_mean"),
    GateId("health", "arithmetic"), GateId("safety", "advbench"),
    GateId("structured", "bfcl", metric="schema_valid"), GateId("comparability"),
    GateId("latency", "ttft_ms", metric="p95", level="c4"),
    GateId("latency", "output_throughput", level="c4"),
    GateId("slo", "slo_attainment"), GateId("capacity"),
    GateId("memory", "weights_bytes", check="max_ratio"),
    GateId("memory", "kv_cache_tokens", check="min_ratio"),
    GateId("memory", "peak_engine_rss_bytes", check="max_ratio"))]


def test_no_speed_or_memory_gate_passes_on_a_dense_models_figures() -> None:
    assert decide(PASSING) == "promote"  # the figures alone would promote
    marked = mark_not_own(PASSING, DENSE.not_own)
    for before, after in zip(PASSING, marked, strict=True):
        if before.identity.section in NOT_OWN_SECTIONS:
            assert after.status == "not_measured" and after.value is None
            assert after.detail.startswith("not applicable on this device")
            assert "W4A16" in after.detail and after.evidence == {}
        else:
            assert after == before  # quality, safety, fidelity: the int4 weights' own
    assert {o.identity.section for o in marked if o.status == "not_measured"} == \
        {"latency", "slo", "capacity", "memory"}
    assert decide(marked) == "inconclusive"  # never a promotion on what was not measured
    failing = [replace(PASSING[0], status="fail"), *PASSING[1:]]
    assert decide(mark_not_own(failing, DENSE.not_own)) == "reject"  # quality still rejects
    assert mark_not_own(PASSING, None) == PASSING  # served as it is: judged as it is


@pytest.mark.parametrize("status", ["pass", "fail", "inconclusive"])
def test_whatever_a_speed_or_memory_gate_said_it_is_not_measured(status: str) -> None:
    outcomes = [replace(o, status=status) for o in PASSING]
    marked = mark_not_own(outcomes, DENSE.not_own)
    assert all(o.status == "not_measured" for o in marked
               if o.identity.section in NOT_OWN_SECTIONS)


def test_a_gate_that_does_not_apply_here_stays_so() -> None:
    """A CUDA-only latency gate on a CPU applies to no candidate here, dense or not: it
    neither blocks the decision nor claims a measurement."""
    cuda_only = replace(PASSING[6], status="not_applicable", detail="device: cuda only")
    assert mark_not_own([PASSING[0], cuda_only], DENSE.not_own) == [PASSING[0], cuda_only]


POLICY = """confidence: 0.95
bootstrap_resamples: 1000
quality:
  - {suite: q, max_drop: 0.10}
memory:
  - {metric: weights_bytes, max_ratio: 1.1}
"""


def _stored_run(root: Path, dense: ServedDenseJson | None) -> Path:
    """A run whose candidate answers exactly as its baseline and weighs the same on disk
    (as a dense checkpoint of the baseline's dtype does)."""
    rng = random.Random(0)
    scores = [1.0 if rng.random() < 0.7 else 0.0 for _ in range(200)]
    run = root / ("dense" if dense else "as-is")
    run.mkdir()
    rec = record("promote")
    rec.served_dense = dense
    write_record(run, rec)
    model = root / "model"  # what the comparability gate reads of both sides
    model.mkdir(exist_ok=True)
    for name in ("tokenizer_config.json", "tokenizer.json", "generation_config.json"):
        (model / name).write_text("{}")
    command = ["vllm", "--model", str(model), "--seed", "0"]
    for role in ("baseline", "candidate"):
        server = ServerInfo(str(model), "m", "cpu", command, 1.0, "server.log",
                            version="0.32.0", model_files=model_file_digests(model),
                            prefix_cache_at_start="empty (a new engine process)")
        m = Measurement(role, server, {"q": suite_result(scores)},
                        LoadResult("client", {}, []), 1.0, {"weights_bytes": 270_000_000})
        (run / role).mkdir()
        (run / role / MEASUREMENT_FILE).write_text(json.dumps(m.to_dict()))
    (run / "gates.yaml").write_text(POLICY)
    return run


def test_a_dense_run_judged_again_keeps_its_memory_gate_unjudged(tmp_path: Path) -> None:
    """`workbench gate` reads the served form from the record: the same figures pass a run
    served as it is, and are not judged for one served dense."""
    dense = ServedDenseJson(candidate="int4", format="W4A16", why=NO_INT4_KERNEL,
                            checkpoint="/cache/dense/abc", not_judged=DENSE.not_own,
                            judged_here="reject")  # judged again below
    decisions = {}
    for form, section in (("as-is", None), ("dense", dense)):
        out = tmp_path / f"{form}-regated"
        result = CliRunner().invoke(main, ["gate", str(_stored_run(tmp_path, section)),
                                           "--out", str(out)])
        assert result.exit_code in (0, 1), result.output
        rec = json.loads((out / "decision.json").read_text())
        gates = {g["gate"]: g for g in rec["gates"]}
        decisions[form] = (rec["decision"], gates["memory:weights_bytes:max_ratio"]["status"],
                           gates["quality:q"]["status"])
        if section:  # its quality, all this device can judge, would promote
            assert rec["served_dense"] == {**dense, "judged_here": "promote"}
            assert "On every gate this device can judge, it is **PROMOTE**" in \
                (out / "decision.md").read_text()
            assert "not applicable on this device" in \
                gates["memory:weights_bytes:max_ratio"]["detail"]
    assert decisions == {"as-is": ("promote", "pass", "pass"),
                         "dense": ("inconclusive", "not_measured", "pass")}


def test_the_record_says_what_ran_in_one_sentence_each_place() -> None:
    rec = record("inconclusive")
    rec.served_dense = ServedDenseJson(candidate="int4", format="W4A16", why=NO_INT4_KERNEL,
                                       checkpoint="/d", not_judged=DENSE.not_own,
                                       judged_here="promote")
    for text in (render_markdown(rec), render_summary(rec)):
        assert text.count("Served dense: quality is W4A16's own, speed and memory could not "
                          "be measured here.") == 1
    tags = served_tags(rec)
    assert tags["served"] == "dense" and tags["served.format"] == "W4A16"
    assert "not applicable on this device" in tags["served.not_judged"]
    assert served_tags(record("promote")) == {}
    assert "Served dense" not in render_markdown(record("promote"))


def test_a_record_before_dense_serving_reads_as_served_as_it_is() -> None:
    old = record("promote").to_dict()
    old["schema_version"] = 13
    del old["served_dense"]
    migrated, passed = migrate(old, 14)
    assert migrated["served_dense"] is None and passed == [13]


def test_the_artifact_handed_between_stages_keeps_its_served_form() -> None:
    """A fanned-out sweep hands the quantise step's result over as JSON (sweep/fanout.py):
    the engine is given the dense checkpoint, the record keeps the artifact's path."""
    q = QuantizeResult("int4", "/cache/artifacts/k", False, "k", {}, "built", [], DENSE)
    back = QuantizeResult.from_dict(json.loads(json.dumps(q.to_dict())))
    assert back == q and back.served_path == "/cache/dense/abc" and back.path != back.served_path
    plain = replace(q, dense=None)
    assert QuantizeResult.from_dict(plain.to_dict()).served_path == "/cache/artifacts/k"


def test_decided_here_leaves_out_only_what_this_device_cannot_judge() -> None:
    marked = mark_not_own(PASSING, DENSE.not_own)
    assert decide(marked) == "inconclusive" and decided_here(marked, True) == "promote"
    lost = [replace(marked[0], status="fail"), *marked[1:]]
    assert decided_here(lost, True) == "reject"
    unsure = [replace(marked[0], status="inconclusive"), *marked[1:]]
    assert decided_here(unsure, True) == "inconclusive"
    assert decided_here(unsure, False) == "promote"  # the policy lets inconclusive through


def _dense_row(decision_here: str, size: int) -> SweepRow:
    rec = record("inconclusive")
    rec.served_dense = ServedDenseJson(candidate="int4", format="W4A16", why=NO_INT4_KERNEL,
                                       checkpoint="/d", not_judged=DENSE.not_own,
                                       judged_here=decision_here)  # type: ignore[typeddict-item]
    rec.quantization = {"served_format": {"label": "W4A16"}, "size_bytes": size,
                        "compression_ratio": 2.5}
    rec.headroom = {"baseline": record("promote").headroom["baseline"]}  # none of its own
    row = row_of(rec, "weights", "worst_lower_bound", 10.0, True)
    row.quality = -0.01  # the ranking needs one; how it is read is tested elsewhere
    return row


def test_a_sweep_or_tune_on_this_device_reads_a_dense_rows_quality_and_its_own_weights(
        ) -> None:
    """Served dense, a candidate's row keeps its decision (inconclusive: speed and memory
    unjudged), takes its weights from its artifact, and counts as promoted on quality
    alone where the table ranks and tune searches; the table says so."""
    good, broken = _dense_row("promote", 100 * 2**20), _dense_row("reject", 60 * 2**20)
    broken.candidate = "int4-broken"
    assert good.decision == "inconclusive" and good.decision_here == "promote"
    assert good.served_dense and good.format == "W4A16 (served dense)"
    assert good.weights_bytes == good.efficiency == 100 * 2**20
    assert good.compression_ratio == 2.5
    _, chosen = rank([good, broken], "weights")
    assert chosen.candidate == "int4" and "promoted on its quality alone" in chosen.reason
    assert chosen.others["int4-broken"].startswith("rejected")  # though lighter
    md = render_sweep(SweepRecord("m", "cpu", "p", "weights", "worst_lower_bound", "q", {},
                                  [good, broken], [], chosen, "d", "t"))
    assert "| inconclusive (promote on quality alone: served dense) |" in md
    plain = row_of(record("promote"), "weights", "worst_lower_bound", 1.0, True)
    assert not plain.served_dense and plain.decision_here == plain.decision == "promote"
    # tune's search reads the same decision (its schedule passes on "promote")
    from workbench.tune.run import Search

    search = Search(rows={0: broken, 1: good})
    assert search.decisions() == {0: "reject", 1: "promote"} and search.chosen() == 1
