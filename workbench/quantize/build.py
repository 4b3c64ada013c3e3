"""Quantise stage: build a candidate checkpoint, or find it in the artifact cache.

Artifacts are content-addressed: the key digests the model, the recipe (every default
filled in, or the recipe file's bytes), the exact calibration samples and the quantiser's
library versions, so a second run with the same inputs reuses the checkpoint and any
change is a miss. llm-compressor runs as a subprocess in its own environment (its pins
conflict with vLLM's; docs/environments.md). A candidate that needs no new checkpoint
(recipe ``none``: the baseline's weights with other serving arguments) or that is a ready
checkpoint passes through with a manifest of what it is.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from workbench.config.run_config import Candidate, RunConfig
from workbench.mechanisms import cache_entry
from workbench.mechanisms.digests import folder_digest, sha256_json
from workbench.mechanisms.errors import InfraError, InputError
from workbench.mechanisms.host import fast_dtype
from workbench.mechanisms.paths import cache_root, offline_env, quant_python
from workbench.mechanisms.processes import spawn, stop_group
from workbench.quantize.calibration import calibration_samples, heldout_samples
from workbench.quantize.checks import quantiser_device, unsupported_here
from workbench.quantize.formats import (
    DenseServing,
    ServedFormat,
    dense_reason,
    format_of_candidate,
    format_of_checkpoint,
    serve_args_for,
)
from workbench.quantize.heldout import (
    baseline_perplexity_file,
    cached_perplexity,
    fidelity_section,
)

__all__ = [
    "DATA_FREE_RECIPES", "EXIT_DEVICE_MISMATCH", "QuantizeResult", "artifact_key",
    "calibration_samples", "latest_progress", "needs_calibration", "quantize", "run_worker",
    "show_candidates",
]

WORKER = Path(__file__).parent.parent / "subprocesses" / "quantize_worker.py"
QUANT_LIBRARIES = ("llmcompressor", "compressed_tensors", "torch", "transformers")
DATA_FREE_RECIPES = {"fp8-dynamic", "none"}
# The workers' exit when their torch cannot use the engine's device (the refusal is their
# last log line): the workbench's input error, exit 2, not a failed quantisation.
EXIT_DEVICE_MISMATCH = 78


@dataclass(frozen=True)
class QuantizeResult:
    candidate: str
    path: str                 # the checkpoint built (or found): the candidate's own weights
    cache_hit: bool
    key: str
    manifest: dict
    source: str               # built | cache | checkpoint | baseline weights
    serve_args: list[str]     # from the current config, not the manifest: they may change
    # where this device has no kernel for its format: its weights served dequantised
    # (quantize/dense.py), the checkpoint the engine is given
    dense: DenseServing | None = None

    @property
    def format(self) -> ServedFormat:
        """The format as built: the checkpoint's own, with the serving arguments applied."""
        return format_of_checkpoint(Path(self.path), self.serve_args)

    @property
    def served_path(self) -> str:
        """The checkpoint the engine serves: the dense one where there is one."""
        return self.dense.checkpoint if self.dense is not None else self.path

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> QuantizeResult:
        dense = data.get("dense")
        return cls(**{**data, "dense": DenseServing(**dense) if dense else None})


def needs_calibration(cand: Candidate) -> bool:
    """Round-to-nearest reads only the weights; every other built recipe calibrates."""
    return cand.checkpoint is None and cand.recipe not in DATA_FREE_RECIPES \
        and cand.resolved_method != "rtn"


def quant_library_versions() -> dict[str, str]:
    """Versions in the quantiser environment, read from its dist-info folder names."""
    site = next(quant_python().parent.parent.glob("lib/python*/site-packages"), None)
    versions = {}
    for lib in QUANT_LIBRARIES:
        found = sorted(site.glob(f"{lib}-*.dist-info")) if site else []
        versions[lib] = found[0].name.removesuffix(".dist-info").split("-", 1)[1] if found else "?"
    return versions


