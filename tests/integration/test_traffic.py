"""A team's own traffic as a suite, through the real engine (issue 49): the tiny "talking"
model (test_looping_candidate.py) against itself passes every traffic gate in every
segment; the looping one fails them; no prompt, and no credential-shaped string from one,
reaches the console, a log, a record or MLflow's store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_looping_candidate import REPO, cycle_model

pytestmark = pytest.mark.integration

MARKER = "quokka-ledger-4417"  # a prompt's words, to be found nowhere the run writes
KEY = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6"  # shaped like an OpenAI key, not one
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def requests() -> list[dict]:
    rows = []
    for k in range(12):
        rows.append({"id": f"support-{k}", "messages": [
            {"role": "system", "content": "You answer customers of a parcel service."},
            {"role": "user", "content": f"Parcel {k} about {MARKER}: where is it? {KEY}"}],
            "segments": {"task": "support"}})
        body = {"messages": [{"role": "user", "content": f"Which city, {MARKER} #{k}?"}],
                "max_tokens": 24, "metadata": {"task": "extraction"}}
        if k % 3 == 0:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "place", "schema": SCHEMA}}
        if k % 3 == 1:
            body["tools"] = [{"type": "function", "function": {
                "name": "lookup", "parameters": {"type": "object"}}}]
        rows.append({"custom_id": f"extract-{k}", "body": body})
    return rows


def traffic_suite(folder: Path, store_responses: bool = True) -> Path:
    folder.mkdir()
    (folder / "suite.yaml").write_text("name: my-traffic\nversion: '1'\nkind: traffic\n"
                                       "scoring: agreement\ndata: requests.jsonl\n"
                                       "max_tokens: 48\n"
                                       + ("" if store_responses else "store_responses: false\n"))
    (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests()))
    (folder / "SOURCE.md").write_text("Written for this test.\n")
    (folder / "LICENSE").write_text("CC0-1.0\n")
    return folder


CONFIG = """
model: {{name: talking-llama, path: {talking}}}
candidates:
  same: {{recipe: none}}
  looping: {{checkpoint: {looping}}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600}}
suites: [{traffic}]
profile: smoke
load:
  profile: tiny
  rounds: 1
  profiles:
    tiny: {load}
gates: gates.yaml
tracking: {{experiment: traffic}}
"""
# the A/A replays its own traffic; the judge's test, about the judge, a short synthetic load
REPLAY = "{{from_suite: {traffic}, arrival_rate: 4, num_prompts: 4, warmup_prompts: 1}}"
SYNTHETIC = ("{concurrency: [1], num_prompts: 4, prompt_tokens: 32, output_tokens: 8, "
             "warmup_prompts: 1}")
GATES = """
traffic:
  - {suite: my-traffic, max_drop: 0.10, slice_max_drop: 0.30}
  - {suite: my-traffic, metric: length_kept, max_drop: 0.10}
  - {suite: my-traffic, metric: baseline_answer_likelihood, max_drop: 0.05}
