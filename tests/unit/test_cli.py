from pathlib import Path

from click.testing import CliRunner

from workbench.cli import main

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "configs" / "default.yaml"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_help_lists_every_command() -> None:
    result = run("--help")
    assert result.exit_code == 0
    for command in ("evaluate", "quantize", "serve", "validate"):
        assert command in result.output
    for command in ("evaluate", "quantize", "serve", "validate"):
        assert run(command, "--help").exit_code == 0


def test_validate_accepts_the_default_config() -> None:
    result = run("validate", "--config", str(DEFAULT))
    assert result.exit_code == 0 and "ok" in result.output


def test_unknown_candidate_exits_2_naming_known_ones(tmp_path: Path) -> None:
    result = run("evaluate", "--config", str(DEFAULT), "--candidate", "nope",
                 "--runs-dir", str(tmp_path / "runs"))
    assert result.exit_code == 2
    assert "unknown candidate 'nope'; known candidates: fp8, fp8+kv-fp8, int4" in result.output
    assert not (tmp_path / "runs").exists()  # nothing written half-way


def test_typo_in_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEFAULT.read_text().replace("max_model_len:", "max_model_lenn:"))
    bad_gates = tmp_path / "gates" / "default.yaml"
    bad_gates.parent.mkdir()
    bad_gates.write_text((REPO / "configs" / "gates" / "default.yaml").read_text())
    result = run("evaluate", "--config", str(bad), "--candidate", "int4")
    assert result.exit_code == 2
    assert f"{bad}: engine.max_model_lenn: unknown key" in result.output
    assert len(result.output.strip().splitlines()) == 1  # one line, no traceback


def test_missing_config_file_exits_2() -> None:
    result = run("validate", "--config", "no/such.yaml")
    assert result.exit_code == 2 and "no/such.yaml: cannot read" in result.output


