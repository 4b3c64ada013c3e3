"""`workbench gate` at another confidence: every interval of the re-gated record (each gate's
evidence, each suite's comparison, decision.md's tables) is the one at that confidence,
recomputed from the stored per-item results."""

import json
import random
import re
from pathlib import Path

import pytest
from builders import record, suite_result
from click.testing import CliRunner

from workbench.cli import main
from workbench.gate.paired import paired_delta
from workbench.loadtest.results import LoadResult
from workbench.measure.measurement import MEASUREMENT_FILE, Measurement
from workbench.record.render import write_record
from workbench.serve.engine import ServerInfo

POLICY = """confidence: {confidence}
bootstrap_resamples: 2000
quality:
  - {{suite: q, max_drop: 0.10, slice_max_drop: 0.30, min_slice_items: 5}}
"""


def _scores(seed: int, n: int, p: float) -> list[float]:
    rng = random.Random(seed)
    return [1.0 if rng.random() < p else 0.0 for _ in range(n)]


def _run_folder(root: Path) -> tuple[Path, list[float], list[float], list[str]]:
    """A stored run: a valid record judged at 95%, and both sides' per-item results of a
    suite `q` with two slices, the candidate somewhat worse."""
    base, cand = _scores(1, 80, 0.7), _scores(2, 80, 0.6)
    slices = ["easy", "hard"] * 40
    run = root / "run"
    run.mkdir()
    write_record(run, record("promote"))
    for role, scores in (("baseline", base), ("candidate", cand)):
        suite = suite_result(scores, slices)
        server = ServerInfo("/m", "m", "cpu", [], 1.0, "server.log")
        m = Measurement(role, server, {"q": suite}, LoadResult("client", {}, []), 1.0)
        (run / role).mkdir()
        (run / role / MEASUREMENT_FILE).write_text(json.dumps(m.to_dict()))
    (run / "gates.yaml").write_text(POLICY.format(confidence=0.95))
    return run, base, cand, slices


def _interval(base: list[float], cand: list[float], confidence: float) -> tuple[float, float]:
    d = paired_delta(base, cand, confidence, 2000, 0)
    return d.ci_low, d.ci_high


@pytest.mark.parametrize("confidence", [0.80, 0.99])
def test_a_regated_record_has_every_interval_at_its_own_confidence(
        tmp_path: Path, confidence: float) -> None:
    run, base, cand, slices = _run_folder(tmp_path)
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY.format(confidence=confidence))
    out = tmp_path / "regated"
    result = CliRunner().invoke(main, ["gate", str(run), "--policy", str(policy),
                                       "--out", str(out)])
    assert result.exit_code in (0, 1), result.output
    rec = json.loads((out / "decision.json").read_text())
    assert rec["policy"]["confidence"] == confidence

    def part(name: str | None) -> tuple[list[float], list[float]]:
        keep = [i for i, s in enumerate(slices) if name is None or s == name]
        return [base[i] for i in keep], [cand[i] for i in keep]

    expected = {name or "(all)": _interval(*part(name), confidence)
                for name in (None, "easy", "hard")}
    wider = {name or "(all)": _interval(*part(name), 0.95) for name in (None, "easy", "hard")}
    assert all(expected[k] != wider[k] for k in expected)  # the test can tell them apart

    comparison = rec["suites"]["q"]["comparison"]
    assert set(comparison) == set(expected)
    for name, (low, high) in expected.items():
        assert (comparison[name]["ci_low"], comparison[name]["ci_high"]) == \
            pytest.approx((low, high))
    gates = {g["gate"]: g for g in rec["gates"]}
    for gate, name in (("quality:q", "(all)"), ("quality:q[easy]", "easy"),
                       ("quality:q[hard]", "hard")):
        ev = gates[gate]["evidence"]
        assert (ev["ci_low"], ev["ci_high"]) == pytest.approx(expected[name])
    assert rec["suites"]["q"]["flips"] == {
        "paired": 80, "to_wrong": sum(b == 1 and c == 0 for b, c in zip(base, cand, strict=True)),
        "to_right": sum(b == 0 and c == 1 for b, c in zip(base, cand, strict=True))}

    md = (out / "decision.md").read_text()
    interval = r"\[([+-]\d\.\d{3}), ([+-]\d\.\d{3})\]"
    shown = {(float(a), float(b)) for a, b in re.findall(interval, md)}
    for low, high in expected.values():
        assert (round(low, 3), round(high, 3)) in shown
    for low, high in wider.values():
        if (round(low, 3), round(high, 3)) not in {(round(a, 3), round(b, 3))
                                                   for a, b in expected.values()}:
            assert (round(low, 3), round(high, 3)) not in shown  # no 95% interval left