def recipe_identity(cand: Candidate, resolve: Callable[[str], Path]) -> dict[str, Any]:
    """What the artifact key records of the recipe: parameters, or the file's digest."""
    if cand.recipe_file is None:
        return cand.recipe_params()
    path = resolve(cand.recipe_file)
    if not path.is_file():
        raise InputError(f"recipe_file: {cand.recipe_file!r} not found (looked at {path})")
    return {"recipe_file": str(path), "sha256": sha256_json(path.read_text())}


def artifact_key(model_digest: str, recipe: dict[str, Any], samples_digest: str | None,
                 versions: dict[str, str], compute_dtype: str = "bfloat16") -> str:
    identity = {k: v for k, v in recipe.items() if k != "recipe_file"}  # the digest, not where
    # layout 2: the tokenizer files copied from the baseline verbatim (quantize_worker.py)
    key: dict[str, Any] = {"model": model_digest, "recipe": identity,
                           "calibration": samples_digest, "versions": versions, "layout": 2}
    # GPTQ's choices depend on the arithmetic it ran in; bf16 builds keep the keys they had
    if compute_dtype != "bfloat16":
        key["compute_dtype"] = compute_dtype
    return sha256_json(key)


def _folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


_STEP = re.compile(r"\((\d+)/(\d+)\): (\w+)")
_PHASE = re.compile(r"\[workbench\] (.+)")


def latest_progress(log_file: Path) -> str:
    """Where the worker is now, from the tail of its log: 'layer 26/31: Calibrating' from
    llm-compressor's per-layer progress bars, or the worker's own '[workbench] ...' phase
    line, whichever came last; '' before either.
    """
    try:
        with log_file.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    marks = [(m.start(), f"layer {m[1]}/{m[2]}: {m[3]}") for m in _STEP.finditer(tail)]
    marks += [(m.start(), m[1].strip()) for m in _PHASE.finditer(tail)]
    return max(marks)[1] if marks else ""


class PassCounter:
    """Numbers llm-compressor's calibration passes: a recipe with two modifiers
    (SmoothQuant, then GPTQ) walks the layers twice, and its log does not say which pass."""

    def __init__(self) -> None:
        self.passes, self.last_layer = 0, 0

    def __call__(self, step: str) -> str:
        m = re.match(r"layer (\d+)/", step)
        if not m:
            return step
        layer = int(m[1])
        if layer < self.last_layer or self.passes == 0:
            self.passes += 1
        self.last_layer = layer
        return f"pass {self.passes}, {step}"


def run_worker(job: dict, log_file: Path, on_progress: Callable[[str], None],
               worker: Path = WORKER, expect_device: str | None = None) -> None:
    """A worker of subprocesses/ run in the quantiser environment, its progress relayed,
    never left running; a failure is an InfraError quoting its log's last lines, a torch
    that cannot use `expect_device` (the engine's) an InputError naming both."""
    if not quant_python().exists():
        raise InfraError(f"quantiser environment not found at {quant_python()}; "
                         "run scripts/setup.sh")
    job_file = Path(job["result_file"]).with_name("job.json")
    job_file.write_text(json.dumps(job, indent=2))
    device_args = ["--expect-device", expect_device] if expect_device else []
    proc = spawn([str(quant_python()), str(worker), str(job_file), *device_args], log_file,
                 offline_env())
    numbered = PassCounter()
    try:
        while proc.poll() is None:
            on_progress(numbered(latest_progress(log_file)))
            time.sleep(0.5)
    finally:
        if proc.poll() is None:  # interrupted: never leave the quantiser running
            stop_group(proc, grace_s=2)
    lines = log_file.read_text(errors="replace").strip().splitlines()
    if proc.returncode == EXIT_DEVICE_MISMATCH and lines:
        raise InputError(f"{lines[-1]} (log: {log_file})")
    if proc.returncode != 0:
        tail = " | ".join(lines[-3:])
        raise InfraError(f"quantisation failed (exit {proc.returncode}; log: {log_file}): "
                         f"{tail[:400]}")