health: {max_drop: 0.10}
"""


def test_own_traffic_passes_an_aa_and_fails_a_looping_model_and_keeps_prompts_private(
        tiny_model: Path, tmp_path: Path, workbench) -> None:
    talking = cycle_model(tiny_model, tmp_path / "talking", 150)
    looping = cycle_model(tiny_model, tmp_path / "looping", 3)
    (tmp_path / "gates.yaml").write_text(GATES)
    config = tmp_path / "traffic.yaml"
    suite = traffic_suite(tmp_path / "my-traffic", store_responses=False)
    config.write_text(CONFIG.format(talking=talking, looping=looping, repo=REPO,
                                    traffic=suite, load=REPLAY.format(traffic=suite)))
    outputs = []
    for candidate in ("same", "looping"):
        run = workbench("evaluate", "--candidate", candidate, "--config", str(config),
                        "--runs-dir", "runs", cwd=tmp_path)
        outputs.append(run.stdout + run.stderr)
        assert run.returncode in (0, 1), outputs[-1][-3000:]

    same = record(tmp_path, "same")
    traffic = {g["gate"]: g for g in same["gates"] if g["id"]["section"] == "traffic"}
    assert {"traffic:my-traffic", "traffic:my-traffic[task:support]",
            "traffic:my-traffic[task:extraction]", "traffic:my-traffic.length_kept",
            "traffic:my-traffic.baseline_answer_likelihood"} <= set(traffic)
    assert all(g["status"] == "pass" for g in traffic.values()), traffic
    pair = same["suites"]["my-traffic"]
    assert pair["baseline"]["accuracy"] == 1.0 == pair["candidate"]["accuracy"]
    # the load test replayed the same traffic: its prompts through the chat template,
    # its outputs the requests' max_tokens (the suite's 48 where a request names none)
    replay = same["load"]["baseline"]
    assert replay["profile"]["from_suite"] == str(tmp_path / "my-traffic")
    assert replay["workload"]["mode"] == "trace" and replay["workload"]["requests_per_level"] == 4
    assert replay["workload"]["output_tokens"]["max"] <= 48
    assert replay["workload"]["prompt_tokens"]["min"] > 8 and replay["levels"]
    assert pair["candidate"]["metrics"]["agreement_exact"] == 1.0

    looping = record(tmp_path, "looping")
    assert looping["decision"] == "reject"
    failed = {g["gate"] for g in looping["gates"] if g["status"] == "fail"}
    assert {"traffic:my-traffic", "health:my-traffic",
            "traffic:my-traffic.baseline_answer_likelihood"} <= failed, failed
    # the looping model finds the talking model's answers unlikely, token by token
    likely = looping["suites"]["my-traffic"]
    assert likely["candidate"]["metrics"]["baseline_answer_likelihood"] < \
        likely["baseline"]["metrics"]["baseline_answer_likelihood"] / 2

    written = [p for p in tmp_path.rglob("*") if p.is_file()
               and "my-traffic" not in p.parts and p.name != "traffic.yaml"]
    assert any(p.name.startswith("items-my-traffic") for p in written)
    for path in written:
        data = path.read_bytes()
        assert MARKER.encode() not in data and KEY.encode() not in data, path
    for out in outputs:
        assert MARKER not in out and KEY not in out
    # store_responses: false: the answers stay in the run folder; MLflow's copy of each
    # per-item file and measurement holds their hashes and lengths
    def in_runs(p: Path) -> bool:
        return p.relative_to(tmp_path).parts[0] == "runs"

    kept = [p for p in written if p.name == "items-my-traffic.jsonl" and in_runs(p)]
    logged = [p for p in written if p.name in ("items-my-traffic.jsonl", "measurement.json")
              and not in_runs(p)]
    assert kept and logged, [str(p) for p in written][:20]
    assert all('"response": ' in p.read_text() for p in kept)
    for path in logged:
        rows = json.loads(path.read_text())["suites"]["my-traffic"]["items"] \
            if path.name == "measurement.json" else \
            [json.loads(line) for line in path.read_text().splitlines()]
        assert rows and all("response" not in r and len(r["response_hmac"]) == 64
                            for r in rows), path


def record(tmp_path: Path, candidate: str) -> dict:
    return json.loads(next((tmp_path / "runs").glob(f"*-{candidate}/decision.json"))
                      .read_text())


JUDGE_GATES = GATES.replace(
    "health:", "  - {suite: my-traffic, metric: judge_as_good, max_drop: 0.10}\nhealth:")


def test_a_judge_whose_replies_cannot_be_read_counts_against_and_the_run_completes(
        tiny_model: Path, tmp_path: Path, workbench) -> None:
    """The A/A with a judge that rambles: every answer is identical to the baseline's, yet
    no verdict counts against the candidate, so the judge's gate fails; the run itself
    completes (exit 1, not 3) and the record names the judge and its rubric's digest."""
    import hashlib
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    asked: list[dict] = []

    class Rambling(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            asked.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            data = json.dumps({"choices": [{"message": {
                "content": "Both answers have merits; it is hard to say."}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Rambling)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        talking = cycle_model(tiny_model, tmp_path / "talking", 150)
        (tmp_path / "gates.yaml").write_text(JUDGE_GATES)
        rubric = "Prefer the answer that helps the customer more."
        (tmp_path / "rubric.txt").write_text(rubric)
        config = tmp_path / "traffic.yaml"
        config.write_text(CONFIG.format(talking=talking, looping=talking, repo=REPO,
                                        traffic=traffic_suite(tmp_path / "my-traffic"),
                                        load=SYNTHETIC)
                          + f"judge: {{url: 'http://127.0.0.1:{server.server_address[1]}', "
                            "model: rambler, rubric: rubric.txt}\n")
        run = workbench("evaluate", "--candidate", "same", "--config", str(config),
                        "--runs-dir", "runs", cwd=tmp_path)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert run.returncode == 1, (run.stdout + run.stderr)[-3000:]
    same = record(tmp_path, "same")
    gates = {g["gate"]: g for g in same["gates"]}
    assert gates["traffic:my-traffic.judge_as_good"]["status"] == "fail"
    assert gates["traffic:my-traffic"]["status"] == "pass"  # the answers themselves agree
    assert same["judge"]["model"] == "rambler" and same["judge"]["no_verdict"] == 24
    assert same["judge"]["rubric_sha256"] == hashlib.sha256(rubric.encode()).hexdigest()
    # both orders of the 24 answers, and first of the 15 labelled pairs it is checked on
    assert len(asked) == 48 + 30 and asked[0]["messages"][0]["content"] == rubric
    assert same["judge"]["labels"] == {"asked": 15, "healthy_preferred": 0, "no_verdict": 15}
    verdicts = next((tmp_path / "runs").glob("*-same/candidate/judge-my-traffic.jsonl"))
    assert MARKER not in verdicts.read_text() and KEY not in json.dumps(asked)
    # the stored run judged again, no engine and no judge: the judge's checks were kept
    regated = workbench("gate", str(verdicts.parent.parent), "--out", "regated", cwd=tmp_path)
    assert regated.returncode == 1, regated.stdout + regated.stderr
    again = json.loads((tmp_path / "regated" / "decision.json").read_text())
    assert {g["gate"]: g["status"] for g in again["gates"]} == {
        g["gate"]: g["status"] for g in same["gates"]}