def test_validate_reports_gate_and_suite_problems_together(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(DEFAULT.read_text().replace("[arithmetic,", "[nope, arithmetic,")
                   .replace("gates: gates/default.yaml", "gates: g.yaml"))
    (tmp_path / "g.yaml").write_text("quality:\n  - suite: arithmetic\n    max_drop: 2\n")
    result = run("validate", "--config", str(cfg))
    assert result.exit_code == 2
    assert "g.yaml: quality.0.max_drop" in result.output
    assert "suite 'nope' not found" in result.output


def test_missing_calibration_file_is_caught_before_any_run_starts(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(DEFAULT.read_text()
                   .replace("calibration_data/shakespeare_milton.jsonl", "nowhere.jsonl")
                   .replace("path: default", f"path: {tmp_path}")
                   .replace("gates: gates/default.yaml",
                            f"gates: {REPO / 'configs' / 'gates' / 'default.yaml'}"))
    (tmp_path / "config.json").write_text("{}")  # looks like a model folder
    result = run("evaluate", "--config", str(cfg), "--candidate", "int4",
                 "--runs-dir", str(tmp_path / "runs"))
    assert result.exit_code == 2
    assert "calibration.files: 'nowhere.jsonl' not found" in result.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def _config_with_fake_model(tmp_path: Path, extra_candidates: str = "") -> Path:
    """The default config on a folder that has only a SmolLM2-shaped config.json."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        '{"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, '
        '"head_dim": 64}')
    text = DEFAULT.read_text().replace("path: default ", f"path: {model} ").replace(
        "candidates:\n", "candidates:\n" + extra_candidates).replace(
        "gates: gates/default.yaml", f"gates: {REPO}/configs/gates/default.yaml")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    return cfg


def test_candidate_the_cpu_engine_cannot_serve_exits_2_before_any_work(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("workbench.plan.plan.detect_device", lambda: "cpu")
    cfg = _config_with_fake_model(tmp_path)
    result = run("evaluate", "--config", str(cfg), "--candidate", "int8-wo",
                 "--runs-dir", str(tmp_path / "runs"))
    assert result.exit_code == 2
    assert "candidates.int8-wo: unsupported on cpu" in result.output
    assert "CPUWNA16" in result.output
    assert not (tmp_path / "runs").exists()


def test_group_size_that_does_not_divide_the_model_exits_2(tmp_path: Path) -> None:
    cfg = _config_with_fake_model(tmp_path, "  int4g128: {recipe: w4a16, group_size: 128}\n")
    result = run("quantize", "--config", str(cfg), "--candidate", "int4g128",
                 "--runs-dir", str(tmp_path / "runs"))
    assert result.exit_code == 2
    assert "candidates.int4g128.group_size: 128 does not divide" in result.output
    assert "hidden_size) = 576" in result.output and "(largest: 64)" in result.output
    assert not (tmp_path / "runs").exists()


def test_quantize_needs_exactly_one_of_candidate_or_all(tmp_path: Path) -> None:
    for args in ([], ["--all", "--candidate", "int4"]):
        result = run("quantize", "--config", str(DEFAULT), *args)
        assert result.exit_code == 2 and "--candidate NAME (repeatable) or --all" in result.output
    result = run("quantize", "--config", str(DEFAULT), "--candidate", "int4", "--candidate", "x")
    assert result.exit_code == 2 and "unknown candidate 'x'" in result.output


def test_validate_all_suites_checks_every_shipped_suite() -> None:
    result = run("validate", "--config", str(DEFAULT), "--all-suites")
    shipped = len(list((REPO / "eval_suites").glob("*/*/suite.yaml")))
    assert result.exit_code == 0, result.output
    assert f"{shipped} suite(s) checked" in result.output and shipped >= 9


def test_an_unexpected_crash_exits_3_not_the_reject_code(monkeypatch) -> None:
    import workbench.cli as cli

    def crash(*_args, **_kwargs):
        raise ValueError("metric name 'x+' is not allowed")

    monkeypatch.setattr(cli, "run_evaluate", crash)
    result = run("evaluate", "--config", str(DEFAULT), "--candidate", "int4")
    assert result.exit_code == 3
    assert "unexpected ValueError: metric name 'x+' is not allowed" in result.output


def test_a_bad_trace_in_any_profile_fails_validate_and_evaluate_before_work(
        tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"arrival_s": 0, "prompt_tokens": 10, '
                                      '"output_tokens": 5}\n{"arrival_s": 1}\n')
    cfg = tmp_path / "c.yaml"
    cfg.write_text(DEFAULT.read_text().replace("trace: load_traces/example.jsonl",
                                               f"trace: {tmp_path / 't.jsonl'}")
                   .replace("gates: gates/default.yaml",
                            f"gates: {REPO / 'configs' / 'gates' / 'default.yaml'}"))
    result = run("validate", "--config", str(cfg))  # `replay` is not the selected profile
    assert result.exit_code == 2
    assert f"{tmp_path / 't.jsonl'}:2: prompt_tokens must be a whole number" in result.output
    result = run("evaluate", "--config", str(cfg), "--candidate", "int4", "--load-profile",
                 "replay", "--runs-dir", str(tmp_path / "runs"))
    assert result.exit_code == 2 and "t.jsonl:2:" in result.output
    assert not (tmp_path / "runs").exists()  # nothing written half-way


def test_a_gate_naming_a_suite_the_config_does_not_run_exits_2(tmp_path: Path) -> None:
    gates = tmp_path / "g.yaml"
    gates.write_text("safety:\n  - suite: harmbench\n    max_drop: 0.1\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(DEFAULT.read_text().replace("gates: gates/default.yaml", f"gates: {gates}"))
    result = run("validate", "--config", str(cfg))
    assert result.exit_code == 2
    assert "safety gate names suite 'harmbench', which the config does not run" in result.output


def test_sweep_needs_candidates_and_refuses_an_unknown_one_before_any_work(
        tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert run("sweep", "--config", str(DEFAULT), "--runs-dir", str(runs)).exit_code == 2
    result = run("sweep", "--config", str(DEFAULT), "--candidate", "int4", "--candidate",
                 "nope", "--runs-dir", str(runs))
    assert result.exit_code == 2 and "unknown candidate 'nope'" in result.output
    assert not runs.exists()


def test_sweep_sets_aside_what_this_device_cannot_serve_or_serves_only_by_emulation(
        tmp_path: Path) -> None:
    from workbench.config.run_config import load_config
    from workbench.plan.plan import Outputs
    from workbench.sweep.run import choose

    cfg = load_config(DEFAULT)
    chosen = choose(cfg, list(cfg.candidates), Outputs(runs_dir=tmp_path / "runs"), "cpu",
                    include_slow=False)
    assert [p.candidate_name for p in chosen.plans] == ["int4", "int8", "kv-fp8",
                                                        "kv-fp8-dynamic"]
    skipped = {r.candidate: r.reason for r in chosen.skipped}
    assert set(skipped) == {"int8-wo", "fp8", "fp8+kv-fp8"}
    assert "CPUWNA16" in skipped["int8-wo"]
    assert "emulated on cpu (about 1.5 output tokens/s)" in skipped["fp8"]
    assert "--include-slow" in skipped["fp8"] and " h;" in skipped["fp8"]
    assert not (tmp_path / "runs").exists()
    slow = choose(cfg, ["fp8"], Outputs(runs_dir=tmp_path / "runs"), "cpu", include_slow=True)
    assert [p.candidate_name for p in slow.plans] == ["fp8"]


def test_profile_on_the_command_line_overrides_the_configs_in_validate_and_the_fanout(
        tmp_path: Path) -> None:
    """`--profile full` runs every item of every suite, the smoke sample being the config's
    choice; a fanned-out sweep's tasks rebuild the driver's choice from the config file."""
    import re

    from workbench.config.run_config import load_config
    from workbench.suites.definition import load_suite
    from workbench.sweep.fanout import _task_plan

    cfg = load_config(DEFAULT)
    # a suite run twice (bfcl-simple, unguided and guided) counts twice
    every = sum(len(s.items) * len(s.spec.runs()) for s in map(load_suite, cfg.suites))
    counts = {}
    for profile in ("smoke", "full"):
        result = run("validate", "--config", str(DEFAULT), "--profile", profile)
        assert result.exit_code == 0, result.output
        found = re.search(rf"\(profile {profile}: ([\d,]+) items per model\)", result.output)
        assert found, result.output
        counts[profile] = int(found.group(1).replace(",", ""))
        # the power each paired gate has at the profile's sizes, stated before the run: the
        # smoke sample may be followed by a second look, so each is judged at half of alpha
        n, churn = {"smoke": (120, "3.2%"), "full": (240, "7.6%")}[profile]
        assert (f"arithmetic: quality gate (max_drop 0.05) · {n} items: passes a candidate "
                f"with no loss that changes up to {churn} of the answers") in result.output
    assert "at a second look, 240 items: up to 6.3%" in run(
        "validate", "--config", str(DEFAULT)).output
    assert counts["full"] == every and counts["smoke"] < every
    assert cfg.profile == "smoke" and cfg.with_profile("full").profile == "full"
    assert run("validate", "--config", str(DEFAULT), "--profile", "all").exit_code == 2

    p = _task_plan(str(DEFAULT), ("batch", "full"), "int4", "cpu")
    assert (p.cfg.profile, p.cfg.load.profile) == ("full", "batch")
