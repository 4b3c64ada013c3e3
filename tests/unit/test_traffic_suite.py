"""A traffic suite wired in (issue 49): a folder whose suite.yaml says `kind: traffic` loads
its requests as items (segments as slices); each request is sent with its own messages and
parameters and its answer checked on its own, no prompt or credential kept; the gates of the
policy's `traffic` section judge the candidate's answers against the baseline's, so an A/A
passes and a broken candidate fails in every segment. The engine is stood in by an httpx
mock: what is tested is the workbench's own request, checks and judgement."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from pydantic import ValidationError

from workbench.config.gate_policy import GatePolicy, QualityGate
from workbench.gate.early import EarlyStop
from workbench.gate.gates import evaluate_gates
from workbench.gate.traffic import against_baseline
from workbench.gate.verdict import evidence
from workbench.mechanisms.errors import InputError
from workbench.plan.checks import policy_problems
from workbench.suites.definition import load_suite
from workbench.suites.results import ItemResult, SuiteResult, summarise
from workbench.suites.spec import SuiteSpec
from workbench.suites.traffic_ask import ask_request

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"  # shaped like an OpenAI key, not one
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
REQUESTS = [
    {"id": "s1", "messages": [{"role": "system", "content": "You are a support agent."},
                              {"role": "user", "content": "Where is my order?"}],
     "segments": {"task": "support", "lang": "en"}},
    {"id": "x1", "prompt": f"Extract the name: Ada wrote to us with key {KEY}",
     "max_tokens": 40, "response_format": {"type": "json_schema", "json_schema": {
         "name": "person", "schema": SCHEMA}}, "segments": {"task": "extraction", "lang": "en"}},
    {"id": "t1", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
     "temperature": 0.7, "tools": [{"type": "function", "function": {
         "name": "weather", "parameters": {"type": "object"}}}],
     "segments": {"task": "tools", "lang": "en"}},
    {"id": "d1", "messages": [{"role": "user", "content": "Wann endet der Vertrag?"}],
     "segments": {"task": "support", "lang": "de"}},
]


def traffic_folder(root: Path, rows: list[dict], name: str = "my-traffic") -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "suite.yaml").write_text(
        f"name: {name}\nversion: '1'\nkind: traffic\nscoring: agreement\n"
        "data: requests.jsonl\nmax_tokens: 64\n")
    (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "SOURCE.md").write_text("written for this test\n")
    (folder / "LICENSE").write_text("CC0-1.0\n")
    return folder


def test_a_traffic_folder_loads_its_requests_as_items_with_segments_as_slices(
        tmp_path: Path) -> None:
    suite = load_suite(str(traffic_folder(tmp_path, REQUESTS)))
    assert suite.spec.kind == "traffic" and suite.generates
    items = {i.id: i for i in suite.items}
    assert items["s1"].slices == ("task:support", "lang:en")
    assert items["s1"].prompt == "Where is my order?"  # the last user turn
    assert items["x1"].request is not None and items["x1"].request.schema == SCHEMA
    assert items["x1"].request.secrets == ("openai-key",)


def test_a_traffic_kind_is_scored_by_agreement_only() -> None:
    with pytest.raises(ValidationError, match="kind 'traffic' is scored by agreement"):
        SuiteSpec(name="t", version="1", kind="traffic", scoring="numeric",
                  prompt_template="{q}")


def test_a_credential_in_an_id_is_refused_without_quoting_it(tmp_path: Path) -> None:
    rows = [*REQUESTS[:1], {**REQUESTS[3], "id": f"ticket {KEY}"}]
    with pytest.raises(InputError) as err:
        load_suite(str(traffic_folder(tmp_path, rows)))
    text = "\n".join(err.value.problems)
    assert "line 2: id or segments: a credential-shaped string (openai-key)" in text
    assert KEY not in text


def test_a_bad_traffic_file_names_its_line_and_field(tmp_path: Path) -> None:
    rows = [*REQUESTS[:1], {"id": "n", "segments": {"task": "support", "lang": "en"}}]
    with pytest.raises(InputError, match=r"line 2: messages: missing"):
        load_suite(str(traffic_folder(tmp_path, rows)))


class Engine:
    """An OpenAI-compatible stand-in: answers every chat request with `answer(body)` and
    keeps the bodies it was sent; /tokenize renders a chat as `<role>content` turns and
    counts a character a token; /v1/completions gives every prompt token the log-probability
    `logprob`."""

    def __init__(self, answer, logprob: float = -0.1):
        self.answer, self.logprob, self.bodies, self.tokenized = answer, logprob, [], []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            self.tokenized.append(body)
            text = "".join(f"<{m['role']}>{m['content']}" for m in body["messages"])
            text += "<assistant>" if body.get("add_generation_prompt") else ""
            return httpx.Response(200, json={"tokens": [ord(c) for c in text]})
        if request.url.path == "/v1/completions":
            [ids] = body["prompt"]
            return httpx.Response(200, json={"choices": [{"index": 0, "prompt_logprobs": [
                None, *({str(t): {"logprob": self.logprob}} for t in ids[1:])]}]})
        self.bodies.append(body)
        return httpx.Response(200, json={
            "choices": [{"message": {"content": self.answer(body)}, "finish_reason": "stop"}],
            "usage": {"completion_tokens": 7}})


def ask_all(suite, engine: Engine, seed: int = 3,
            references: dict[str, str] | None = None) -> list[ItemResult]:
    async def run() -> list[ItemResult]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(engine),
                                     base_url="http://engine") as client:
            return [await ask_request(client, "m", suite, item, seed,
                                      None if references is None else references[item.id])
                    for item in suite.items]
    return asyncio.run(run())


def sensible(body: dict) -> str:
    """A model that answers each request sensibly (and repeats a key it was given)."""
    last = body["messages"][-1]["content"]
    if "Extract" in last:
        return json.dumps({"name": "Ada", "note": KEY})
    return {"Where is my order?": "Your order left our warehouse yesterday and arrives soon.",
            "Weather in Oslo?": "It is cloudy in Oslo today, with light rain in the evening.",
            }.get(last, "Der Vertrag endet am 31. März nach drei Monaten Kündigungsfrist.")


def test_each_request_is_sent_with_its_own_parameters(tmp_path: Path) -> None:
    suite = load_suite(str(traffic_folder(tmp_path, REQUESTS)))
    engine = Engine(sensible)
    results = {r.id: r for r in ask_all(suite, engine)}
    sent = {b["messages"][-1]["content"][:7]: b for b in engine.bodies}
    support, extract, tools = sent["Where i"], sent["Extract"], sent["Weather"]
    assert support["messages"][0] == {"role": "system", "content": "You are a support agent."}
    assert (support["max_tokens"], support["temperature"], support["seed"]) == (64, 0.0, 3)
    assert extract["max_tokens"] == 40 and extract["response_format"]["type"] == "json_schema"
    assert tools["temperature"] == 0.7 and tools["tool_choice"] == "none"
    assert results["x1"].checks["schema_valid"] == 1.0
    assert results["t1"].checks["sampled"] == 1.0 and "sampled" not in results["s1"].checks
    assert results["s1"].checks["healthy"] == 1.0 and results["s1"].checks["refused"] == 0.0


def test_no_prompt_and_no_credential_is_kept_in_an_item(tmp_path: Path) -> None:
    suite = load_suite(str(traffic_folder(tmp_path, REQUESTS)))
    kept = json.dumps([r.__dict__ for r in ask_all(suite, Engine(sensible))])
    assert KEY not in kept and "[openai-key]" in kept  # the answer repeated it: redacted
    assert not any(i.prompt in kept for i in suite.items)


def test_an_engine_error_never_quotes_the_request(tmp_path: Path) -> None:
    suite = load_suite(str(traffic_folder(tmp_path, REQUESTS[1:2])))

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text=f"bad request: {request.content.decode()}")

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(refuse),
                                     base_url="http://engine") as client:
            await ask_request(client, "m", suite, suite.items[0], 0)
    with pytest.raises(Exception) as err:
        asyncio.run(run())
    assert "HTTP 400" in str(err.value) and KEY not in str(err.value)
    assert "Extract" not in str(err.value)


POLICY = GatePolicy(traffic=[QualityGate(suite="my-traffic", max_drop=0.10,
                                         slice_max_drop=0.30),
                             QualityGate(suite="my-traffic", metric="length_kept",
                                         max_drop=0.10)])


def judged(tmp_path: Path, candidate) -> dict[str, str]:
    """Every traffic gate's status, the baseline answering sensibly."""
    rows = [{**r, "id": f"{r['id']}-{k}"} for k in range(12) for r in REQUESTS]
    suite = load_suite(str(traffic_folder(tmp_path, rows)))
    base = summarise(suite, ask_all(suite, Engine(sensible)), tmp_path / "b.jsonl")
    cand = summarise(suite, ask_all(suite, Engine(candidate)), tmp_path / "c.jsonl")
    side = SimpleNamespace(load=SimpleNamespace(name="p"), headroom={}, further_load={},
                           server=SimpleNamespace(unmeasured=[]))
    ev = evidence(SimpleNamespace(**vars(side), suites={"my-traffic": base}),  # type: ignore[arg-type]
                  SimpleNamespace(**vars(side), suites={"my-traffic": cand}),  # type: ignore[arg-type]
                  {}, "cpu", tmp_path)
    assert isinstance(ev.base_suites["my-traffic"], SuiteResult)
    ev = replace(ev, servers=None)  # no engines here: the comparability gate is not judged
    return {str(o.gate): o.status for o in evaluate_gates(POLICY, ev, 0)
            if o.identity.section == "traffic"}