def _passthrough(cfg: RunConfig, name: str, cand: Candidate, model_dir: Path) -> QuantizeResult:
    """A candidate with no new checkpoint: a ready checkpoint, or the baseline's weights."""
    if cand.checkpoint is None:
        fmt = format_of_candidate(cand)
        assert fmt is not None
        manifest = {"candidate": name, "source": "baseline weights", "path": str(model_dir),
                    "format": fmt.to_dict(), "size_bytes": _folder_size(model_dir),
                    "compression_ratio": 1.0}
        return QuantizeResult(name, str(model_dir), True, "", manifest, "baseline weights",
                              cand.serve_args())
    path = cfg.resolve(cand.checkpoint)
    if not (path / "config.json").is_file():
        raise InputError(f"{cfg.source}: candidates.{name}.checkpoint: {path} is not a "
                         "model folder (no config.json)")
    size, base, digest = _folder_size(path), _folder_size(model_dir), folder_digest(path)
    manifest = {"candidate": name, "source": "ready checkpoint", "path": str(path),
                "digest": digest,
                "format": format_of_checkpoint(path, []).to_dict(), "size_bytes": size,
                "baseline_size_bytes": base, "compression_ratio": round(base / size, 3)}
    return QuantizeResult(name, str(path), True, digest, manifest, "checkpoint",
                          serve_args_for(path, cand.serve_args()))


def _kv_and_ignore(path: Path) -> dict:
    qc = json.loads((path / "config.json").read_text()).get("quantization_config") or {}
    return {"kv_cache_scheme": qc.get("kv_cache_scheme"), "ignore": qc.get("ignore", [])}


@dataclass(frozen=True)
class _Build:
    """What identifies an artifact, computed once: its recipe, calibration samples and the
    quantiser's library versions, and the cache key they make with the model's digest."""

    recipe: dict
    needs_data: bool
    samples: list[str]
    samples_digest: str | None
    versions: dict[str, str]
    device: str  # where it calibrates: the engine's device
    compute_dtype: str  # what it computes in there (mechanisms/host.py, fast_dtype)
    key: str


def _identify(cfg: RunConfig, cand: Candidate, model_digest: str, device: str) -> _Build:
    recipe = recipe_identity(cand, cfg.resolve)
    needs_data = needs_calibration(cand)
    samples = calibration_samples(cfg.calibration, cfg.resolve) if needs_data else []
    samples_digest = sha256_json([samples, cfg.calibration.seq_len]) if needs_data else None
    versions = quant_library_versions()
    compute = fast_dtype(device)
    return _Build(recipe, needs_data, samples, samples_digest, versions, device, compute,
                  artifact_key(model_digest, recipe, samples_digest, versions, compute))


def _cached_manifest(final: Path, log_file: Path, on_progress: Callable[[str], None]
                     ) -> dict | None:
    """The manifest of a sealed artifact in the cache, or None (absent, or damaged: then it
    is dropped, with a line in the log, and built again)."""
    cache_entry.sweep_staging(final.parent)
    if not final.exists():
        return None
    problem = cache_entry.check(final)
    if problem is None:
        return json.loads((final / "manifest.json").read_text())
    on_progress(f"cached artifact dropped ({problem}); rebuilding")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("a") as log:
        log.write(f"[workbench] cached artifact dropped: {problem}\n")
    shutil.rmtree(final, ignore_errors=True)
    return None


def quantize(cfg: RunConfig, name: str, cand: Candidate, model_dir: Path, model_digest: str,
             log_file: Path, on_progress: Callable[[str], None] = lambda _s: None,
             device: str | None = None) -> QuantizeResult:
    """Return the candidate's checkpoint (cand: the config's entry `name`, resolved by
    the caller's checks), building it only on a cache miss. `device`: the engine's; the
    quantiser must calibrate there (None: wherever the quantiser's torch can)."""
    if cand.checkpoint is not None or cand.recipe == "none":
        return _passthrough(cfg, name, cand, model_dir)
    build = _identify(cfg, cand, model_digest, device or quantiser_device())
    final = cache_root() / "artifacts" / build.key[:24]
    manifest = _cached_manifest(final, log_file, on_progress)
    source = "cache"
    if manifest is None:
        manifest = _build_artifact(cfg, name, build, (model_dir, model_digest), final,
                                   log_file, on_progress)
        source = "built"
    return QuantizeResult(name, str(final), source == "cache", build.key, manifest, source,
                          serve_args_for(final, cand.serve_args()))


