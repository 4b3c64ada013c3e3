"""The GPU check (scripts/gpu_check.sh and its scripts/gpu_*.py helpers), checked cheaply:
the script parses and refuses what it does not know, `prepare`'s size guard, the offline
wheel installer, the summary writer on made-up part records, the worker-progress parser on
llm-compressor's own bar format, and the NVML probe replaying the recordings the GPU
probe's tests use. The whole check on the CPU is `bash scripts/gpu_check.sh --dry-run`
(docs/benchmarks.md, "GPU check"): minutes, so not run here."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from workbench.config.candidate import WEIGHT_VALUES

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
sys.path.insert(0, str(REPO / "scripts"))

import gpu_models  # noqa: E402
import gpu_probe  # noqa: E402
import gpu_quantize  # noqa: E402
import gpu_summary  # noqa: E402
import gpu_wheels  # noqa: E402


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake_pynvml = _module(REPO / "tests" / "data" / "nvml" / "fake_pynvml.py", "fake_pynvml")


def test_the_script_parses_and_refuses_an_unknown_argument(tmp_path: Path) -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    proc = subprocess.run(["bash", str(SCRIPT), "--gpu"], capture_output=True, text=True,
                          env={**os.environ, "OUT": str(tmp_path / "out")}, timeout=60)
    assert proc.returncode == 2
    assert "usage: bash scripts/gpu_check.sh [prepare | --dry-run]" in proc.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_the_carried_pins_are_the_quantiser_environments() -> None:
    """prepare downloads what requirements/quant.txt installs here, not another version."""
    pins = dict(re.findall(r"([A-Za-z][\w.-]*)==([\w.]+)",
                           SCRIPT.read_text().split("PINS=(", 1)[1].split(")", 1)[0]))
    quant = dict(re.findall(r"^([A-Za-z][\w.-]*)==([\w.]+)",
                            (REPO / "requirements" / "quant.txt").read_text(), re.M))
    for lib in ("llmcompressor", "compressed-tensors"):
        assert pins[lib] == quant[lib]
    assert {"loguru", "datasets", "pydantic", "pydantic_core"} <= set(pins)


def test_size_guard_fails_loudly_over_the_limit(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "wheels").mkdir()
    with (tmp_path / "wheels" / "big.whl").open("wb") as f:
        f.truncate(3 * gpu_wheels.MIB)  # 3 MiB, as stat counts it
    (tmp_path / "tokenizer.json").write_bytes(b"x" * 1024)
    assert gpu_wheels.size_guard(tmp_path, 4) == (True, 3 * gpu_wheels.MIB + 1024)
    assert gpu_wheels.size_guard(tmp_path, 3) == (False, 3 * gpu_wheels.MIB + 1024)
    assert gpu_wheels.main(["size", str(tmp_path), "3"]) == 1
    assert "TOO LARGE" in capsys.readouterr().err
    assert gpu_wheels.main(["size", str(tmp_path), "64"]) == 0


def test_wheel_names_as_pip_download_writes_them() -> None:
    w = gpu_wheels.parse_wheel(Path(
        "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"))
    assert (w.name, w.version) == ("pydantic-core", "2.50.5")
    assert w.tags == "cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64"
    assert gpu_wheels.parse_wheel(Path("llmcompressor-0.14.0.1-py3-none-any.whl")).version \
        == "0.14.0.1"
    with pytest.raises(ValueError, match="not a wheel file name"):
        gpu_wheels.parse_wheel(Path("llmcompressor-0.14.0.1.tar.gz"))


def _wheel(folder: Path, name: str, version: str, data: bool = False) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    prefix = f"{name}-{version}.data/purelib/" if data else ""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{prefix}{name}/__init__.py", f"VERSION = {version!r}\n")
        zf.writestr(f"{name}-{version}.dist-info/METADATA",
                    f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return path


def test_only_missing_supported_versions_are_unpacked_and_importable(tmp_path: Path) -> None:
    wheels = [gpu_wheels.parse_wheel(_wheel(tmp_path, n, v, data=n == "fakedata"))
              for n, v in (("fakeone", "1.0"), ("fakedata", "2.0"), ("faketwo", "3.0"))]
    chosen = gpu_wheels.select(wheels, {"faketwo": "3.0", "fakeone": "0.9"})
    assert [repr(w) for w in chosen["install"]] == ["fakeone==1.0", "fakedata==2.0"]
    assert [repr(w) for w in chosen["present"]] == ["faketwo==3.0"]
    assert gpu_wheels.select(wheels, {}, supported=lambda _tags: False)["unusable"] == wheels
    site = tmp_path / "site"
    site.mkdir()
    for wheel in chosen["install"]:
        gpu_wheels.unpack(wheel.path, site)
    assert not list(site.glob("*.data"))  # purelib merged into the root, as pip --target
    proc = subprocess.run([sys.executable, "-c", "import fakeone, fakedata; "
                           "import importlib.metadata as m; print(m.version('fakedata'))"],
                          env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True,
                          text=True)
    assert proc.stdout.strip() == "2.0", proc.stderr


def test_a_folder_not_made_by_the_check_is_never_emptied(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not made by the GPU check"):
        gpu_wheels._fresh(tmp_path)
    assert (tmp_path / "keep.txt").exists()


def _records(out: Path, failing: bool) -> None:
    gpu_summary.write_part(out, gpu_summary.part_record(
        "quantise", None, 12.34, figures={"device": "cpu"},
        headlines=["8b-w4a16-g128: 5.6 s per layer"],
        checks=[gpu_summary.check("8b-w4a16-g128: manifest device is cuda", not failing,
                                  "cpu"),
                gpu_summary.check("8b-w4a16-g128: worker exit 0", True, 0)]))
    gpu_summary.write_part(out, gpu_summary.part_record(
        "probe", None, 1.0, checks=[gpu_summary.check("nvidia-smi answers", True)]))
    gpu_summary.mark(out, "tp2", "skipped", 0, "1 GPU(s) answer nvidia-smi -L")


def test_summary_fails_when_one_check_failed(tmp_path: Path) -> None:
    _records(tmp_path, failing=True)
    summary = gpu_summary.write_summary(tmp_path, "gpu")
    assert gpu_summary.exit_status(summary) == 1
    assert summary["failed_parts"] == ["quantise"]
    assert [p["part"] for p in summary["parts"]] == ["probe", "quantise", "tp2"]  # run order
    text = (tmp_path / "summary.txt").read_text()
    assert "[failed] quantise (12.3 s)" in text
    assert "  FAIL 8b-w4a16-g128: manifest device is cuda: cpu" in text
    assert "  8b-w4a16-g128: 5.6 s per layer" in text
    assert "[skipped] tp2 (0.0 s): 1 GPU(s) answer nvidia-smi -L" in text
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"


def test_summary_passes_with_skipped_parts_and_says_a_dry_run_is_one(tmp_path: Path) -> None:
    _records(tmp_path, failing=False)
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_summary.py"), "write",
                           str(tmp_path), "dry-run"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout.startswith("GPU check (dry-run): passed")
    assert "the CPU stands in for the GPU" in proc.stdout
    assert gpu_summary.gather(tmp_path / "none", "gpu")["status"] == "failed"  # no parts


def test_a_status_outside_the_three_is_refused() -> None:
    with pytest.raises(ValueError, match="allowed ran, failed, skipped"):
        gpu_summary.part_record("probe", "absent", 0)


def test_per_layer_time_from_llm_compressors_own_bar_labels() -> None:
    # llmcompressor 0.14.0.1, pipelines/sequential/pipeline.py:
    #   calib_desc = f"({subgraph_index + 1}/{num_subgraphs}): Calibrating"
    #   prop_desc = f"({subgraph_index + 1}/{num_subgraphs}): Propagating"
    def bar(i: int, what: str) -> str:
        return f"\r({i}/3): {what}:  50%|#####     | 16/32 [00:01<00:01, 12.0it/s]"

    events = [(0.0, "[workbench] calibrating\n"), (0.5, bar(1, "Calibrating")),
              (0.6, bar(1, "Propagating")), (1.0, bar(2, "Calibrating")),
              (3.0, bar(2, "Propagating") + "\n" + bar(3, "Calibrating")),
              (6.0, bar(3, "Propagating")),
              (7.0, "\n[workbench] held-out perplexity of the candidate (8 passages)\n")]
    marks = gpu_quantize.progress_marks(events)
    assert [label for _, label in marks] == [
        "calibrating", "subgraph 1/3", "subgraph 2/3", "subgraph 3/3",
        "held-out perplexity of the candidate (8 passages)"]
    timed = gpu_quantize.layer_seconds(marks)
    assert timed["passes"] == [("subgraph 1/3", 0.5), ("subgraph 2/3", 2.0),
                               ("subgraph 3/3", 4.0)]
    assert timed["mean_per_decoder_layer_s"] == 3.0  # subgraph 1 is the embedding


def test_accelerator_checks_catch_llm_compressors_cpu_fallback() -> None:
    # llmcompressor/utils/dev.py (0.14.0.1), get_main_device:
    line = "WARNING - No accelerator available! Compressing model on CPU instead"
    on_gpu = {"device": "cuda"}, {"cuda_max_memory_allocated": 5 * 2**30}
    assert all(c["ok"] for c in gpu_quantize._accelerator_checks("cuda", *on_gpu, "ok\n"))
    fell_back = gpu_quantize._accelerator_checks("cuda", {"device": "cpu"},
                                                 {"cuda_max_memory_allocated": 0}, line)
    assert [c["ok"] for c in fell_back] == [False, False, False]
    assert all(c["ok"] for c in gpu_quantize._accelerator_checks(
        "cpu", {"device": "cpu"}, {"cuda_max_memory_allocated": 0}, line))


def test_the_model_shapes_are_llamas_and_the_dry_run_keeps_their_groups() -> None:
    assert gpu_models.shape_dims("llama-8b", 1) == {
        "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "num_hidden_layers": 4}
    assert gpu_models.shape_dims("llama-70b", 1)["intermediate_size"] == 28672
    small = gpu_models.shape_dims("llama-70b", 16)
    assert small["hidden_size"] % 128 == 0 and small["intermediate_size"] % 128 == 0
    with pytest.raises(ValueError, match="scale 3"):
        gpu_models.shape_dims("llama-8b", 3)


def test_the_worker_job_has_what_the_worker_reads(tmp_path: Path) -> None:
    """Every job key the quantize worker reads is in the job the check writes."""
    worker = (REPO / "workbench" / "subprocesses" / "quantize_worker.py").read_text()
    read = set(re.findall(r"job(?:\[|\.get\()\"(\w+)\"", worker))
    # the weight-only recipes' values reach the job only where they differ from the preset
    # (config/candidate.py, WEIGHT_VALUES): the worker reads each with its default
    optional = set(WEIGHT_VALUES)
    assert optional <= read and all(f'job.get("{k}"' in worker for k in optional)
    read -= optional
    per_recipe = {"group_size", "smoothing_strength"}
    assert per_recipe < read and "model_dir" in read
    for recipe, group, extra in (("w4a16", 128, {"group_size"}),
                                 ("w8a8-int8", None, {"smoothing_strength"}),
                                 ("fp8-dynamic", None, set())):
        job = gpu_quantize.worker_job(tmp_path, tmp_path / "model", recipe, group, False)
        assert (read - per_recipe) | extra <= set(job), recipe
    assert gpu_quantize.worker_job(tmp_path, tmp_path, "w8a8-int8", None, True)[
        "smoothing_strength"] == 0.8


@pytest.mark.parametrize("name", ["two_h100_other_tenant.json", "h200_mig_3g71gb.json"])
def test_the_probe_records_nvml_as_the_gpu_tests_replay_it(
        monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Replayed through the fake pynvml, the probe gives back the recording: what it
    writes on a GPU (probe/nvml-recording.json) can replace tests/data/nvml's files."""
    recording = fake_pynvml.load(name)
    module = fake_pynvml.build(recording)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    recording.pop("description")
    assert gpu_probe.nvml_recording() == recording
    assert module.state["open"] == 0