def test_the_baseline_against_itself_passes_every_traffic_gate(tmp_path: Path) -> None:
    statuses = judged(tmp_path, sensible)
    assert statuses and set(statuses.values()) == {"pass"}, statuses


def test_a_looping_candidate_fails_the_traffic_gates(tmp_path: Path) -> None:
    statuses = judged(tmp_path, lambda body: "the the the the " * 30)
    assert statuses["traffic:my-traffic"] == "fail", statuses
    assert "pass" not in {statuses[g] for g in statuses if "[" in g}, statuses


def test_a_looping_candidate_is_stopped_on_its_traffic(tmp_path: Path) -> None:
    """The early stop pairs the answers as the final judgement does (gate/early.py)."""
    rows = [{**r, "id": f"{r['id']}-{k}"} for k in range(12) for r in REQUESTS]
    suite = load_suite(str(traffic_folder(tmp_path, rows)))
    base = summarise(suite, ask_all(suite, Engine(sensible)), tmp_path / "b.jsonl")
    loop = summarise(suite, ask_all(suite, Engine(lambda body: "the the the " * 30)),
                     tmp_path / "c.jsonl")
    watch = EarlyStop(POLICY, {"my-traffic": base}, "cpu", 0, 1, lambda _name, r: r,
                      lambda _measured: {})
    stopped = watch.after({"my-traffic": loop}, ["arithmetic"])
    assert stopped is not None and "traffic:my-traffic" in [str(g) for g in stopped.gates]
    again = EarlyStop(POLICY, {"my-traffic": base}, "cpu", 0, 1, lambda _name, r: r,
                      lambda _measured: {})
    assert again.after({"my-traffic": base}, []) is None  # an A/A is never stopped


