"""A weight-only candidate served dense: its artifact's weights dequantised (scale x (q -
zero) per group, as a W4A16 kernel does) into a checkpoint of the baseline's dtype, for a
device whose engine has no kernel for the format (int4 on an AVX2 CPU: docs/candidates.md).
What such serving gives is the candidate's quality; its speed and memory are not its own.

The dense checkpoint is cached beside the artifacts, keyed by the artifact's sealed digest
list (GPTQ on a CPU is not bit-reproducible across machines: the digest, not the recipe,
names the weights) and the baseline's digest, built by
subprocesses/dequantize_worker.py in the quantiser's environment.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from workbench.mechanisms import cache_entry
from workbench.mechanisms.digests import sha256_json
from workbench.mechanisms.errors import InfraError
from workbench.mechanisms.paths import cache_root
from workbench.quantize.build import run_worker

__all__ = ["DENSE_FACTS", "artifact_digest", "dense_checkpoint"]

WORKER = Path(__file__).parent.parent / "subprocesses" / "dequantize_worker.py"
DENSE_FACTS = "dense.json"  # in the dense checkpoint: what it was made from, and how
LAYOUT = 1  # the worker's output: bump when it changes what a dense checkpoint holds


def artifact_digest(artifact: Path) -> str:
    """The digest of an artifact's sealed digest list: it names every file's content."""
    seal = artifact / cache_entry.SEAL
    if not seal.is_file():
        raise InfraError(f"{artifact}: no digest list ({cache_entry.SEAL}); quantise it "
                         "again")
    return hashlib.sha256(seal.read_bytes()).hexdigest()


def dense_checkpoint(artifact: Path, baseline: Path, baseline_digest: str, log_file: Path,
                     on_progress: Callable[[str], None] = lambda _s: None) -> Path:
    """The artifact's weights dequantised onto the baseline's checkpoint: from the cache
    when a sound entry is there, else built by the worker and sealed."""
    digest = artifact_digest(artifact)
    key = sha256_json({"artifact": digest, "baseline": baseline_digest, "layout": LAYOUT})
    final = cache_root() / "dense" / key[:24]
    cache_entry.sweep_staging(final.parent)
    if final.exists() and cache_entry.check(final) is None:
        return final
    shutil.rmtree(final, ignore_errors=True)  # missing or damaged: built again
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = cache_entry.staging_for(final)
    with tempfile.TemporaryDirectory(prefix="wb-dense-") as work:
        job = {"artifact_dir": str(artifact), "baseline_dir": str(baseline),
               "out_dir": str(staging), "result_file": str(Path(work) / "result.json")}
        try:
            run_worker(job, log_file, on_progress, worker=WORKER)
            facts = json.loads(Path(job["result_file"]).read_text())
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    (staging / DENSE_FACTS).write_text(json.dumps(
        {"artifact": str(artifact), "artifact_digest": digest, "baseline": str(baseline),
         "baseline_digest": baseline_digest, "layout": LAYOUT, **facts}, indent=2) + "\n")
    cache_entry.seal(staging)
    cache_entry.publish(staging, final)
    return final
