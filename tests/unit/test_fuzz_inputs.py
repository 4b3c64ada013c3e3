"""Property-based fuzzing of every input a command reads (hypothesis): configs, gate
policies, suites (spec and items), load traces and stored run folders are mutated — keys
deleted, values retyped, keys duplicated, bytes corrupted or cut — and each command must
either accept the input (reach the stand-in for the engine and quantiser) or exit 2 with
one line naming a file; never a traceback, never exit 3, never anything written before
refusing; and `validate` must accept exactly what `evaluate` accepts.

FUZZ_EXAMPLES sets the number of cases per test (default 600: four tests, about 2,800 cases in
about a minute); docs/reliability.md records a longer run and its findings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from contract_project import Project, Result, project

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

__all__ = ["project"]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "600"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**9),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
                    st.sampled_from(["../../x", "a" * 300, "{}", "{q", "\x00", "é", "nan",
                                     "/etc/passwd", "-1", "0", "true"]))
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3),
                   st.dictionaries(st.text(max_size=8), SCALARS, max_size=3))


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a parsed document."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _paths(v, (*prefix, i))
    return found


def _mutate_tree(doc: object, data: st.DataObject) -> object:
    paths = _paths(doc)
    if not paths:
        return data.draw(VALUES)
    path = data.draw(st.sampled_from(paths))
    parent = doc
    for part in path[:-1]:
        parent = parent[part]  # type: ignore[index]
    op = data.draw(st.sampled_from(["delete", "retype", "rename"]))
    key = path[-1]
    if op == "delete":
        del parent[key]  # type: ignore[index,union-attr]
    elif op == "retype" or isinstance(parent, list):
        parent[key] = data.draw(VALUES)  # type: ignore[index]
    else:
        parent[data.draw(st.text(min_size=1, max_size=10))] = parent.pop(key)  # type: ignore
    return doc


def _mutate_bytes(raw: bytes, data: st.DataObject) -> bytes:
    op = data.draw(st.sampled_from(["flip", "cut", "insert", "duplicate-line"]))
    at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
    if op == "flip":
        return raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1:]
    if op == "cut":
        return raw[:at]
    if op == "insert":
        return raw[:at] + data.draw(st.binary(min_size=1, max_size=4)) + raw[at:]
    lines = raw.split(b"\n")
    i = data.draw(st.integers(0, len(lines) - 1))
    return b"\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])


def _parsed(path: Path, raw: bytes) -> object:
    if path.suffix == ".jsonl":
        return [json.loads(ln) for ln in raw.decode().splitlines() if ln.strip()]
    return json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)


def mutate_file(path: Path, data: st.DataObject) -> None:
    """One mutation of a YAML, JSON or JSONL file: on its structure (while it still
    parses), or on its bytes."""
    raw = path.read_bytes()
    try:
        doc = _parsed(path, raw)
    except (ValueError, yaml.YAMLError):
        doc = None
    if doc is not None and data.draw(st.booleans(), label="structural"):
        if path.suffix == ".jsonl" and isinstance(doc, list) and doc:
            i = data.draw(st.integers(0, len(doc) - 1))
            doc[i] = _mutate_tree(doc[i], data)
            path.write_text("".join(json.dumps(r) + "\n" for r in doc))
        elif path.suffix == ".json":
            path.write_text(json.dumps(_mutate_tree(doc, data)))
        else:
            path.write_text(yaml.safe_dump(_mutate_tree(doc, data)))
    else:
        path.write_bytes(_mutate_bytes(raw, data))


class Restore:
    """Put the project's input files back as they were after each example."""

    def __init__(self, p: Project, files: list[Path]) -> None:
        self.saved = {f: f.read_bytes() for f in files}
        self.p = p

    def __call__(self) -> None:
        for f, content in self.saved.items():
            f.write_bytes(content)


def check_refusal_or_acceptance(result: Result, before: dict, p: Project) -> None:
    """Accepted (the stand-in reached, or validate's exit 0), or refused by the contract."""
    assert "Traceback" not in result.stderr, result.stderr
    assert "uncaught" not in result.stderr, result.stderr
    assert "error: unexpected" not in result.stderr.replace("unexpected StandInReached", ""), \
        result.stderr
    if result.accepted or (result.exit_code == 0 and result.stdout.startswith("ok: ")):
        return
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    first = result.stderr.splitlines()[0]
    assert first.startswith("error: ") and ("/" in first or "--" in first), first
    assert p.files() == before, "a refused command wrote something"


CASES: dict[str, int] = {}  # test -> cases run, for the report in docs/reliability.md


