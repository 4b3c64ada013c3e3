"""Quantise stage: build a candidate checkpoint, or find it in the artifact cache.

Artifacts are content-addressed: the key digests the model, the recipe, the exact
calibration samples and the quantiser's library versions, so a second run with the same
inputs reuses the checkpoint and any change is a miss. llm-compressor runs as a subprocess
in its own environment (its pins conflict with vLLM's; DESIGN.md, Environments).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..config import CalibrationConfig, Candidate, RunConfig
from ..digests import folder_digest, sha256_json
from ..errors import InfraError, InputError
from ..paths import cache_root, offline_env, quant_python

__all__ = ["DATA_FREE_RECIPES", "QuantizeResult", "artifact_key", "calibration_samples", "quantize"]

WORKER = Path(__file__).with_name("worker.py")
QUANT_LIBRARIES = ("llmcompressor", "compressed_tensors", "torch", "transformers")
DATA_FREE_RECIPES = {"fp8-dynamic"}


@dataclass(frozen=True)
class QuantizeResult:
    candidate: str
    path: str
    cache_hit: bool
    key: str
    manifest: dict

    def to_dict(self) -> dict:
        return asdict(self)


def calibration_samples(cfg: CalibrationConfig, resolve) -> list[str]:
    """The exact texts used: a seeded sample of the configured files' 'text' fields."""
    texts: list[str] = []
    for name in cfg.files:
        path = resolve(name)
        if not path.is_file():
            raise InputError(f"calibration.files: {name!r} not found (looked at {path})")
        for lineno, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                try:
                    texts.append(json.loads(line)["text"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise InputError(
                        f"{path}:{lineno}: expected a JSON object with 'text'"
                    ) from None
    if len(texts) < cfg.num_samples:
        raise InputError(
            f"calibration.num_samples: {cfg.num_samples} asked for, but the files hold only "
            f"{len(texts)} samples"
        )
    return random.Random(cfg.seed).sample(texts, cfg.num_samples)


def quant_library_versions() -> dict[str, str]:
    """Versions in the quantiser environment, read from its dist-info folder names."""
    site = next(quant_python().parent.parent.glob("lib/python*/site-packages"), None)
    versions = {}
    for lib in QUANT_LIBRARIES:
        found = sorted(site.glob(f"{lib}-*.dist-info")) if site else []
        versions[lib] = found[0].name.removesuffix(".dist-info").split("-", 1)[1] if found else "?"
    return versions


def artifact_key(model_digest: str, cand: Candidate, samples_digest: str | None,
                 versions: dict[str, str]) -> str:
    recipe = cand.model_dump(include={"recipe", "group_size", "ignore"})
    return sha256_json({"model": model_digest, "recipe": recipe, "calibration": samples_digest,
                        "versions": versions})


def _folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


_STEP = re.compile(r"\((\d+)/(\d+)\): (\w+)")


def latest_progress(log_file: Path) -> str:
    """'layer 26/31: Calibrating' from llm-compressor's progress bars, or ''.

    llm-compressor calibrates one decoder layer at a time and says so in its tqdm lines;
    the last such mark in the log is where it is now.
    """
    try:
        with log_file.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    marks = _STEP.findall(tail)
    return f"layer {marks[-1][0]}/{marks[-1][1]}: {marks[-1][2]}" if marks else ""


def _run_worker(job: dict, log_file: Path, on_progress: Callable[[str], None]) -> None:
    if not quant_python().exists():
        raise InfraError(f"quantiser environment not found at {quant_python()}; "
                         "run scripts/setup.sh")
    job_file = Path(job["result_file"]).with_name("job.json")
    job_file.write_text(json.dumps(job, indent=2))
    with log_file.open("w") as log:
        proc = subprocess.Popen([str(quant_python()), str(WORKER), str(job_file)],
                                stdout=log, stderr=subprocess.STDOUT, env=offline_env())
        try:
            while proc.poll() is None:
                on_progress(latest_progress(log_file))
                time.sleep(0.5)
        finally:
            if proc.poll() is None:  # interrupted: never leave the quantiser running
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        tail = " | ".join(log_file.read_text(errors="replace").strip().splitlines()[-3:])
        raise InfraError(f"quantisation failed (exit {proc.returncode}; log: {log_file}): "
                         f"{tail[:400]}")


def quantize(cfg: RunConfig, name: str, model_dir: Path, model_digest: str,
             log_file: Path, on_progress: Callable[[str], None] = lambda _s: None
             ) -> QuantizeResult:
    """Return the candidate's checkpoint, building it only on a cache miss."""
    cand = cfg.candidate(name)
    if cand.checkpoint is not None:
        path = cfg.resolve(cand.checkpoint)
        if not (path / "config.json").is_file():
            raise InputError(f"{cfg.source}: candidates.{name}.checkpoint: {path} is not a "
                             "model folder (no config.json)")
        return QuantizeResult(name, str(path), True, folder_digest(path),
                              {"source": "ready checkpoint", "path": str(path)})

    needs_data = cand.recipe not in DATA_FREE_RECIPES
    samples = calibration_samples(cfg.calibration, cfg.resolve) if needs_data else []
    samples_digest = sha256_json([samples, cfg.calibration.seq_len]) if needs_data else None
    versions = quant_library_versions()
    key = artifact_key(model_digest, cand, samples_digest, versions)
    final = cache_root() / "artifacts" / key[:24]
    if (final / "manifest.json").is_file():
        manifest = json.loads((final / "manifest.json").read_text())
        return QuantizeResult(name, str(final), True, key, manifest)

    # Build in a scratch folder beside the final one and rename at the end, so an
    # interrupted run never leaves a folder that looks complete.
    staging = final.with_name(f"{final.name}.partial-{int(time.time())}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    work = staging / "_job"
    work.mkdir()
    (work / "samples.json").write_text(json.dumps(samples))
    job = {
        "model_dir": str(model_dir), "out_dir": str(staging), "recipe": cand.recipe,
        "group_size": cand.group_size, "ignore": cand.ignore, "needs_data": needs_data,
        "samples_file": str(work / "samples.json"), "num_samples": len(samples),
        "seq_len": cfg.calibration.seq_len, "seed": cfg.calibration.seed,
        "result_file": str(work / "result.json"),
    }
    try:
        _run_worker(job, log_file, on_progress)
        facts = json.loads((work / "result.json").read_text())
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(work)
    manifest = {
        "candidate": name,
        "recipe": cand.model_dump(include={"recipe", "group_size", "ignore"}),
        "key": key,
        "model_dir": str(model_dir),
        "model_digest": model_digest,
        "calibration": {**cfg.calibration.model_dump(), "samples_digest": samples_digest}
        if needs_data else None,
        **facts,
        "size_bytes": _folder_size(staging),
        "baseline_size_bytes": _folder_size(model_dir),
    }
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2))
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)
    return QuantizeResult(name, str(final), False, key, manifest)
