"""Only the candidate differs: the comparability gate and the up-front check on a ready
checkpoint's tokenizer files."""

import json
from pathlib import Path

from builders import suite_result

from workbench.gate.comparability import comparability, shared_args
from workbench.mechanisms.digests import model_file_digests
from workbench.quantize.checks import model_file_problems
from workbench.serve.engine import ServerInfo

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def model_folder(root: Path, template: str = TEMPLATE) -> Path:
    root.mkdir(parents=True)
    (root / "tokenizer_config.json").write_text(json.dumps({"chat_template": template,
                                                            "model_max_length": 2048}))
    (root / "tokenizer.json").write_text('{"vocab": {"a": 0}}')
    (root / "generation_config.json").write_text('{"temperature": 0.6}')
    return root


def server(folder: Path, own: list[str] | None = None, **kw: object) -> ServerInfo:
    command = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
               "--served-model-name", "m", "--port", "123", "--seed", "0", *(own or [])]
    info = ServerInfo(str(folder), "m", "cpu", command, 1.0, "log", version="0.32.0",
                      own_args=own or [], model_files=model_file_digests(folder),
                      prefix_cache_at_start="empty (a new engine process)")
    for k, v in kw.items():
        setattr(info, k, v)
    return info


def test_the_session_and_the_candidates_own_arguments_are_not_compared(tmp_path: Path) -> None:
    info = server(tmp_path, ["--kv-cache-dtype", "fp8"])
    assert shared_args(info) == ["--seed", "0"]


def test_the_same_model_files_and_arguments_pass(tmp_path: Path) -> None:
    base = server(model_folder(tmp_path / "b"))
    cand = server(model_folder(tmp_path / "c"), ["--kv-cache-dtype", "fp8"])
    suites = {"q": suite_result([1.0, 0.0])}
    section, gate = comparability(base, cand, suites, suites)
    assert gate.status == "pass", gate.detail
    assert "--kv-cache-dtype fp8" in gate.detail and section["candidate_args"][-1] == "fp8"
    assert section["prefix_cache_at_start"]["candidate"].startswith("empty")


def test_a_chat_template_difference_fails_the_gate_by_name(tmp_path: Path) -> None:
    base = server(model_folder(tmp_path / "b"))
    cand = server(model_folder(tmp_path / "c", TEMPLATE + "<|assistant|>"))
    _, gate = comparability(base, cand, {}, {})
    assert gate.status == "fail" and "chat_template differs" in gate.detail
    assert "tokenizer differs" not in gate.detail  # the template is told apart from the rest


def test_an_unasked_engine_argument_fails_the_gate(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "b")
    base = server(folder)
    cand = server(folder)
    cand.command = [*cand.command, "--max-num-seqs", "4"]  # not the candidate's own
    _, gate = comparability(base, cand, {}, {})
    assert gate.status == "fail"
    assert "candidate only: --max-num-seqs 4" in gate.detail


def test_facts_a_side_did_not_record_fail_closed(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "b")
    base, cand = server(folder), server(folder, model_files={})
    _, gate = comparability(base, cand, {}, {})
    assert gate.status == "fail" and "recorded before comparability checks existed" in \
        gate.detail
    _, gate = comparability(base, None, {}, {})
    assert gate.status == "fail"


def test_a_ready_checkpoint_with_another_chat_template_is_refused_up_front(
        tmp_path: Path) -> None:
    base = model_folder(tmp_path / "b")
    same = model_folder(tmp_path / "same")
    other = model_folder(tmp_path / "other", "{{ messages[-1]['content'] }}")
    assert model_file_problems("c.yaml: candidates.x", base, same) == []
    problems = model_file_problems("c.yaml: candidates.x", base, other)
    assert len(problems) == 1 and "chat template differs" in problems[0]


def test_validate_names_each_suites_gate_and_a_blind_suite_from_the_cached_baseline(
        monkeypatch) -> None:
    import dataclasses

    from workbench.config.gate_policy import GatePolicy, QualityGate, SuiteDefault, SuiteDefaults
    from workbench.loadtest.results import LoadResult
    from workbench.measure.measurement import Measurement
    from workbench.pipeline import coverage
    from workbench.suites.definition import load_suite

    suites = [load_suite("arithmetic"), load_suite("truthfulness")]
    blind = dataclasses.replace(suite_result([0.0, 1.0]), suite="truthfulness")
    blind.items[:] = [dataclasses.replace(i, response=" same", choice_probs=(0.9, 0.1))
                      for i in blind.items]
    cached = Measurement("baseline", server(Path(".")), {"truthfulness": blind},
                         LoadResult("client", {}, []), 0.0)
    monkeypatch.setattr(coverage, "_cached_baseline", lambda p: cached)
    policy = GatePolicy(quality=[QualityGate(suite="arithmetic", max_drop=0.05)],
                        defaults=SuiteDefaults(quality=SuiteDefault(max_drop=0.1)))
    plan = type("P", (), {"endpoint_roles": []})()
    lines = coverage.coverage_lines(policy, suites, plan)  # type: ignore[arg-type]
    assert lines[0] == "  arithmetic: quality gate (max_drop 0.05)"
    assert lines[1].startswith("  truthfulness: the policy's quality default — the cached "
                               "baseline gives one answer to every item")
    # a cached baseline scoring within the gate's margin: nothing to lose, it cannot fail
    low = dataclasses.replace(suite_result([1.0] + [0.0] * 19), suite="arithmetic")
    cached.suites["arithmetic"] = low
    policy.quality[0] = QualityGate(suite="arithmetic", max_drop=0.15)
    lines = coverage.coverage_lines(policy, suites, plan)  # type: ignore[arg-type]
    assert lines[0] == ("  arithmetic: quality gate (max_drop 0.15) — the cached baseline "
                        "scores 0.050, within its margin 0.15: the gate cannot fail "
                        "(docs/gates.md)")


def test_a_baseline_served_on_another_platform_is_not_comparable(tmp_path: Path) -> None:
    """A baseline cached before zentorch was installed ran on vLLM's CPU platform; a
    candidate served after it, on AMD Zen's: the comparability gate fails, naming it."""
    base = server(model_folder(tmp_path / "b"))
    cand = server(model_folder(tmp_path / "c"), kernels={"platform": "ZenCpuPlatform"})
    _, gate = comparability(base, cand, {}, {})
    assert gate.status == "fail" and "engine platform differs" in gate.detail, gate.detail
    _, same = comparability(base, server(model_folder(tmp_path / "d")), {}, {})
    assert same.status == "pass", same.detail
