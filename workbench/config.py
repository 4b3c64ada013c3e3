"""The run configuration: one YAML file validated into typed objects.

Every problem names the file, the dotted key the user typed and what is allowed, and all
problems are reported at once (``workbench validate``), not one per try.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import InputError
from .paths import REPO_ROOT, default_model_dir

__all__ = [
    "DEFAULT_GROUP_SIZE",
    "DEFAULT_PRICE_PER_HOUR",
    "GROUPED_RECIPES",
    "KV_CACHE_DTYPES",
    "RECIPES",
    "SLO",
    "CalibrationConfig",
    "Candidate",
    "EngineConfig",
    "LoadProfile",
    "ModelConfig",
    "RunConfig",
    "TrackingConfig",
    "format_validation_error",
    "load_config",
    "read_yaml",
]

# Built-in quantisation recipes (workbench/quantize/worker.py builds them). "none" serves the
# baseline's own weights with the candidate's engine arguments (an FP8 KV cache chosen at
# serve time, or an A/A check).
RECIPES = ("w4a16", "w8a16", "w8a8-int8", "fp8-dynamic", "kv-fp8", "fp8-dynamic+kv-fp8", "none")
GROUPED_RECIPES = ("w4a16", "w8a16")
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
DEFAULT_GROUP_SIZE = 128


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Strict):
    name: str = Field(description="Name served to clients and shown in records")
    path: str = Field(
        default="default",
        description="A local Hugging Face folder, or 'default' for the embedded SmolLM2-135M",
    )

    def resolved_path(self, base: Path) -> Path:
        if self.path == "default":
            return default_model_dir()
        p = Path(os.path.expanduser(self.path))
        return p if p.is_absolute() else (base / p).resolve()


class Candidate(_Strict):
    """A named candidate: a built-in recipe, an llm-compressor recipe file, or a ready
    checkpoint folder; plus how the engine serves it."""

    recipe: Literal[
        "w4a16", "w8a16", "w8a8-int8", "fp8-dynamic", "kv-fp8", "fp8-dynamic+kv-fp8", "none"
    ] | None = None
    recipe_file: str | None = Field(
        default=None, description="An llm-compressor recipe YAML, passed through unchanged")
    checkpoint: str | None = Field(default=None, description="A ready quantised model folder")
    group_size: int | None = Field(
        default=None, gt=0, description=f"Weight group size (w4a16, w8a16; default "
                                        f"{DEFAULT_GROUP_SIZE})")
    smoothing_strength: float | None = Field(
        default=None, gt=0, lt=1, description="SmoothQuant migration strength (w8a8-int8; "
                                              "default 0.8)")
    ignore: list[str] = Field(default_factory=lambda: ["lm_head"])
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        default="auto", description="The engine's --kv-cache-dtype for this candidate")
    engine_args: list[str] = Field(default_factory=list, description="Extra vLLM arguments")

    @field_validator("group_size")
    @classmethod
    def _power_of_two(cls, v: int | None) -> int | None:
        if v is not None and v & (v - 1):
            raise ValueError(f"must be a power of two (32, 64, 128, ...), got {v}")
        return v

    def model_post_init(self, _ctx: Any) -> None:
        sources = [self.recipe, self.recipe_file, self.checkpoint]
        if sum(s is not None for s in sources) != 1:
            raise ValueError("give exactly one of 'recipe', 'recipe_file' or 'checkpoint'")
        if self.group_size is not None and self.recipe not in GROUPED_RECIPES:
            raise ValueError(f"'group_size' applies only to recipes {', '.join(GROUPED_RECIPES)}")
        if self.smoothing_strength is not None and self.recipe != "w8a8-int8":
            raise ValueError("'smoothing_strength' applies only to recipe w8a8-int8")

    @property
    def resolved_group_size(self) -> int | None:
        if self.recipe not in GROUPED_RECIPES:
            return None
        return self.group_size or DEFAULT_GROUP_SIZE

    def recipe_params(self) -> dict[str, Any]:
        """What the quantiser is asked to do: the recipe with every default filled in."""
        params: dict[str, Any] = {"recipe": self.recipe, "ignore": list(self.ignore)}
        if self.resolved_group_size is not None:
            params["group_size"] = self.resolved_group_size
        if self.recipe == "w8a8-int8":
            params["smoothing_strength"] = self.smoothing_strength or 0.8
        return params

    def serve_args(self) -> list[str]:
        """Engine arguments for serving this candidate."""
        kv = [] if self.kv_cache_dtype == "auto" else ["--kv-cache-dtype", self.kv_cache_dtype]
        return kv + list(self.engine_args)


class CalibrationConfig(_Strict):
    files: list[str] = Field(min_length=1, description="JSONL files with a 'text' field")
    num_samples: int = Field(default=128, gt=0)
    seq_len: int = Field(default=256, ge=16)
    seed: int = 0
    heldout: list[str] = Field(
        default_factory=lambda: ["calibration_data/heldout.jsonl"],
        description="JSONL text for the perplexity check after quantising; never calibrated on")
    heldout_samples: int = Field(
        default=16, ge=0, description="Held-out passages for that check (0 skips it)")


class EngineConfig(_Strict):
    max_model_len: int = Field(default=2048, ge=64)
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = "bfloat16"
    enforce_eager: bool = Field(
        default=False, description="Skip torch.compile: faster start, slower decode"
    )
    kv_cache_space_gib: int = Field(default=2, ge=1, description="KV cache size on CPU (GiB)")
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    startup_timeout_s: float = Field(default=900, gt=0)
    request_timeout_s: float = Field(default=300, gt=0)
    extra_args: list[str] = Field(default_factory=list)


class SLO(_Strict):
    """The latency a request must meet to count as served well (goodput, attainment)."""

    ttft_p99_ms: float = Field(gt=0, description="Time to first token, at the 99th percentile")
    tpot_p99_ms: float = Field(gt=0, description="Time per output token, at the 99th percentile")


# Illustrative on-demand prices (USD per device-hour) for the cost figures, not quotes: set
# load.price_per_hour to what your fleet pays.
DEFAULT_PRICE_PER_HOUR = {"cpu": 0.10, "cuda": 4.00}


class LoadProfile(_Strict):
    concurrency: list[int] = Field(min_length=1, description="Concurrency levels to sweep")
    num_prompts: int = Field(default=16, gt=0, description="Requests per level")
    input_len: int = Field(default=128, gt=0)
    output_len: int = Field(default=64, gt=0)
    warmup_prompts: int = Field(default=2, ge=0)
    seed: int = 0
    slo: SLO | None = Field(default=None, description="Per-request latency targets: goodput, "
                                                       "SLO attainment, max stable concurrency")
    price_per_hour: float | None = Field(
        default=None, gt=0, description="Device price (USD/hour) for cost per million output "
                                        "tokens; default per device kind, illustrative")

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(c <= 0 for c in v):
            raise ValueError(f"levels must be positive integers, got {v}")
        return sorted(set(v))


class TrackingConfig(_Strict):
    uri: str | None = Field(
        default=None, description="MLflow tracking URI; default sqlite:///<cwd>/mlflow.db"
    )
    experiment: str = "quant-workbench"


class RunConfig(_Strict):
    model: ModelConfig
    candidates: dict[str, Candidate] = Field(min_length=1)
    calibration: CalibrationConfig
    engine: EngineConfig = EngineConfig()
    suites: list[str] = Field(min_length=1, description="Suite folders under eval_suites/")
    profile: Literal["smoke", "full"] = "smoke"
    seed: int = 0
    load: LoadProfile
    gates: str = Field(description="Gate policy YAML, relative to the config file")
    tracking: TrackingConfig = TrackingConfig()

    # Set by load_config, not by the user.
    source: Path = Field(default=Path("."), exclude=True)

    @property
    def base_dir(self) -> Path:
        return self.source.parent

    def candidate(self, name: str) -> Candidate:
        if name not in self.candidates:
            known = ", ".join(sorted(self.candidates))
            raise InputError(
                f"{self.source}: unknown candidate {name!r}; known candidates: {known}"
            )
        return self.candidates[name]

    def resolve(self, relative: str) -> Path:
        """A path from the config, relative to the config file, or to the repo as fallback."""
        p = Path(os.path.expanduser(relative))
        if p.is_absolute():
            return p
        near = (self.base_dir / p).resolve()
        return near if near.exists() else (REPO_ROOT / p).resolve()


def read_yaml(path: Path) -> Any:
    """Parse a YAML file, turning I/O and syntax errors into InputError naming the file."""
    try:
        text = path.read_text()
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', err)})") from err


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation like X, X | None, list[X] or dict[str, X]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names allowed at the parent of ``loc``, for 'unknown key' messages."""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if current is None:
            return []
        field = current.model_fields.get(str(part))
        if field is None:
            continue  # a dict key or list index inside a container field
        current = _model_in(field.annotation)
    if current is None:
        return []
    return [n for n, f in current.model_fields.items() if not f.exclude]


def format_validation_error(
    path: Path, err: ValidationError, model: type[BaseModel]
) -> list[str]:
    """One line per problem: file, dotted key, what is wrong and what is allowed."""
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(model, e["loc"]))
            lines.append(f"{path}: {key}: unknown key (allowed here: {allowed})")
        elif e["type"] == "missing":
            lines.append(f"{path}: {key}: required key is missing")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"{path}: {key}: {msg} (got {e.get('input')!r})")
    return lines


def load_config(path: Path | str) -> RunConfig:
    """Load and validate a run config; raise InputError listing every problem."""
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of keys at the top level")
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        problems = format_validation_error(path, err, RunConfig)
        raise InputError(problems[0], problems) from None
    return cfg.model_copy(update={"source": path.resolve()})