def test_a_version_4_record_is_still_judged_and_comes_back_in_the_current_shape(
        tmp_path: Path) -> None:
    """A stored record is a contract: one written before gates carried their parts (v4) is
    checked against v4's schema, re-gated, and written in the current shape with each
    gate's parts."""
    run, *_ = _run_folder(tmp_path)
    old = json.loads((run / "decision.json").read_text())
    old["schema_version"] = 4
    for gate in old["gates"]:
        for v5_on in ("id", "baseline_status", "informational"):
            del gate[v5_on]
    for v6 in ("comparability", "migrated_from"):
        del old[v6]
    for v6 in ("tests", "baseline_misses", "baseline_unproven", "coverage", "informational"):
        del old["policy"][v6]
    del old["policy"]["looks"]  # v7
    (run / "decision.json").write_text(json.dumps(old))
    out = tmp_path / "regated"
    result = CliRunner().invoke(main, ["gate", str(run), "--out", str(out)])
    assert result.exit_code in (0, 1), result.output
    rec = json.loads((out / "decision.json").read_text())
    assert rec["schema_version"] == 16
    assert rec["migrated_from"] == [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    ids = {g["gate"]: g["id"] for g in rec["gates"]}
    assert ids["quality:q[hard]"] == {"section": "quality", "subject": "q", "metric": None,
                                      "slice": "hard", "check": None, "level": None,
                                      "profile": None}



STORED_V4 = Path(__file__).resolve().parents[1] / "data" / "records" / "v4-default-int4"


def test_a_record_the_previous_release_wrote_is_judged_again(tmp_path: Path) -> None:
    """tests/data/records/v4-default-int4: the default main job's record as release 1b42136
    wrote it (schema 4). It is checked against v4's schema, migrated step by step, and
    judged by the current gates; what the trimmed run lacks fails closed, by name."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(STORED_V4, run)
    assert json.loads((run / "decision.json").read_text())["schema_version"] == 4
    policy = tmp_path / "p.yaml"
    policy.write_text("quality:\n  - {suite: arithmetic, max_drop: 0.05}\n"
                      "  - {suite: boolq, max_drop: 0.05}\n"
                      "defaults:\n  quality: {max_drop: 0.05}\n")
    out = tmp_path / "regated"
    result = CliRunner().invoke(main, ["gate", str(run), "--policy", str(policy), "--out",
                                       str(out)])
    assert result.exit_code == 1, result.output
    rec = json.loads((out / "decision.json").read_text())
    assert rec["schema_version"] == 16
    assert rec["migrated_from"] == [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    assert rec["policy"]["looks"]["planned"] == 1  # every run before v7 looked once
    gates = {g["gate"]: g for g in rec["gates"]}
    # the int4 candidate lost arithmetic then (0.325 -> 0.092) and still does
    assert gates["quality:arithmetic"]["status"] == "fail"
    # the default gates the suites no gate names; a suite the trimmed run lacks fails closed
    assert {"quality:long-context", "quality:commonsenseqa"} <= set(gates)
    assert "missing (fail closed)" in gates["quality:boolq"]["detail"]
    # the v4 measurements carry no server facts: comparability fails closed, naming why
    assert gates["comparability"]["status"] == "fail"
    assert "recorded before comparability checks existed" in gates["comparability"]["detail"]
    assert rec["policy"]["coverage"]["long-context"] == "the policy's quality default"
    assert "Judged again from a record of schema 4" in (out / "decision.md").read_text()


def test_a_record_of_the_previous_schema_is_judged_again_and_says_it_looked_once(
        tmp_path: Path) -> None:
    """The previous release wrote schema 6 (no looks): checked against v6's schema,
    migrated, judged at the policy's level whole, and said so."""
    run, base, cand, _ = _run_folder(tmp_path)
    old = json.loads((run / "decision.json").read_text())
    old["schema_version"] = 6
    del old["policy"]["looks"]
    (run / "decision.json").write_text(json.dumps(old))
    out = tmp_path / "regated"
    result = CliRunner().invoke(main, ["gate", str(run), "--out", str(out)])
    assert result.exit_code in (0, 1), result.output
    rec = json.loads((out / "decision.json").read_text())
    assert rec["schema_version"] == 16
    assert rec["migrated_from"] == [6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    assert rec["policy"]["looks"]["planned"] == 1 and rec["policy"]["confidence"] == 0.95
    assert "Judged again from a record of schema 6" in (out / "decision.md").read_text()


def test_a_run_that_planned_two_looks_is_judged_again_at_half_of_alpha(tmp_path: Path) -> None:
    """Its items were gathered under two looks: `gate` judges each at the per-look level,
    whatever policy judges it now, and its intervals are the 97.5% ones."""
    run, base, cand, _ = _run_folder(tmp_path)
    stored = json.loads((run / "decision.json").read_text())
    stored["policy"]["looks"] = {
        "planned": 2, "taken": 2, "policy_confidence": 0.95, "confidence_per_look": 0.975,
        "profiles": ["smoke", "full"],
        "first_look": {"profile": "smoke", "decision": "inconclusive",
                       "open_gates": ["quality:q"], "folder": "look-1"}}
    (run / "decision.json").write_text(json.dumps(stored))
    out = tmp_path / "regated"
    result = CliRunner().invoke(main, ["gate", str(run), "--out", str(out)])
    assert result.exit_code in (0, 1), result.output
    rec = json.loads((out / "decision.json").read_text())
    assert rec["policy"]["confidence"] == 0.975
    assert rec["policy"]["looks"]["taken"] == 2
    low, high = _interval(base, cand, 0.975)
    overall = rec["suites"]["q"]["comparison"]["(all)"]
    assert (overall["ci_low"], overall["ci_high"]) == pytest.approx((low, high), abs=1e-3)
    assert "Two looks: the smoke sample was inconclusive" in (out / "decision.md").read_text()
