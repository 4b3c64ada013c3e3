"""The suites on every core of a small CPU, the load test on vLLM's binding (issue 55):
the rule that picks the binding, the engine environment vLLM reads it from, the cache key,
the sessions it takes, and the record that states it."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from workbench.config.run_config import EngineConfig, RunConfig
from workbench.loadtest.results import LoadResult
from workbench.measure import sessions
from workbench.measure.cache import baseline_key
from workbench.measure.measurement import MEASUREMENT_FILE, Measurement
from workbench.measure.watch import StoppedEarly
from workbench.record.decision import host_facts
from workbench.serve.device import (
    EVERY_CORE_MIN_WEIGHTS,
    device_facts,
    suite_binding,
)
from workbench.serve.engine import EngineServer, ServerInfo
from workbench.suites.results import SuiteResult

BIG = 257 * 2**20  # the default model's weights
TINY = 12 * 2**20  # the tests' random Llama's


def _cfg(**engine: object) -> RunConfig:
    return RunConfig.model_validate({"model": {"name": "m", "path": "m"},
                                     "candidates": {"c": {"recipe": "none"}},
                                     "calibration": {"files": ["c.jsonl"]},
                                     "engine": {"max_model_len": 8192, **engine},
                                     "suites": ["arithmetic"], "gates": "g.yaml"})


def test_the_suites_take_every_core_of_two_for_a_model_whose_suites_take_minutes() -> None:
    auto = EngineConfig()
    assert suite_binding("cpu", auto, BIG, 2) == "every-core"  # in float32
    assert suite_binding("cpu", auto, EVERY_CORE_MIN_WEIGHTS, 2) == "every-core"
    # in bf16 the default model's suites were no faster on both cores (590 s against 593)
    assert suite_binding("cpu", auto, BIG, 2, "bfloat16") == "vllm"
    # a model so small its suites take seconds: one more engine start would not pay
    assert suite_binding("cpu", auto, TINY, 2) == "vllm"
    # more cores than measured: vLLM's binding leaves a smaller share idle
    assert suite_binding("cpu", auto, BIG, 4) == "vllm"
    assert suite_binding("cpu", auto, BIG, 1) == "vllm"  # nothing left idle
    assert suite_binding("cuda", auto, BIG, 2) == "vllm"  # computed on the GPU


def test_the_config_chooses_the_binding_on_a_cpu_only() -> None:
    assert suite_binding("cpu", EngineConfig(suite_binding="every-core"), TINY, 16) \
        == "every-core"
    assert suite_binding("cpu", EngineConfig(suite_binding="vllm"), BIG, 2) == "vllm"
    assert suite_binding("cuda", EngineConfig(suite_binding="every-core"), BIG, 2) == "vllm"


def test_the_engine_gets_vllms_own_variable_and_a_users_shell_cannot_change_it(
        monkeypatch, tmp_path) -> None:
    """vLLM 0.32 reads the reserved cores from VLLM_CPU_NUM_OF_RESERVED_CPU (vllm/envs.py;
    unset: vllm/utils/ompmultiprocessing.py reserves one core per rank)."""
    envs = pytest.importorskip("vllm.envs")
    model = tmp_path / "m"
    model.mkdir()
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")  # left in the user's shell
    facts = device_facts("cpu", EngineConfig())
    for binding, reserved in (("every-core", 0), ("vllm", None)):
        server = EngineServer(model, "m", EngineConfig(), tmp_path / "log", device="cpu",
                              facts=replace(facts, binding=binding))
        env = server._env()
        monkeypatch.setattr(os, "environ", env)
        assert envs.environment_variables["VLLM_CPU_NUM_OF_RESERVED_CPU"]() == reserved
        assert server.info.device_facts["binding"] == binding


def test_the_binding_enters_the_baseline_key_only_off_vllms_own() -> None:
    cfg = _cfg()
    before = baseline_key(cfg, "d", [], "cpu", "0.32.0", [])
    assert baseline_key(cfg, "d", [], "cpu", "0.32.0", [], None, "vllm") == before
    assert baseline_key(cfg, "d", [], "cpu", "0.32.0", [], None, "every-core") != before
    # as written in the config, it is not in the key: what it resolves to is
    assert baseline_key(_cfg(suite_binding="vllm"), "d", [], "cpu", "0.32.0", []) == before


def _measurement(role: str, suites: dict, load: str, binding: str,
                 stopped: StoppedEarly | None = None) -> Measurement:
    info = ServerInfo(model_path="m", served_name="m", device="cpu", command=[],
                      cold_start_s=1.0, log_file="log", device_facts={"binding": binding})
    return Measurement(role, info, suites, LoadResult(boundary=load, profile={}, levels=[]),
                       10.0, {"peak": 1} if load == "measured" else {}, {}, stopped)


class _Sessions:
    """measure() as measure_bound calls it: what each session was asked and answers."""

    def __init__(self, stopped: StoppedEarly | None = None) -> None:
        self.calls: list[dict] = []
        self.stopped = stopped

    def __call__(self, cfg, role, model_dir, served, extra_args, suites, requests,
                 tokenizer_dir, out_dir, console, device, **kw) -> Measurement:
        binding = kw.get("binding", "vllm")
        self.calls.append({"suites": list(suites), "binding": binding,
                           "load_test": kw.get("load_test", True)})
        answered = {"arithmetic": SuiteResult.from_dict(ARITHMETIC)} if suites else {}
        loads = binding == "vllm" and kw.get("load_test", True)
        return _measurement(role, answered, "measured" if loads else "not measured",
                            binding, self.stopped if suites else None)


ARITHMETIC = {"suite": "arithmetic", "version": "1", "digest": "d", "n": 0, "accuracy": 0.0,
              "slices": {}, "items_file": "items-arithmetic.jsonl", "items": []}


SUITE = SimpleNamespace(spec=SimpleNamespace(runs=lambda: [("arithmetic", False)]))


def _bound(monkeypatch, tmp_path: Path, binding: str, fake: _Sessions,
           load_test: bool = True, done: dict | None = None) -> Measurement:
    monkeypatch.setattr(sessions, "measure", fake)
    return sessions.measure_bound(binding, _cfg(), "candidate", tmp_path, "m", [], [SUITE],
                                  [], tmp_path, tmp_path, Console(quiet=True), "cpu",
                                  load_test=load_test, done=done)


def test_on_every_core_the_load_test_runs_in_a_session_of_its_own(monkeypatch,
                                                                    tmp_path) -> None:
    fake = _Sessions()
    m = _bound(monkeypatch, tmp_path, "every-core", fake)
    assert fake.calls == [{"suites": [SUITE], "binding": "every-core", "load_test": True},
                          {"suites": [], "binding": "vllm", "load_test": True}]
    # the answers from the first session, the load and its headroom from the second
    assert list(m.suites) == ["arithmetic"] and m.load.boundary == "measured"
    assert m.headroom == {"peak": 1} and m.server.device_facts["binding"] == "every-core"
    assert m.wall_time_s == 20.0
    stored = json.loads((tmp_path / MEASUREMENT_FILE).read_text())
    assert stored["load"]["boundary"] == "measured" and "arithmetic" in stored["suites"]


def test_on_vllms_binding_one_session_does_both_as_before(monkeypatch, tmp_path) -> None:
    fake = _Sessions()
    _bound(monkeypatch, tmp_path, "vllm", fake)
    assert fake.calls == [{"suites": [SUITE], "binding": "vllm", "load_test": True}]


def test_a_stopped_candidate_or_one_with_no_load_test_takes_no_second_session(
        monkeypatch, tmp_path) -> None:
    stop = StoppedEarly(after="arithmetic", gates=["quality:arithmetic"], evidence=[],
                        level="alpha 0.05", not_measured=["commonsenseqa"],
                        load_not_measured=True)
    for fake, load_test in ((_Sessions(stop), True), (_Sessions(), False)):
        m = _bound(monkeypatch, tmp_path, "every-core", fake, load_test)
        assert [c["binding"] for c in fake.calls] == ["every-core"]
        assert m.load.boundary == "not measured"


def test_the_record_states_where_the_suites_computed_on_a_cpu_only() -> None:
    assert host_facts("cpu", {"binding": "every-core"})["suite_binding"] == "every-core"
    # a measurement made before sessions had a binding ran on vLLM's
    assert host_facts("cpu", {})["suite_binding"] == "vllm"
    assert "suite_binding" not in host_facts("cuda", {})
    assert "suite_binding" not in host_facts("cpu", {}, here=False)  # at an endpoint


def test_decision_md_says_where_the_suites_computed_and_the_schema_takes_it() -> None:
    import jsonschema
    from builders import record

    from workbench.record.render import render_markdown
    from workbench.record.schema import schema_file

    rec = record("promote")
    rec = replace(rec, device={**rec.device, "suite_binding": "every-core"})
    assert "on every core (the load test in sessions on vLLM's binding)" \
        in render_markdown(rec)
    jsonschema.validate(json.loads(json.dumps(rec.to_dict())),
                        json.loads(schema_file().read_text()))
    older = replace(rec, device={k: v for k, v in rec.device.items() if k != "suite_binding"})
    assert "every core" not in render_markdown(older)


def test_a_resumed_candidate_with_every_suite_measured_takes_one_session(monkeypatch,
                                                                         tmp_path) -> None:
    """A stopped run resumed with --measure-all after its last suite: nothing is left for
    a session on every core, so its load test runs in one session, as before."""
    fake = _Sessions()
    _bound(monkeypatch, tmp_path, "every-core", fake,
           done={"arithmetic": SuiteResult.from_dict(ARITHMETIC)})
    assert [c["binding"] for c in fake.calls] == ["vllm"]


def test_suites_on_other_cores_are_not_comparable() -> None:
    from workbench.gate.comparability import comparability

    def info(binding: str | None) -> ServerInfo:
        facts = {"binding": binding} if binding else {}
        return ServerInfo(model_path="m", served_name="m", device="cpu", command=[],
                          cold_start_s=1.0, log_file="log", device_facts=facts)

    def cores_check(base: ServerInfo, cand: ServerInfo) -> dict:
        section, outcome = comparability(base, cand, {}, {})
        [check] = [c for c in section["checks"] if c["what"] == "suites' cores"]
        return {**check, "outcome": outcome.status, "detail": outcome.detail}

    assert cores_check(info(None), info("vllm"))["same"]  # before bindings: vLLM's
    differ = cores_check(info("vllm"), info("every-core"))
    assert not differ["same"] and differ["outcome"] == "fail"
    assert "suites' cores differs (vllm vs every-core)" in differ["detail"]


def test_engines_that_share_their_host_keep_vllms_binding(tmp_path) -> None:
    """A sweep fanned out over Ray: its tasks' engines share a node, and none takes every
    core (sweep/fanout.py)."""
    from workbench.config.gate_policy import GatePolicy
    from workbench.plan.plan import Plan

    (tmp_path / "model.safetensors").write_bytes(b"\0" * EVERY_CORE_MIN_WEIGHTS)
    cfg = _cfg(suite_binding="every-core").model_copy(
        update={"model": _cfg().model.model_copy(update={"path": str(tmp_path)})})
    alone = Plan(cfg, "c", "cpu", GatePolicy(), [], [])
    shared = Plan(cfg, "c", "cpu", GatePolicy(), [], [], shared_host=True)
    assert alone.suite_binding == "every-core" and shared.suite_binding == "vllm"
    assert shared.variant(cfg, "c", None).suite_binding == "vllm"


def test_a_plan_on_a_bf16_cpu_keeps_vllms_binding(tmp_path) -> None:
    """The unit tests' host multiplies bf16 natively (conftest): the default model's size
    of weights there keeps vLLM's binding under auto."""
    from workbench.config.gate_policy import GatePolicy
    from workbench.plan.plan import Plan

    (tmp_path / "model.safetensors").write_bytes(b"\0" * BIG)
    cfg = _cfg().model_copy(
        update={"model": _cfg().model.model_copy(update={"path": str(tmp_path)})})
    assert device_facts("cpu", cfg.engine).serve_dtype == "bfloat16"
    assert Plan(cfg, "c", "cpu", GatePolicy(), [], []).suite_binding == "vllm"
