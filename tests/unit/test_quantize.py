import json
from pathlib import Path

import pytest

from workbench.config.run_config import CalibrationConfig, Candidate, load_config
from workbench.mechanisms.errors import InputError
from workbench.quantize.build import artifact_key, calibration_samples, latest_progress, quantize
from workbench.quantize.calibration import heldout_samples
from workbench.quantize.formats import format_of_checkpoint

REPO = Path(__file__).resolve().parents[2]


def test_progress_is_the_last_layer_mark_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "q.log"
    log.write_text("noise\n(1/31): Calibrating:  5%|\r(1/31): Propagating: 20%|\n"
                   "(26/31): Calibrating: 10%|")
    assert latest_progress(log) == "layer 26/31: Calibrating"
    assert latest_progress(tmp_path / "missing.log") == ""
    with log.open("a") as f:
        f.write("\n[workbench] saving the compressed checkpoint\n")
    assert latest_progress(log) == "saving the compressed checkpoint"


def test_calibration_passes_are_numbered() -> None:
    from workbench.quantize.build import PassCounter

    count = PassCounter()
    steps = ["loading the model", "layer 1/31: Calibrating", "layer 30/31: Propagating",
             "layer 1/31: Calibrating", "layer 2/31: Calibrating", "saving"]
    assert [count(s) for s in steps] == [
        "loading the model", "pass 1, layer 1/31: Calibrating",
        "pass 1, layer 30/31: Propagating", "pass 2, layer 1/31: Calibrating",
        "pass 2, layer 2/31: Calibrating", "saving"]


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


def key(cand: Candidate, cal: str = "cal", lib: str = "1", model: str = "m") -> str:
    return artifact_key(model, cand.recipe_params(), cal, {"llmcompressor": lib})


def test_artifact_key_changes_with_recipe_calibration_and_versions() -> None:
    cand = Candidate(recipe="w4a16", group_size=64)
    assert key(cand) == key(Candidate(recipe="w4a16", group_size=64))
    assert key(cand) != key(Candidate(recipe="w4a16", group_size=32))
    assert key(cand) != key(Candidate(recipe="w4a16", group_size=64, ignore=[]))
    assert key(cand) != key(cand, cal="cal2")
    assert key(cand) != key(cand, lib="2")
    assert key(cand) != key(cand, model="m2")
    # defaults are filled in before hashing: the same recipe spelt two ways is one artifact
    assert key(Candidate(recipe="w4a16")) == key(Candidate(recipe="w4a16", group_size=128))
    # serving arguments do not change the checkpoint
    assert key(cand) == key(Candidate(recipe="w4a16", group_size=64, kv_cache_dtype="fp8"))


def test_recipe_file_key_follows_its_content_not_its_path(tmp_path: Path) -> None:
    from workbench.quantize.build import recipe_identity

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("quant_stage: {}\n")
    b.write_text("quant_stage: {}\n")
    ident = {p: recipe_identity(Candidate(recipe_file=str(p)), Path) for p in (a, b)}
    same = [artifact_key("m", ident[p], "c", {}) for p in (a, b)]
    assert same[0] == same[1]
    a.write_text("quant_stage: {changed: 1}\n")
    changed = artifact_key("m", recipe_identity(Candidate(recipe_file=str(a)), Path), "c", {})
    assert changed != same[0]
    with pytest.raises(InputError, match="recipe_file: .* not found"):
        recipe_identity(Candidate(recipe_file=str(tmp_path / "missing.yaml")), Path)


def test_heldout_sample_covers_every_domain(tmp_path: Path) -> None:
    data = tmp_path / "h.jsonl"
    rows = [{"text": f"{d}{i}", "domain": d} for d in ("drama", "code:python", "code:go",
                                                        "language:deu") for i in range(10)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = CalibrationConfig(files=["x"], heldout=[str(data)], heldout_samples=6)
    picked = heldout_samples(cfg, Path)
    assert len(picked) == 6 and picked == heldout_samples(cfg, Path)
    # three domain groups (drama, code, language): two of each
    assert sorted(t.rstrip("0123456789")[:4] for t in picked) == \
        ["code", "code", "dram", "dram", "lang", "lang"]
    assert heldout_samples(cfg.model_copy(update={"heldout_samples": 0}), Path) == []


def test_calibration_line_without_text_names_file_and_line(tmp_path: Path) -> None:
    data = tmp_path / "c.jsonl"
    data.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"txt": "no"}) + "\n")
    with pytest.raises(InputError, match=r"c.jsonl:2: expected a JSON object with a string"):
        calibration_samples(CalibrationConfig(files=[str(data)], num_samples=1), Path)


def test_shipped_calibration_data_is_mixed_and_large_enough() -> None:
    cfg = load_config(REPO / "configs" / "default.yaml").calibration
    texts = calibration_samples(cfg.model_copy(update={"num_samples": 512}),
                                lambda p: REPO / p)
    assert len(set(texts)) == 512
    domains = set()
    for name in cfg.files:
        for line in (REPO / name).read_text().splitlines():
            domains.add(json.loads(line)["domain"].split(":")[0])
    assert {"drama", "verse", "prose", "code", "language"} <= domains
    for folder in {(REPO / name).parent for name in cfg.files + cfg.heldout}:
        assert (folder / "SOURCE.md").is_file() and (folder / "LICENSE").is_file()


def test_baseline_weights_candidate_needs_no_quantiser(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 64}))
    (model / "model.safetensors").write_bytes(b"0" * 1000)
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text((REPO / "configs" / "default.yaml").read_text())
    cfg = load_config(cfg_file)
    q = quantize(cfg, "kv-fp8-dynamic", cfg.candidate("kv-fp8-dynamic"), model, "digest",
                 tmp_path / "q.log")
    assert q.source == "baseline weights" and q.path == str(model)
    assert q.serve_args == ["--kv-cache-dtype", "fp8"]
    assert q.format == format_of_checkpoint(model, ["--kv-cache-dtype", "fp8"])
    assert not (tmp_path / "q.log").exists()  # no quantiser ran
