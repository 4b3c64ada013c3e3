"""What MLflow receives of a run whose suite keeps no responses (store_responses: false):
the answers' hashes and lengths in every per-item file and measurement, none of its
log-probability files; the run folder on this machine untouched; other suites as they were."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from workbench.suites.definition import load_suite
from workbench.tracking.shared_copy import private_runs, private_runs_named, shareable

ANSWER = "Your parcel 4417 is at the depot."  # stands for an answer quoting a prompt


def item(i: int, text: str, redraw: str | None = None) -> dict:
    return {"id": f"q{i}", "response": text, "redraw": redraw, "score": 1.0, "checks": {}}


def run_folder(root: Path) -> Path:
    run = root / "20261207-120000-int4"
    for side in ("baseline", "candidate", "look-1/candidate"):
        folder = run / side
        folder.mkdir(parents=True)
        rows = [item(0, ANSWER, redraw="Another draw, 4417."), item(1, "")]
        (folder / "items-my-traffic.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows))
        (folder / "items-arithmetic.jsonl").write_text(json.dumps(item(0, "12")) + "\n")
        (folder / "logprobs-my-traffic.jsonl").write_text('{"tokens": ["Your"]}\n')
        (folder / "logprobs-arithmetic.jsonl").write_text('{"tokens": ["12"]}\n')
        (folder / "measurement.json").write_text(json.dumps({"role": side, "suites": {
            "my-traffic": {"items": rows}, "arithmetic": {"items": [item(0, "12")]}}}))
    (run / "decision.json").write_text("{}")
    return run


def test_the_copy_logged_holds_hashes_of_a_private_suites_answers(tmp_path: Path) -> None:
    run = run_folder(tmp_path)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with shareable(run, {"my-traffic"}) as shared:
        assert shared != run and (shared / "decision.json").is_file()
        files = [p for p in shared.rglob("*") if p.is_file()]
        assert not any(p.name == "logprobs-my-traffic.jsonl" for p in files)
        assert sum(p.name == "logprobs-arithmetic.jsonl" for p in files) == 3
        for p in files:
            assert b"4417" not in p.read_bytes(), p
        rows = [json.loads(line) for line in
                (shared / "baseline" / "items-my-traffic.jsonl").read_text().splitlines()]
        assert rows[0]["response_sha256"] == hashlib.sha256(ANSWER.encode()).hexdigest()
        assert rows[0]["response_chars"] == len(ANSWER) and "response" not in rows[0]
        assert "redraw" not in rows[0] and rows[0]["redraw_chars"] == 19
        assert rows[1]["response_chars"] == 0 and "redraw_sha256" not in rows[1]
        measured = json.loads((shared / "look-1" / "candidate" / "measurement.json").read_text())
        assert "response" not in measured["suites"]["my-traffic"]["items"][0]
        assert measured["suites"]["arithmetic"]["items"][0]["response"] == "12"
        assert json.loads((shared / "candidate" / "items-arithmetic.jsonl").read_text())[
            "response"] == "12"
    assert not shared.exists()  # the copy is gone once logged
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_without_a_private_suite_the_run_folder_itself_is_logged(tmp_path: Path) -> None:
    run = run_folder(tmp_path)
    with shareable(run, set()) as shared:
        assert shared == run


def test_which_suites_keep_no_responses(tmp_path: Path) -> None:
    folder = tmp_path / "my-traffic"
    folder.mkdir()
    (folder / "suite.yaml").write_text("name: my-traffic\nversion: '1'\nkind: traffic\n"
                                       "scoring: agreement\ndata: r.jsonl\n"
                                       "store_responses: false\n")
    (folder / "r.jsonl").write_text('{"id": "q0", "prompt": "Where is my parcel?"}\n')
    (folder / "SOURCE.md").write_text("test\n")
    (folder / "LICENSE").write_text("CC0-1.0\n")
    assert private_runs([load_suite(str(folder)), load_suite("arithmetic")]) == {"my-traffic"}
    assert private_runs_named([str(folder), "arithmetic"]) == {"my-traffic"}
    # a suite that no longer loads is taken to keep none, by its folder's name
    assert private_runs_named([str(tmp_path / "gone")]) == {"gone", "gone-guided"}
