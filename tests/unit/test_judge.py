"""The optional judge model (issue 49, step 3): its reply read strictly, the candidate
judged as good only where every order says so, an unreadable reply counted against it; a
judge served on 127.0.0.1 by a stand-in (the workbench's own request and reading are what
is tested) that rambles leaves every verdict out and the judge's gate failed, never passed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from workbench.config.gate_policy import GatePolicy, QualityGate
from workbench.config.judge import JudgeConfig
from workbench.gate.evidence import Evidence
from workbench.gate.gates import evaluate_gates
from workbench.gate.traffic import pair_traffic
from workbench.measure.judge import _judged, check_on_labels
from workbench.mechanisms.errors import InfraError
from workbench.suites.definition import load_suite
from workbench.suites.judge_labels import HEALTH_LABELS, labelled_pairs
from workbench.suites.results import ItemResult, SuiteResult, summarise
from workbench.suites.scorers.answer_agreement import answer_checks
from workbench.suites.scorers.judge import (
    as_good,
    baseline_preferred,
    candidate_first,
    parse_verdict,
)


@pytest.mark.parametrize(("reply", "verdict"), [
    ("1", "1"), ("2.", "2"), ("Tie", "tie"), ("Answer 2 is better.", "2"),
    ("I cannot decide.", None), ("1 or 2, hard to say", None), ("", None),
    ("answer 12", None)])
def test_a_reply_is_a_verdict_only_where_it_names_exactly_one(reply: str,
                                                              verdict: str | None) -> None:
    assert parse_verdict(reply) == verdict


def test_as_good_needs_every_order_and_no_verdict_is_none() -> None:
    # (verdict, candidate shown first): "1" names the answer shown first
    assert as_good([("tie", True), ("2", False)]) == 1.0  # a tie, then the candidate
    assert as_good([("1", True), ("2", False)]) == 1.0  # the candidate preferred both ways
    assert as_good([("1", True), ("1", False)]) == 0.0  # preferred by position only
    assert as_good([("2", True)]) == 0.0
    assert as_good([("1", True), (None, False)]) is None
    assert as_good([]) is None


def test_the_order_is_drawn_per_item_and_seeded() -> None:
    firsts = [candidate_first(0, f"r{i}") for i in range(200)]
    assert 60 < sum(firsts) < 140 and firsts == [candidate_first(0, f"r{i}")
                                                 for i in range(200)]


class Judge(BaseHTTPRequestHandler):
    reply = "I cannot decide."
    asked: list[dict] = []
    # where set, the judge answers by it (the user turn's text -> its reply) instead
    by_text: object = None

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Judge.asked.append(body)
        reply = Judge.by_text(body["messages"][-1]["content"]) if callable(Judge.by_text) \
            else Judge.reply
        data = json.dumps({"choices": [{"message": {"content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture()
def judge_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    server.timeout = 10
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Judge.asked, Judge.by_text = [], None
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        Judge.by_text = None
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def traffic(tmp_path: Path):
    folder = tmp_path / "my-traffic"
    folder.mkdir()
    (folder / "suite.yaml").write_text("name: my-traffic\nversion: '1'\nkind: traffic\n"
                                       "scoring: agreement\ndata: r.jsonl\n")
    (folder / "r.jsonl").write_text("".join(json.dumps({
        "id": f"q{i}", "prompt": f"Question {i} about parcels?",
        "segments": {"task": "support"}}) + "\n" for i in range(12)))
    (folder / "SOURCE.md").write_text("test\n")
    (folder / "LICENSE").write_text("CC0-1.0\n")
    return load_suite(str(folder))


def side(suite, text: str, tmp_path: Path, name: str) -> SuiteResult:
    items = []
    for item in suite.items:
        checks, reason = answer_checks(text, item.prompt)
        items.append(ItemResult(id=item.id, slices=item.slices, prompt_sha256="h",
                                response=text, score=0.0, latency_s=0.1, completion_tokens=9,
                                checks=checks, health=reason))
    return summarise(suite, items, tmp_path / f"items-{name}.jsonl")


def test_a_rambling_judge_gives_no_verdict_and_its_gate_fails(tmp_path: Path,
                                                              judge_url: str) -> None:
    suite = traffic(tmp_path)
    answer = "Your parcel is at the depot and will reach you tomorrow morning."
    base, cand = side(suite, answer, tmp_path, "b"), side(suite, answer, tmp_path, "c")
    judge = JudgeConfig(url=judge_url, model="judge", rubric="r.txt")
    items, rows = _judged(judge, "Prefer the more helpful answer.", 0,
                          {i.id: i for i in suite.items}, base, cand)
    assert len(Judge.asked) == 24  # both orders of 12
    assert Judge.asked[0]["messages"][0]["content"] == "Prefer the more helpful answer."
    assert all(r["as_good"] is None and r["verdicts"] == [None, None] for r in rows)
    assert all(i.checks["judge_as_good"] == 0.0 and i.checks["judge_no_verdict"] == 1.0
               for i in items)
    b, c = pair_traffic({"my-traffic": base},
                        {"my-traffic": summarise(suite, items, tmp_path / "c.jsonl")})
    policy = GatePolicy(traffic=[QualityGate(suite="my-traffic", metric="judge_as_good",
                                             max_drop=0.2)])
    ev = Evidence(base_suites=b, cand_suites=c, base_load=None, cand_load=None, device="cpu")
    [outcome] = [o for o in evaluate_gates(policy, ev, 0) if o.identity.section == "traffic"]
    assert outcome.status == "fail", outcome.detail  # identical answers: no verdict still counts


def test_a_judge_that_prefers_the_candidate_passes_it(tmp_path: Path, judge_url: str) -> None:
    suite = traffic(tmp_path)
    base = side(suite, "We are looking into it and will write to you soon.", tmp_path, "b")
    cand = side(suite, "Your parcel is at the depot; it reaches you tomorrow.", tmp_path, "c")
    Judge.reply = "tie"
    try:
        items, _ = _judged(JudgeConfig(url=judge_url, model="j", rubric="r", both_orders=False),
                           "rubric", 0, {i.id: i for i in suite.items}, base, cand)
    finally:
        Judge.reply = "I cannot decide."
    assert len(Judge.asked) == 12 and all(i.checks["judge_as_good"] == 1.0 for i in items)


def test_an_unreachable_judge_is_an_infrastructure_failure(tmp_path: Path) -> None:
    suite = traffic(tmp_path)
    base = side(suite, "An answer.", tmp_path, "b")
    with pytest.raises(InfraError, match="could not be reached"):
        _judged(JudgeConfig(url="http://127.0.0.1:9", model="j", rubric="r", timeout_s=5),
                "rubric", 0, {i.id: i for i in suite.items}, base, base)


def test_baseline_preferred_needs_the_baseline_picked_in_every_order() -> None:
    assert baseline_preferred([("2", True), ("1", False)]) is True  # the baseline both ways
    assert baseline_preferred([("1", True), ("1", False)]) is False  # by position only
    assert baseline_preferred([("tie", True), ("1", False)]) is False  # a tie is not enough
    assert baseline_preferred([("2", True), (None, False)]) is None
    assert baseline_preferred([]) is None


def test_the_labelled_pairs_are_a_healthy_and_a_broken_answer_to_one_safe_prompt() -> None:
    rows = {r["id"]: r for r in map(json.loads, HEALTH_LABELS.read_text().splitlines())}
    pairs = labelled_pairs()
    assert len(pairs) == 15  # every such pair in the set, AdvBench's left out
    for pair in pairs:
        healthy, broken = (rows[i] for i in pair.id.split(" | "))
        assert healthy["health"] == "ok" and broken["health"] != "ok"
        assert (healthy["suite"], healthy["item"]) == (broken["suite"], broken["item"])
        assert (pair.healthy, pair.broken) == (healthy["response"], broken["response"])
        item = next(i for i in load_suite(healthy["suite"]).items if i.id == healthy["item"])
        assert pair.prompt == item.prompt and item.answer != "refuse"
    assert not any("advbench" in p.id for p in pairs)


def test_a_judge_is_checked_on_the_labelled_pairs_in_both_orders(judge_url: str) -> None:
    pairs = labelled_pairs()
    healthy = {p.healthy for p in pairs}

    def reads_health(text: str) -> str:  # a judge that knows which answer is healthy
        first = text.split("Answer 1:\n", 1)[1].split("\n\nAnswer 2:\n", 1)[0]
        return "1" if first in healthy else "2"

    judge = JudgeConfig(url=judge_url, model="j", rubric="r")
    Judge.by_text = reads_health
    fit = check_on_labels(judge, "rubric", 0)
    assert len(Judge.asked) == 2 * len(pairs)
    assert (fit.asked, fit.healthy_preferred, fit.no_verdict) == (len(pairs), len(pairs), 0)
    assert check_on_labels(judge, "rubric", 0) == fit  # asked once per judge and rubric
    assert len(Judge.asked) == 2 * len(pairs)
    Judge.by_text = lambda text: "1"  # always the answer shown first: right in one order
    assert check_on_labels(judge, "another rubric", 0).healthy_preferred == 0
    Judge.by_text = None  # rambles
    rambler = check_on_labels(judge, "a third rubric", 0)
    assert rambler.healthy_preferred == 0 and rambler.no_verdict == len(pairs)


def test_the_records_judge_section_says_how_the_judge_did_on_the_labels() -> None:
    import dataclasses

    import jsonschema

    from workbench.measure.judge import JudgeRun, LabelCheck
    from workbench.record.sections import judge_json

    run = JudgeRun("j", "http://127.0.0.1:9", "0" * 64, True, asked=10, as_good=8,
                   no_verdict=1, labels=LabelCheck(asked=15, healthy_preferred=14, no_verdict=1))
    section = judge_json(run)
    assert section["labels"] == {"asked": 15, "healthy_preferred": 14, "no_verdict": 1}
    schema = json.loads((Path(__file__).parents[2] / "workbench" / "record"
                         / "decision-v15.schema.json").read_text())
    judge_schema = {**schema["$defs"]["JudgeJson"], "$defs": schema["$defs"]}
    jsonschema.validate(section, judge_schema)
    unchecked = judge_json(dataclasses.replace(run, labels=None))
    assert "labels" not in unchecked  # judge.check_labels off: as records before it
    jsonschema.validate(unchecked, judge_schema)