def _build_artifact(cfg: RunConfig, name: str, build: _Build, model: tuple[Path, str],
                    final: Path, log_file: Path, on_progress: Callable[[str], None]) -> dict:
    """Run the quantiser into a scratch folder beside the final one and rename it at the
    end, so an interrupted run never leaves a folder that looks complete."""
    model_dir, model_digest = model
    heldout = heldout_samples(cfg.calibration, cfg.resolve)
    base_ppl = baseline_perplexity_file(model_digest, heldout, cfg.calibration.seq_len,
                                         build.versions, build.device, build.compute_dtype)
    staging = cache_entry.staging_for(final)
    staging.mkdir(parents=True)
    work = staging / "_job"
    work.mkdir()
    (work / "samples.json").write_text(json.dumps(build.samples))
    (work / "heldout.json").write_text(json.dumps(heldout))
    job = {
        "model_dir": str(model_dir), "out_dir": str(staging), **build.recipe,
        "recipe_file": build.recipe.get("recipe_file"), "needs_data": build.needs_data,
        "samples_file": str(work / "samples.json"), "num_samples": len(build.samples),
        "seq_len": cfg.calibration.seq_len, "seed": cfg.calibration.seed,
        "compute_dtype": build.compute_dtype,
        "heldout_file": str(work / "heldout.json") if heldout else None,
        "baseline_perplexity": "cached" if cached_perplexity(base_ppl) else None,
        "result_file": str(work / "result.json"),
    }
    try:
        run_worker(job, log_file, on_progress, expect_device=build.device)
        facts = json.loads((work / "result.json").read_text())
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(work)
    size, base_size = _folder_size(staging), _folder_size(model_dir)
    facts["scheme_summary"].update(_kv_and_ignore(staging))
    manifest = {
        "candidate": name,
        "source": "built",
        "recipe": build.recipe,
        "format": format_of_checkpoint(staging, []).to_dict(),  # the checkpoint's own
        "key": build.key,
        "model_dir": str(model_dir),
        "model_digest": model_digest,
        "calibration": {**cfg.calibration.model_dump(), "samples_digest": build.samples_digest}
        if build.needs_data else None,
        "fidelity": fidelity_section(facts, base_ppl, heldout, cfg.calibration.seq_len),
        **facts,
        "size_bytes": size,
        "baseline_size_bytes": base_size,
        "compression_ratio": round(base_size / size, 3),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2))
    cache_entry.seal(staging)
    cache_entry.publish(staging, final)
    return manifest


def show_candidates(cfg: RunConfig, results: list[QuantizeResult], device: str,
                    console: Console) -> None:
    """A table of the candidates built: format, size, held-out perplexity, whether this
    device serves each."""

    table = Table(title=f"candidates of {cfg.model.name}")
    for col in ("candidate", "format", "size MB", "ratio", "held-out ppl", "built s",
                f"serves on {device}"):
        table.add_column(col)
    for q in results:
        m, fid = q.manifest, q.manifest.get("fidelity") or {}
        problem = unsupported_here(cfg, q.candidate, device, Path(q.path))
        dense = q.source != "checkpoint" and dense_reason(q.format, device)
        ppl = (f"{fid['baseline_perplexity']:.2f} -> {fid['candidate_perplexity']:.2f}"
               if fid else "-")
        table.add_row(escape(q.candidate), escape(q.format.label),
                      f"{m.get('size_bytes', 0) / 1e6:.0f}", f"{m.get('compression_ratio', 1):.2f}",
                      ppl, f"{m['wall_time_s']:.0f}" if "wall_time_s" in m else "-",
                      "[yellow]unsupported[/]: " + escape(problem) if problem else
                      "[yellow]dequantised[/] (quality only)" if dense else "[green]yes[/]")
    console.print(table)