def test_a_traffic_suite_is_gated_under_traffic_only(tmp_path: Path) -> None:
    suite = load_suite(str(traffic_folder(tmp_path, REQUESTS)))
    wrong = GatePolicy(quality=[QualityGate(suite="my-traffic", max_drop=0.1)])
    problems = policy_problems(wrong, tmp_path / "gates.yaml", [suite])
    assert any("quality gate names suite 'my-traffic', a traffic suite" in p for p in problems)
    assert policy_problems(POLICY, tmp_path / "gates.yaml", [suite]) == []


def test_the_likelihood_of_the_baseline_s_answer_is_measured_under_each_model(
        tmp_path: Path) -> None:
    """Each side scores the baseline's answer through its own chat template: the baseline
    its own, the candidate the baseline's (not its own); exp of the mean log-probability of
    the answer's tokens alone, the request's tokens left out."""
    suite = load_suite(str(traffic_folder(tmp_path, REQUESTS[3:4])))
    base = ask_all(suite, Engine(sensible, logprob=-0.1))[0]
    assert base.checks["baseline_answer_likelihood"] == pytest.approx(0.904837, abs=1e-6)
    engine = Engine(lambda body: "the the the the", logprob=-2.0)
    cand = ask_all(suite, engine, references={"d1": base.response})[0]
    assert cand.checks["baseline_answer_likelihood"] == pytest.approx(0.135335, abs=1e-6)
    scored = engine.tokenized[-1]
    assert scored["messages"][-1] == {"role": "assistant", "content": base.response}
    assert scored["continue_final_message"] and not scored["add_generation_prompt"]
    empty = ask_all(suite, Engine(lambda body: ""), references={"d1": ""})[0]
    assert "baseline_answer_likelihood" not in empty.checks  # nothing to score


def test_a_sampled_request_is_held_to_the_baseline_s_own_second_draw(tmp_path: Path) -> None:
    """The baseline draws a sampled request twice (seeds s and s + 1): its own agreement is
    the second draw's against the first, not 1, and the candidate is held to that."""
    suite = load_suite(str(traffic_folder(tmp_path, REQUESTS[2:3])))  # temperature 0.7
    draws = iter(["It is cloudy in Oslo today.", "Oslo is cloudy today, with rain later."])
    engine = Engine(lambda body: next(draws))
    base = ask_all(suite, engine, seed=5)[0]
    assert [b["seed"] for b in engine.bodies] == [5, 6]
    assert base.redraw == "Oslo is cloudy today, with rain later."
    cand_engine = Engine(lambda body: "It is cloudy in Oslo today.")
    cand = ask_all(suite, cand_engine, seed=5, references={"t1": base.response})[0]
    assert cand.redraw is None and len(cand_engine.bodies) == 1  # the candidate draws once
    assert cand_engine.bodies[0]["seed"] == 6  # the redraw's seed, not the draw's
    b, c = against_baseline(summarise(suite, [base], tmp_path / "b.jsonl"),
                            summarise(suite, [cand], tmp_path / "c.jsonl"))
    assert 0 < b.items[0].score < 1 and b.items[0].checks["agreement_exact"] == 0.0
    assert c.items[0].score == 1.0  # the candidate's draw happens to equal the first


