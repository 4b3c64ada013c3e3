from pathlib import Path

import pytest

from workbench.config.gate_policy import load_gate_policy
from workbench.config.run_config import load_config
from workbench.mechanisms.errors import InputError
from workbench.suites.definition import SUITES_ROOT, load_suite

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
GATES = sorted((REPO / "configs" / "gates").glob("*.yaml"))
SUITES = sorted(p.parent for p in SUITES_ROOT.glob("*/*/suite.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.candidates and cfg.suites
    assert cfg.resolve(cfg.gates).is_file()


@pytest.mark.parametrize("path", GATES, ids=lambda p: p.name)
def test_every_gate_policy_loads(path: Path) -> None:
    policy = load_gate_policy(path)
    assert policy.paired(), "every shipped policy judges some suite paired with the baseline"


@pytest.mark.parametrize("folder", SUITES, ids=lambda p: p.name)
def test_every_shipped_suite_loads(folder: Path) -> None:
    suite = load_suite(str(folder))
    assert len({i.id for i in suite.items}) == len(suite.items) > 0
    assert all(i.slices for i in suite.items)


def _default_text() -> str:
    return (REPO / "configs" / "default.yaml").read_text()


def test_typo_in_key_names_the_key_and_the_allowed_ones(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(_default_text().replace("    group_size: 64", "    group_sise: 64"))
    with pytest.raises(InputError) as err:
        load_config(bad)
    msg = str(err.value)
    assert str(bad) in msg and "candidates.int4.group_sise: unknown key" in msg
    assert "group_size" in msg  # the allowed keys are listed


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = _default_text().replace("dtype: auto", "dtype: int3").replace(
        "profile: smoke", "profile: quick")
    bad.write_text(text)
    with pytest.raises(InputError) as err:
        load_config(bad)
    keys = " ".join(err.value.problems)
    assert "engine.dtype" in keys and "profile" in keys and len(err.value.problems) == 2


def test_group_size_must_be_a_power_of_two(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(_default_text().replace("group_size: 64", "group_size: 96"))
    with pytest.raises(InputError, match="candidates.int4.group_size: must be a power of two"):
        load_config(bad)


def test_unknown_candidate_lists_the_known_ones() -> None:
    cfg = load_config(REPO / "configs" / "default.yaml")
    with pytest.raises(InputError,
                       match=r"unknown candidate .nope.; known candidates: fp8, fp8\+kv-fp8, int4"):
        cfg.candidate("nope")


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  name: [unclosed\n")
    with pytest.raises(InputError, match=r"bad.yaml:\d+: not valid YAML"):
        load_config(bad)