def _count(test: str) -> None:
    CASES[test] = CASES.get(test, 0) + 1


def _fuzz_inputs(p: Project, targets: list[Path], data: st.DataObject) -> None:
    _count(targets[0].name)
    restore = Restore(p, targets)
    try:
        for target in data.draw(st.lists(st.sampled_from(targets), min_size=1, max_size=2,
                                          unique=True)):
            mutate_file(target, data)
        before = p.files()
        cfg = str(p.config_file)
        evaluated = p.run("evaluate", "--candidate", "int4", "--config", cfg)
        check_refusal_or_acceptance(evaluated, before, p)
        validated = p.run("validate", "--candidate", "int4", "--config", cfg)
        check_refusal_or_acceptance(validated, before, p)
        assert (validated.exit_code == 0) == evaluated.accepted, (validated.stderr,
                                                                  evaluated.stderr)
    finally:
        restore()


FAMILIES = {"config and policy": lambda p: [p.config_file, p.root / "gates.yaml"],
            "suite": lambda p: [p.suite / "suite.yaml", p.suite / "items.jsonl"]}


@pytest.mark.parametrize("family", FAMILIES)
def test_fuzzed_configs_policies_and_suites(project: Project, family: str) -> None:
    targets = FAMILIES[family](project)

    @FUZZ
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        _fuzz_inputs(project, targets, data)

    run()


def test_fuzzed_traces(project: Project) -> None:
    trace = project.root / "trace.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": i * 0.5, "prompt_tokens": 16,
                                         "output_tokens": 8}) + "\n" for i in range(4)))
    data_cfg = project.config
    data_cfg["load"]["profiles"]["tiny"] = {"trace": "trace.jsonl", "warmup_prompts": 0}
    project.write_config(data_cfg)

    @FUZZ
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        _fuzz_inputs(project, [trace], data)

    run()


def test_fuzzed_stored_run_folders(project: Project) -> None:
    """`workbench gate` on a run folder whose record, measurement or policy is damaged."""
    from builders import record, stored_run

    from workbench.measure.measurement import Measurement

    run_dir = stored_run(project.root / "run")
    rec = record("promote")
    for role in ("baseline", "candidate"):
        (run_dir / role).mkdir()
        m = Measurement.from_dict(json.loads(json.dumps(_measurement(rec, role))))
        (run_dir / role / "measurement.json").write_text(json.dumps(m.to_dict()))
    targets = [run_dir / "decision.json", run_dir / "gates.yaml",
               run_dir / "candidate" / "measurement.json"]
    assert project.run("gate", str(run_dir)).exit_code in (0, 1)  # unmutated: judged

    @FUZZ
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        _count("run folder")
        restore = Restore(project, targets)
        try:
            mutate_file(data.draw(st.sampled_from(targets)), data)
            before = project.files()
            result = project.run("gate", str(run_dir), "--out", str(project.root / "out"))
            assert "Traceback" not in result.stderr, result.stderr
            assert "error: unexpected" not in result.stderr, result.stderr
            if result.exit_code == 2:
                assert result.stderr.startswith("error: ") and project.files() == before
            else:
                assert result.exit_code in (0, 1), result.stderr
        finally:
            restore()
            import shutil

            shutil.rmtree(project.root / "out", ignore_errors=True)

    run()


def _measurement(rec, role: str) -> dict:
    """A small valid measurement.json for one model (one suite item, one load level)."""
    level = rec.load[role]["levels"][0]
    item = {"id": "q1", "slices": ["all"], "prompt_sha256": "0" * 64, "response": "2",
            "score": 1.0, "latency_s": 0.1, "completion_tokens": 1}
    return {"role": role, "server": {"model_path": "/m", "served_name": "m", "device": "cpu",
                                     "command": ["vllm"], "cold_start_s": 1.0,
                                     "log_file": "server.log"},
            "suites": {"arithmetic": {"suite": "arithmetic", "version": "1", "digest": "d",
                                      "n": 1, "accuracy": 1.0, "slices": {}, "items_file": "i",
                                      "items": [item]}},
            "load": {"boundary": "client", "profile": {}, **rec.load[role], "levels": [level]},
            "wall_time_s": 1.0,
            "headroom": rec.headroom.get(role, {})}


def test_report_case_counts() -> None:
    """Prints how many cases each fuzz test ran (pytest -s shows it); runs last."""
    print(f"fuzz cases: {CASES} total {sum(CASES.values())}")
    assert not CASES or sum(CASES.values()) >= EXAMPLES