def test_a_sampled_request_asking_n_answers_is_drawn_n_times_on_each_side(
        tmp_path: Path) -> None:
    """n = 3 at temperature 0.7: both sides draw seeds s .. s + 2, the baseline also its
    redraws s + 3 .. s + 5; each agreement measure is the mean over the k-th draws, and
    each check the share of draws that meet it."""
    row = {**REQUESTS[2], "n": 3}
    suite = load_suite(str(traffic_folder(tmp_path, [row])))
    said = {5: "Cloudy in Oslo.", 6: "Rain in Oslo.", 7: "Oslo: sun.",
            8: "Cloudy in Oslo.", 9: "Rain in Oslo today.", 10: "Oslo: sun."}
    engine = Engine(lambda body: said[body["seed"]])
    base = ask_all(suite, engine, seed=5)[0]
    assert [b["seed"] for b in engine.bodies] == [5, 6, 7, 8, 9, 10]
    assert (base.response, base.draws) == ("Cloudy in Oslo.", ("Rain in Oslo.", "Oslo: sun."))
    assert (base.redraw, base.redraws) == ("Cloudy in Oslo.", ("Rain in Oslo today.",
                                                               "Oslo: sun."))
    cand_said = {8: "Cloudy in Oslo.", 9: "the the the the the the the the the the the",
                 10: "Oslo: sun."}
    cand_engine = Engine(lambda body: cand_said[body["seed"]])
    cand = ask_all(suite, cand_engine, seed=5, references={"t1": base.response})[0]
    # the baseline's redraws' seeds: held to its draws as its redraws are; no redraws
    assert [b["seed"] for b in cand_engine.bodies] == [8, 9, 10]
    assert cand.checks["healthy"] == pytest.approx(2 / 3)  # one draw of three loops
    assert cand.health == "ok" and cand.checks["sampled"] == 1.0  # the first draw's
    b, c = against_baseline(summarise(suite, [base], tmp_path / "b.jsonl"),
                            summarise(suite, [cand], tmp_path / "c.jsonl"))
    # the baseline's redraws agree exactly on two of three, the candidate's draws too
    assert b.items[0].checks["agreement_exact"] == pytest.approx(2 / 3)
    assert c.items[0].checks["agreement_exact"] == pytest.approx(2 / 3)
    assert c.items[0].score < b.items[0].score  # a loop agrees less than a rewording
    stored = json.loads(json.dumps(summarise(suite, [cand], tmp_path / "s.jsonl").to_dict()))
    assert SuiteResult.from_dict(stored).items[0].draws == cand.draws  # read back alike


def test_a_candidate_that_is_the_baseline_agrees_as_the_baseline_s_redraws_do(
        tmp_path: Path) -> None:
    """An A/A on a sampled request: the candidate, drawn with the redraws' seeds, answers
    exactly as the baseline's redraws; sharing the baseline's own seeds would have made it
    agree more than the baseline agrees with itself."""
    suite = load_suite(str(traffic_folder(tmp_path, [{**REQUESTS[2], "n": 2}])))
    same_model = Engine(lambda body: f"Oslo weather, draw {body['seed']}.")
    base = ask_all(suite, same_model, seed=5)[0]
    cand = ask_all(suite, same_model, seed=5, references={"t1": base.response})[0]
    b, c = against_baseline(summarise(suite, [base], tmp_path / "b.jsonl"),
                            summarise(suite, [cand], tmp_path / "c.jsonl"))
    assert c.items[0].checks == b.items[0].checks and c.items[0].score == b.items[0].score
    assert b.items[0].checks["agreement_exact"] == 0.0  # no draw equals another


def test_a_greedy_request_is_drawn_once_whatever_its_n(tmp_path: Path) -> None:
    suite = load_suite(str(traffic_folder(tmp_path, [{**REQUESTS[3], "n": 4}])))
    engine = Engine(sensible)
    item = ask_all(suite, engine)[0]
    assert len(engine.bodies) == 1 and item.draws == () and item.redraw is None
