"""What MLflow receives of a run whose suite keeps no responses (store_responses: false):
the answers' hashes and lengths in every per-item file and measurement, none of its
log-probability files; the run folder on this machine untouched; other suites as they were."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

import pytest

from workbench.config.run_config import TrackingConfig
from workbench.suites.definition import load_suite
from workbench.tracking import shared_copy
from workbench.tracking.shared_copy import (
    PRIVATE_FILE,
    answer_key,
    private_runs,
    shareable,
    stored_private_runs,
)
from workbench.tracking.tracker import Tracker


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))  # the key is made there

ANSWER = "Your parcel 4417 is at the depot."  # stands for an answer quoting a prompt


def item(i: int, text: str, redraw: str | None = None, draws: tuple[str, ...] = ()) -> dict:
    return {"id": f"q{i}", "response": text, "redraw": redraw, "score": 1.0, "checks": {},
            "draws": list(draws), "redraws": list(draws)}


def run_folder(root: Path) -> Path:
    run = root / "20261207-120000-int4"
    for side in ("baseline", "candidate", "look-1/candidate"):
        folder = run / side
        folder.mkdir(parents=True)
        rows = [item(0, ANSWER, redraw="Another draw, 4417.",
                     draws=("A third: 4417.",)), item(1, "")]
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
        keyed = hmac.new(answer_key(), ANSWER.encode(), hashlib.sha256).hexdigest()
        assert rows[0]["response_hmac"] == keyed != hashlib.sha256(ANSWER.encode()).hexdigest()
        assert rows[0]["response_chars"] == len(ANSWER) and "response" not in rows[0]
        assert "redraw" not in rows[0] and rows[0]["redraw_chars"] == 19
        assert rows[1]["response_chars"] == 0 and "redraw_hmac" not in rows[1]
        assert "draws" not in rows[0] and rows[0]["draws_chars"] == [14]  # n > 1 alike
        assert len(rows[0]["redraws_hmac"]) == 1 and "draws_hmac" not in rows[1]
        measured = json.loads((shared / "look-1" / "candidate" / "measurement.json").read_text())
        assert "response" not in measured["suites"]["my-traffic"]["items"][0]
        assert measured["suites"]["arithmetic"]["items"][0]["response"] == "12"
        assert json.loads((shared / "candidate" / "items-arithmetic.jsonl").read_text())[
            "response"] == "12"
    assert not shared.exists()  # the copy is gone once logged
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert (tmp_path / "cache" / "answer-hash.key").stat().st_mode & 0o777 == 0o600


def test_links_and_cut_off_writes_never_carry_an_answer_out_nor_lose_one(
        tmp_path: Path) -> None:
    run = run_folder(tmp_path)
    elsewhere = tmp_path / "elsewhere.jsonl"  # a user's link into the run folder
    elsewhere.write_text(json.dumps(item(5, ANSWER)) + "\n")
    os.symlink(elsewhere, run / "candidate" / "items-my-traffic-linked.jsonl")
    os.replace(run / "candidate" / "items-my-traffic.jsonl", tmp_path / "moved.jsonl")
    os.symlink(tmp_path / "moved.jsonl", run / "candidate" / "items-my-traffic.jsonl")
    with (run / "baseline" / "items-my-traffic.jsonl").open("a") as cut:
        cut.write('{"id": "q2", "response": "Your parcel 4417 is')  # killed mid-line
    (run / "baseline" / "measurement.json.tmp").write_text('{"suites": {"my-traffic": 4417')
    moved = (tmp_path / "moved.jsonl").read_bytes()
    with shareable(run, {"my-traffic", "my-traffic-linked"}) as shared:
        for p in shared.rglob("*"):
            assert p.is_dir() or (not p.is_symlink() and b"4417" not in p.read_bytes()), p
        lines = (shared / "baseline" / "items-my-traffic.jsonl").read_text().splitlines()
        assert len(lines) == 2  # the line cut off is left out
    assert (tmp_path / "moved.jsonl").read_bytes() == moved  # not written through the link
    assert b"4417" in elsewhere.read_bytes()


def test_the_run_folder_says_which_suites_keep_no_responses_for_a_later_log(
        tmp_path: Path) -> None:
    run = run_folder(tmp_path)
    (run / PRIVATE_FILE).write_text('["my-traffic"]')
    # as written when the run was made, whatever the config's suites are now
    assert stored_private_runs(run, ["arithmetic"]) == {"my-traffic"}
    (run / PRIVATE_FILE).unlink()
    assert stored_private_runs(run, ["arithmetic", str(tmp_path / "gone")]) == {
        "gone", "gone-guided"}


def test_a_copy_that_cannot_be_made_is_a_failure_to_log_never_the_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_folder(tmp_path)

    def no_room(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shared_copy.shutil, "copytree", no_room)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    with Tracker(TrackingConfig(uri=uri, experiment="t"), "run", {}) as tracker:
        tracker.log_run_folder(run, {"my-traffic"})
    assert tracker.status()["status"] == "incomplete"
    assert "No space left" in tracker.status()["error"]
    assert tracker.status()["not_logged"] == ["log_run_folder"]
    import mlflow  # the server was not lost: the run itself ended as it should

    [logged] = mlflow.search_runs(experiment_names=["t"], output_format="list")
    assert logged.info.status == "FINISHED"


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
    # a stored run from before the run folder said it: the suites as they load now, one
    # that no longer loads taken to keep none, by its folder's name
    assert stored_private_runs(tmp_path, [str(folder), "arithmetic"]) == {"my-traffic"}
    assert stored_private_runs(tmp_path, [str(tmp_path / "gone")]) == {"gone", "gone-guided"}
