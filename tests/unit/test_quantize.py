import json
from pathlib import Path

import pytest

from workbench.config import CalibrationConfig, Candidate
from workbench.errors import InputError
from workbench.quantize import artifact_key, calibration_samples, latest_progress


def test_progress_is_the_last_layer_mark_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "q.log"
    log.write_text("noise\n(1/31): Calibrating:  5%|\r(1/31): Propagating: 20%|\n"
                   "(26/31): Calibrating: 10%|")
    assert latest_progress(log) == "layer 26/31: Calibrating"
    assert latest_progress(tmp_path / "missing.log") == ""


def test_calibration_sample_is_seeded_and_sized(tmp_path: Path) -> None:
    data = tmp_path / "c.jsonl"
    data.write_text("".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(50)))
    cfg = CalibrationConfig(files=[str(data)], num_samples=10, seq_len=32, seed=3)
    first = calibration_samples(cfg, Path)
    assert first == calibration_samples(cfg, Path) and len(set(first)) == 10
    assert first != calibration_samples(cfg.model_copy(update={"seed": 4}), Path)


def test_asking_for_more_samples_than_exist_is_an_input_error(tmp_path: Path) -> None:
    data = tmp_path / "c.jsonl"
    data.write_text(json.dumps({"text": "only one"}) + "\n")
    with pytest.raises(InputError, match="num_samples: 5 asked for, but the files hold only 1"):
        calibration_samples(CalibrationConfig(files=[str(data)], num_samples=5), Path)


def test_artifact_key_changes_with_recipe_calibration_and_versions() -> None:
    cand = Candidate(recipe="w4a16", group_size=64)
    base = artifact_key("m", cand, "cal", {"llmcompressor": "1"})
    assert base == artifact_key("m", cand, "cal", {"llmcompressor": "1"})
    assert base != artifact_key("m", Candidate(recipe="w4a16", group_size=32), "cal",
                                {"llmcompressor": "1"})
    assert base != artifact_key("m", cand, "cal2", {"llmcompressor": "1"})
    assert base != artifact_key("m", cand, "cal", {"llmcompressor": "2"})
    assert base != artifact_key("m2", cand, "cal", {"llmcompressor": "1"})
