"""The CI contract for bad input: exit 2, one line naming the file and key, nothing written
or started, and `validate` refusing exactly what `evaluate` refuses. One case per kind of
bad input a hostile new user tried (issue 13), each run through the real CLI with the
engine and the quantiser replaced by a stand-in that refuses to start."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from builders import stored_run
from contract_project import NUMERIC_ITEMS, Project, project, write_suite

__all__ = ["project"]  # the fixture, re-exported for pytest

Mutation = Callable[[Project], None]


def config_edit(**changes: object) -> Mutation:
    """Set dotted keys of the config (a value None deletes the key)."""
    def apply(p: Project) -> None:
        data = p.config
        for dotted, value in changes.items():
            *parents, last = dotted.split("__")
            node = data
            for part in parents:
                node = node.setdefault(part, {})
            if value is None:
                node.pop(last, None)
            else:
                node[last] = value
        p.write_config(data)
    return apply


def write_file(name: str, content: bytes | str) -> Mutation:
    def apply(p: Project) -> None:
        path = p.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return apply


def suite_with(spec: dict | None = None, items: list[dict] | None = None) -> Mutation:
    def apply(p: Project) -> None:
        base = {"name": "num", "version": "1", "kind": "quality", "scoring": "numeric",
                "prompt_template": "{question}", "max_tokens": 8}
        write_suite(p.suite, {**base, **(spec or {})}, items or NUMERIC_ITEMS)
    return apply


def gates_text(text: str) -> Mutation:
    return write_file("gates.yaml", text)


LONG = {"id": "long", "question": " ".join(["question"] * 600), "answer": 1}

# (case id, mutation, key words the one-line message must contain)
CASES: list[tuple[str, Mutation, tuple[str, ...]]] = [
    # names are data, not paths
    ("candidate-path", config_edit(candidates={"../../../ESCAPED": {"recipe": "none"}}),
     ("config.yaml", "candidates", "not a valid name")),
    ("candidate-300-chars", config_edit(candidates={"a" * 300: {"recipe": "none"}}),
     ("config.yaml", "candidates", "not a valid name")),
    ("suite-name-path", suite_with({"name": "../x"}), ("suite.yaml", "name")),
    ("experiment-path", config_edit(tracking={"experiment": "a/../b"}),
     ("tracking.experiment",)),
    # validate said ok, evaluate refused
    ("missing-model", config_edit(model={"name": "tiny", "path": "nowhere"}),
     ("config.yaml", "model.path", "not a model folder")),
    ("missing-calibration", config_edit(calibration__files=["data/none.jsonl"]),
     ("config.yaml", "calibration.files", "not found")),
    # the fuzz test's find: a name the filesystem refuses is bad input, not an OS failure
    ("calibration-name-too-long", config_edit(calibration__files=["c" * 300 + ".jsonl"]),
     ("config.yaml", "calibration.files", "File name too long")),
    ("ragged-group-size", config_edit(candidates={"int4": {"recipe": "w4a16",
                                                           "group_size": 256}}),
     ("config.yaml", "candidates.int4.group_size", "576")),
    ("too-many-samples", config_edit(calibration__num_samples=100000),
     ("config.yaml", "calibration.num_samples")),
    ("max-model-len-beyond-model", config_edit(engine={"max_model_len": 4096}),
     ("config.yaml", "engine.max_model_len", "2048")),
    # accepted up front, then real work started
    ("malformed-recipe-file", lambda p: (write_file("recipe.yaml", "a: [b\n")(p), config_edit(
        candidates={"int4": {"recipe_file": "recipe.yaml"}})(p)), ("recipe.yaml", "YAML")),
    ("empty-gate-file", gates_text(""), ("gates.yaml", "empty")),
    ("gate-file-a-list", gates_text("- quality\n"), ("gates.yaml", "mapping")),
    ("gate-file-no-gates", gates_text("confidence: 0.9\n"), ("gates.yaml", "no gate")),
    ("typo-metric", gates_text("quality:\n  - {suite: num, metric: scroe, max_drop: 0.1}\n"),
     ("gates.yaml", "scroe", "allowed")),
    ("bogus-tracking-scheme", config_edit(tracking={"uri": "bogus://x"}),
     ("config.yaml", "scheme")),
    ("numeric-answer-null", suite_with(items=[{**NUMERIC_ITEMS[0], "answer": None}]),
     ("items.jsonl:1", "number")),
    ("numeric-answer-word", suite_with(items=[{**NUMERIC_ITEMS[0], "answer": "seven"}]),
     ("items.jsonl:1", "number")),
    ("duplicate-yaml-key", write_file("config.yaml", "model: {name: a, path: model}\n"
                                      "model: {name: b, path: model}\n"),
     ("config.yaml", "duplicate key 'model'", "lines 1 and 2")),
    ("prompt-too-long", suite_with(items=[*NUMERIC_ITEMS, LONG]),
     ("suite.yaml", "'long'", "max_model_len")),
    # exit 3 "unexpected" instead of 2
    ("template-positional", suite_with({"prompt_template": "{}"}),
     ("suite.yaml", "prompt_template")),
    ("template-unbalanced", suite_with({"prompt_template": "{question"}),
     ("suite.yaml", "prompt_template")),
    ("config-not-utf8", write_file("config.yaml", b"model: {name: \xff\xfe}\n"),
     ("config.yaml", "UTF-8", "byte 14")),
    ("items-not-utf8", lambda p: (p.suite / "items.jsonl").write_bytes(b"\xff\n"),
     ("items.jsonl", "UTF-8")),
    # exit 2 only after writing
    ("missing-heldout", config_edit(calibration__heldout=["data/nothing.jsonl"]),
     ("config.yaml", "calibration.heldout", "not found")),
    # messages
    ("missing-gates-file", config_edit(gates="nothing.yaml"),
     ("config.yaml", "gates:", "nothing.yaml")),
    ("template-typo-once", suite_with({"prompt_template": "{questoin}"}),
     ("suite.yaml", "questoin")),
    ("engine-arg-reserved", config_edit(engine={"max_model_len": 512,
                                                "extra_args": ["--port", "1"]}),
     ("engine.extra_args", "--port")),
]


def _assert_refused(result, keys: tuple[str, ...], before: dict, p: Project) -> None:
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2, result.stdout + result.stderr
    assert lines and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr
    assert all(k in lines[0] for k in keys), lines
    assert all(len(ln) < 600 for ln in lines), "a problem line must not dump a whole config"
    assert p.files() == before, "a refused command wrote something"


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_up_front_by_evaluate_and_validate(project: Project, case) -> None:
    _, mutate, keys = case
    mutate(project)
    before = project.files()
    cfg = str(project.config_file)
    evaluated = project.run("evaluate", "--candidate", "int4", "--config", cfg)
    _assert_refused(evaluated, keys, before, project)
    validated = project.run("validate", "--candidate", "int4", "--config", cfg)
    _assert_refused(validated, keys, before, project)
    assert validated.stderr == evaluated.stderr  # the same checks, the same words
    tuned = project.run("tune", "--candidate", "int4", "--config", cfg)
    _assert_refused(tuned, keys, before, project)
    assert tuned.stderr == evaluated.stderr  # tune runs evaluate's checks first
    everything = project.run("validate", "--config", cfg)
    _assert_refused(everything, keys, before, project)


def test_the_valid_project_is_accepted_by_both(project: Project) -> None:
    """The cases above fail for their mutation alone: unmutated, both accept."""
    cfg = str(project.config_file)
    assert project.run("validate", "--candidate", "int4", "--config", cfg).exit_code == 0
    evaluated = project.run("evaluate", "--candidate", "int4", "--config", cfg)
    assert evaluated.accepted, evaluated.stderr


def test_a_template_typo_is_one_line_not_one_per_item(project: Project) -> None:
    suite_with({"prompt_template": "{questoin}"})(project)
    result = project.run("validate", "--config", str(project.config_file))
    assert len([ln for ln in result.stderr.splitlines() if ln.startswith("error:")]) == 1


def test_a_cross_field_error_names_its_fields_and_dumps_nothing(project: Project) -> None:
    data = project.config
    data["load"]["profiles"]["tiny"]["prompt_tokens"] = 600
    project.write_config(data)
    result = project.run("validate", "--config", str(project.config_file))
    line = result.stderr.splitlines()[0]
    assert result.exit_code == 2 and "load.profiles.tiny" in line
    assert "engine.max_model_len" in line and "(top level)" not in line
    assert "candidates" not in line  # the config itself is not printed


@pytest.mark.parametrize("where", ["runs-dir-a-file", "junit-under-a-file",
                                   "summary-a-folder"])
def test_unwritable_outputs_are_refused_before_anything(project: Project, where: str) -> None:
    blocker = project.root / "blocker"
    blocker.write_text("a file")
    args = {"runs-dir-a-file": ["--runs-dir", str(blocker)],
            "junit-under-a-file": ["--junit", str(blocker / "junit.xml")],
            "summary-a-folder": ["--summary", str(project.root)]}[where]
    before = project.files()
    result = project.run("evaluate", "--candidate", "int4", "--config",
                         str(project.config_file), *args)
    _assert_refused(result, (args[0],), before, project)
    validated = project.run("validate", "--candidate", "int4", "--config",
                            str(project.config_file), *args)
    assert validated.stderr == result.stderr


def test_an_unreachable_tracking_server_is_refused_in_seconds(project: Project) -> None:
    import time

    config_edit(tracking={"uri": "http://127.0.0.1:9"})(project)
    before = project.files()
    started = time.monotonic()
    result = project.run("evaluate", "--candidate", "int4", "--config",
                         str(project.config_file))
    assert time.monotonic() - started < 15
    _assert_refused(result, ("unreachable", "tracking.required: false"), before, project)


def test_tracking_not_required_runs_without_a_server(project: Project) -> None:
    config_edit(tracking={"uri": "http://127.0.0.1:9", "required": False})(project)
    result = project.run("evaluate", "--candidate", "int4", "--config",
                         str(project.config_file))
    assert result.accepted, result.stderr


def test_quantize_and_serve_check_before_working(project: Project) -> None:
    config_edit(model={"name": "tiny", "path": "nowhere"})(project)
    before = project.files()
    cfg = str(project.config_file)
    for args in (["serve"], ["serve", "--candidate", "int4"], ["quantize", "--all"]):
        _assert_refused(project.run(*args, "--config", cfg), ("model.path",), before, project)


# --- stored records are untrusted input: `workbench gate` ---


GATE_CASES = [
    ("record-a-list", lambda d: (d / "decision.json").write_text("[]"),
     ("decision.json",)),
    ("record-not-utf8", lambda d: (d / "decision.json").write_bytes(b"{\"a\": \"\xff\"}"),
     ("decision.json", "UTF-8")),
    ("record-truncated", lambda d: (d / "decision.json").write_text(
        (d / "decision.json").read_text()[:200]), ("decision.json", "not valid JSON")),
    ("gate-entry-unknown-field", lambda d: (d / "decision.json").write_text(json.dumps({
        **json.loads((d / "decision.json").read_text()), "gates": [
            {"gate": "g", "status": "pass", "detail": "", "sneaky": 1}]})),
     ("decision.json", "gates.0")),
    ("measurement-truncated", lambda d: (d / "candidate").mkdir() or (
        d / "candidate" / "measurement.json").write_text('{"role": "cand'),
     ("measurement.json", "not valid JSON")),
    ("measurement-retyped", lambda d: (d / "baseline").mkdir() or (
        d / "baseline" / "measurement.json").write_text('{"role": 1}'),
     ("measurement.json",)),
]


@pytest.mark.parametrize("case", GATE_CASES, ids=[c[0] for c in GATE_CASES])
def test_gate_refuses_a_damaged_run_folder_and_writes_nothing(project: Project, case) -> None:
    _, damage, keys = case
    run_dir = stored_run(project.root / "run")
    damage(run_dir)
    before = project.files()
    result = project.run("gate", str(run_dir))
    _assert_refused(result, keys, before, project)


def test_gate_junit_under_a_file_writes_no_gate_folder(project: Project) -> None:
    run_dir = stored_run(project.root / "run")
    (project.root / "blocker").write_text("x")
    before = project.files()
    result = project.run("gate", str(run_dir), "--junit", str(project.root / "blocker" / "j.xml"))
    _assert_refused(result, ("--junit",), before, project)
    assert not list(run_dir.glob("gate-*"))


def test_the_shipped_config_passes_validate_for_every_candidate_this_device_serves() -> None:
    from click.testing import CliRunner

    from workbench.cli import main
    from workbench.mechanisms.paths import SHIPPED, default_model_dir

    if not (default_model_dir() / "config.json").is_file():
        pytest.skip("the default model is not set up (scripts/setup.sh)")
    cfg = str(SHIPPED / "configs/default.yaml")
    assert CliRunner().invoke(main, ["validate", "--config", cfg]).exit_code == 0
    for candidate in ("int4", "kv-fp8-dynamic"):
        result = CliRunner().invoke(main, ["validate", "--config", cfg, "--candidate",
                                           candidate])
        assert result.exit_code == 0, result.output


def test_engine_arguments_are_parsed_by_vllms_own_parser(tmp_path: Path, monkeypatch) -> None:
    """Needs the engine environment (scripts/setup.sh); parses, never starts an engine."""
    from workbench.mechanisms.paths import engine_python
    from workbench.plan.checks import _parse_engine_args

    real = engine_python()
    if not real.exists():
        pytest.skip("the engine environment is not set up (scripts/setup.sh)")
    monkeypatch.setenv("WORKBENCH_ENGINE_PYTHON", str(real))
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    refused = _parse_engine_args(["--max-num-seqs", "4", "--no-such-flag"])
    assert refused is not None and "--no-such-flag" in refused
    assert _parse_engine_args(["--max-num-seqs", "4"]) is None
    assert list((tmp_path / "cache" / "engine-args").glob("*.ok"))  # remembered
