"""Layer sensitivity: how much each decoder block alone loses to the candidate's weight
scheme, measured in the quantiser's environment and cached by its content.

The score of block k is the mean token KL(baseline || the baseline with only block k's
Linear weights rounded to the scheme), on the config's held-out passages
(subprocesses/sensitivity_worker.py). Rounding to nearest stands in for GPTQ: it needs no
calibration pass per block (30 forwards instead of 30 GPTQ runs), and a block whose
weights the grid cannot hold (outliers in a group) is damaged by both; docs/tune.md says
how well its ranking predicted the real trials. Only integer weight recipes with groups
(w4a16, w8a16) have a scheme to round to.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from workbench.config.run_config import Candidate, RunConfig
from workbench.mechanisms.digests import sha256_json
from workbench.mechanisms.errors import InfraError, InputError
from workbench.mechanisms.files import write_json
from workbench.mechanisms.host import fast_dtype
from workbench.mechanisms.paths import cache_root
from workbench.quantize.build import quant_library_versions, run_worker
from workbench.quantize.calibration import heldout_samples
from workbench.quantize.checks import quantiser_device

__all__ = ["BlockScore", "Sensitivity", "keep_blocks_ignore", "measure_sensitivity",
           "sensitivity_key", "sensitivity_problems"]

WORKER = Path(__file__).parent.parent / "subprocesses" / "sensitivity_worker.py"
BITS = {"w4a16": 4, "w8a16": 8}
FILE = "sensitivity.json"


@dataclass(frozen=True)
class BlockScore:
    block: int
    modules: int
    params: int
    kl_mean: float
    top1_agreement: float


@dataclass(frozen=True)
class Sensitivity:
    """Every decoder block's score, and what it was measured on."""

    candidate: str
    bits: int
    group_size: int
    blocks: list[BlockScore]
    tokens: int
    passages: int
    seconds: float
    key: str
    cache_hit: bool

    def ranked(self) -> list[int]:
        """Block indices, the most sensitive first (ties by index, so the order is fixed)."""
        return [b.block for b in sorted(self.blocks, key=lambda b: (-b.kl_mean, b.block))]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Sensitivity:
        return cls(**{**data, "blocks": [BlockScore(**b) for b in data["blocks"]]})


def keep_blocks_ignore(blocks: list[int]) -> str | None:
    """The llm-compressor `ignore` entry that leaves these decoder blocks' Linear layers in
    16-bit (its "re:" prefix marks a regular expression over module names)."""
    if not blocks:
        return None
    alternatives = "|".join(str(b) for b in sorted(blocks))
    return rf"re:.*\.layers\.({alternatives})\..*"


def _scheme(name: str, cand: Candidate) -> tuple[int, int]:
    if cand.recipe not in BITS or cand.resolved_group_size is None:
        raise InputError(f"candidates.{name}: layer sensitivity needs an integer weight "
                         f"recipe with groups ({', '.join(BITS)}), not "
                         f"{cand.recipe or 'a recipe file or checkpoint'}")
    return BITS[cand.recipe], cand.resolved_group_size


def sensitivity_problems(cfg: RunConfig, name: str) -> list[str]:
    """What keeps the candidate's layer sensitivity from being measured, one line each:
    checked before anything is written (tune's plan checks)."""
    problems = []
    try:
        _scheme(name, cfg.candidates[name])
    except InputError as err:
        problems.append(f"{cfg.source}: {err}")
    if cfg.calibration.heldout_samples == 0 or not cfg.calibration.heldout:
        problems.append(f"{cfg.source}: calibration.heldout_samples: 0 (or no heldout files) "
                        "leaves no held-out text to measure layer sensitivity on")
    return problems


def _cached(file: Path) -> Sensitivity | None:
    """A cached result, or None (absent; a damaged file is dropped and measured again)."""
    if not file.is_file():
        return None
    try:
        return Sensitivity.from_dict({**json.loads(file.read_text()), "cache_hit": True})
    except (OSError, ValueError, KeyError, TypeError):
        file.unlink(missing_ok=True)
        return None


def sensitivity_key(model_digest: str, scheme: tuple[int, int], texts: list[str],
                    seq_len: int, device: str) -> str:
    """The cache key of a measurement: model, scheme (bits, group size), passages,
    libraries, the worker's code, and the device it ran on when that is not the CPU (a
    GPU's bf16 forward gives other KL figures; the CPU's keys stay as they were)."""
    identity = {"model": model_digest, "bits": scheme[0], "group_size": scheme[1],
                "texts": texts, "seq_len": seq_len, "versions": quant_library_versions(),
                "worker": sha256_json(WORKER.read_text())}
    if device != "cpu":
        identity["device"] = device
    if fast_dtype(device) != "bfloat16":  # the forward's arithmetic (mechanisms/host.py)
        identity["compute_dtype"] = fast_dtype(device)
    return sha256_json(identity)


def measure_sensitivity(cfg: RunConfig, name: str, cand: Candidate, model_dir: Path,
                        model_digest: str, out_dir: Path,
                        on_progress: Callable[[str], None] = lambda _s: None,
                        device: str | None = None) -> Sensitivity:
    """Every block's sensitivity to the candidate's scheme, from the cache when the same
    model, scheme, passages, libraries, worker and device were measured before. `device`:
    the engine's, where the quantiser runs (None: wherever the quantiser's torch can)."""
    bits, group_size = _scheme(name, cand)
    texts = heldout_samples(cfg.calibration, cfg.resolve)
    if not texts:
        raise InputError(f"{cfg.source}: calibration.heldout_samples: 0 leaves no held-out "
                         "text to measure layer sensitivity on")
    device = device or quantiser_device()
    key = sensitivity_key(model_digest, (bits, group_size), texts, cfg.calibration.seq_len,
                          device)
    cache_file = cache_root() / "sensitivity" / f"{key[:24]}.json"
    cached = _cached(cache_file)
    if cached is not None:
        return cached
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "heldout.json").write_text(json.dumps(texts))
    job = {"model_dir": str(model_dir), "heldout_file": str(out_dir / "heldout.json"),
           "seq_len": cfg.calibration.seq_len, "bits": bits, "group_size": group_size,
           "compute_dtype": fast_dtype(device),
           "result_file": str(out_dir / "worker-result.json")}
    run_worker(job, out_dir / "sensitivity.log", on_progress, worker=WORKER,
               expect_device=device)
    try:
        facts = json.loads((out_dir / "worker-result.json").read_text())
    except (OSError, ValueError) as err:
        raise InfraError(f"layer sensitivity: the worker wrote no readable result "
                         f"({type(err).__name__}; log: {out_dir / 'sensitivity.log'})") from None
    result = Sensitivity(name, bits, group_size, [BlockScore(**b) for b in facts["blocks"]],
                         facts["tokens"], facts["passages"], facts["seconds"], key, False)
    write_json(out_dir / FILE, result.to_dict())
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    write_json(cache_file, result.to_dict())
    return result

