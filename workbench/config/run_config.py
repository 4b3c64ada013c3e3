"""The run configuration: one YAML file validated into typed objects.

Every problem names the file, the dotted key the user typed and what is allowed, and all
problems are reported at once (``workbench validate``), not one per try.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from workbench.config.candidate import (  # re-exported: the run config names them
    DEFAULT_GROUP_SIZE,
    GROUPED_RECIPES,
    KV_CACHE_DTYPES,
    RECIPES,
    Candidate,
)
from workbench.config.endpoints import EndpointConfig, EndpointsConfig  # re-exported
from workbench.config.judge import JudgeConfig
from workbench.config.load import (  # re-exported: the run config names them
    BUILTIN_PROFILES,
    DEFAULT_PRICE_PER_HOUR,
    SLO,
    LengthDist,
    LoadConfig,
    LoadProfile,
)
from workbench.config.rollout import RolloutConfig
from workbench.config.tune import TuneConfig
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.files import exists
from workbench.mechanisms.hub import resolve_hub_model
from workbench.mechanisms.paths import SHIPPED, default_model_dir
from workbench.mechanisms.yaml_io import (
    StrictModel,
    a_name,
    format_validation_error,
    named_keys,
    read_yaml,
)

__all__ = [
    "BUILTIN_PROFILES",
    "DEFAULT_GROUP_SIZE",
    "DEFAULT_PRICE_PER_HOUR",
    "GROUPED_RECIPES",
    "KV_CACHE_DTYPES",
    "RECIPES",
    "SLO",
    "CalibrationConfig",
    "Candidate",
    "EndpointConfig",
    "EndpointsConfig",
    "EngineConfig",
    "LengthDist",
    "LoadConfig",
    "LoadProfile",
    "ModelConfig",
    "RunConfig",
    "TrackingConfig",
    "format_validation_error",
    "is_repo_id",
    "load_config",
    "read_yaml",
]



class ModelConfig(StrictModel):
    name: str = Field(description="Name served to clients and shown in records")
    _name = field_validator("name")(classmethod(lambda cls, v: a_name(v)))
    path: str = Field(
        default="default",
        description="A local Hugging Face folder, 'default' for the embedded SmolLM2-135M, "
                    "or a Hugging Face repo id (org/name) resolved through huggingface_hub's "
                    "cache (HF_HUB_OFFLINE=1: from the cache only)",
    )
    revision: str | None = Field(
        default=None, description="A hub model's branch, tag or commit (default main); the "
                                  "record keeps the commit it resolved to")

    def local_folder(self, base: Path) -> Path | None:
        """The folder the path names on this machine, or None for a hub repo id: a path
        that exists here is a folder (even one shaped like org/name); one that does not and
        is shaped like a repo id is a hub model."""
        if self.path == "default":
            return default_model_dir()
        p = Path(os.path.expanduser(self.path))
        p = p if p.is_absolute() else (base / p).resolve()
        return p if p.exists() or not is_repo_id(self.path) else None

    def resolved_path(self, base: Path) -> Path:
        """The model's folder: the local one, or the hub snapshot of its revision (raises
        InputError naming the repo and revision when it cannot be resolved)."""
        local = self.local_folder(base)
        if local is not None:
            return local

        return resolve_hub_model(self.path, self.revision).path


_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")


def is_repo_id(text: str) -> bool:
    """org/name as the hub spells repo ids: one slash, no path syntax (., .., ~, /abs)."""
    return bool(_REPO_ID.match(text)) and ".." not in text and not text.endswith((".", "-"))


class CalibrationConfig(StrictModel):
    files: list[str] = Field(min_length=1, description="JSONL files with a 'text' field")
    num_samples: int = Field(default=128, gt=0)
    seq_len: int = Field(default=256, ge=16)
    seed: int = 0
    heldout: list[str] = Field(
        default_factory=lambda: ["calibration_data/heldout.jsonl"],
        description="JSONL text for the perplexity check after quantising; never calibrated on")
    heldout_samples: int = Field(
        default=16, ge=0, description="Held-out passages for that check (0 skips it)")


class EngineConfig(StrictModel):
    max_model_len: int = Field(default=2048, ge=64)
    tensor_parallel_size: int = Field(default=1, ge=1, description="Devices one model layer is "
                                      "split across (vLLM --tensor-parallel-size)")
    pipeline_parallel_size: int = Field(default=1, ge=1, description="Stages the layers are "
                                        "split into (vLLM --pipeline-parallel-size)")
    data_parallel_size: int = Field(default=1, ge=1, description="Replicas behind one endpoint "
                                    "(vLLM --data-parallel-size)")
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        default=None, description="How vLLM starts its workers: mp (processes on this host) "
                                  "or ray (a Ray cluster, multi-node); default: vLLM's choice")
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = Field(default="auto", description=(
        "The engine's --dtype; auto: the type this device computes fast in (bf16 on a GPU "
        "and on a CPU with native bf16, float32 on other CPUs), not vLLM's auto"))
    enforce_eager: bool = Field(default=False, description="Skip torch.compile: faster "
                                "start, slower decode")
    kv_cache_space_gib: int = Field(default=2, ge=1, description="KV cache size on CPU (GiB)")
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    startup_timeout_s: float = Field(default=900, gt=0)
    request_timeout_s: float = Field(default=300, gt=0)
    extra_args: list[str] = Field(default_factory=list)
    platform: Literal["auto", "cpu"] = Field(default="auto", description=(
        "On a CPU: auto serves on the platform vLLM picks itself (AMD Zen's, where zentorch "
        "imports on an AMD CPU with AVX-512; else its CPU platform); cpu keeps vLLM's CPU "
        "platform even there. The record names the platform the engine served on"))
    batch_invariant: Literal["auto", "on", "off"] = Field(default="auto", description=(
        "vLLM's batch-invariant kernels: auto (where vLLM has them: CUDA 8.0+), on, off"))
    suite_binding: Literal["auto", "every-core", "vllm"] = Field(default="auto", description=(
        "On a CPU, the cores the suites compute on: every-core runs them in an engine "
        "session of their own on every core (the load test keeps vLLM's binding, in "
        "sessions of its own); vllm leaves one core to vLLM's engine process, as the load "
        "test does; auto picks every-core where it was measured to pay (docs/load.md, "
        "'Where the suites compute')"))

    def identity(self) -> dict[str, Any]:
        """What a measurement on this engine depends on, for cache keys: every field, less
        those added later while at their defaults, so older cached measurements stay valid."""
        defaults = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1,
                    "data_parallel_size": 1, "distributed_executor_backend": None,
                    "batch_invariant": "auto"}
        # the suites' binding as resolved for the device, not as written, is the key's
        # (measure/cache.baseline_key): `auto` and what it picks measure alike
        return {k: v for k, v in self.model_dump().items()
                if (k not in defaults or v != defaults[k]) and k != "suite_binding"}

    @property
    def devices(self) -> int:
        """Devices (GPUs; CPU ranks on a CPU) one engine holds: tensor x pipeline x data."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    def parallel_args(self) -> list[str]:
        """The engine arguments that spread one model over several devices."""
        args = []
        for flag, value in (("--tensor-parallel-size", self.tensor_parallel_size),
                            ("--pipeline-parallel-size", self.pipeline_parallel_size),
                            ("--data-parallel-size", self.data_parallel_size)):
            if value > 1:
                args += [flag, str(value)]
        if self.distributed_executor_backend:
            args += ["--distributed-executor-backend", self.distributed_executor_backend]
        return args


class TrackingConfig(StrictModel):
    uri: str | None = Field(
        default=None, description="MLflow tracking URI; default sqlite:///<cwd>/mlflow.db"
    )
    experiment: str = "quant-workbench"
    required: bool = Field(
        default=True, description="A tracking server that does not answer is an input error "
                                  "(exit 2, before anything runs); false: run and record "
                                  "locally without MLflow, saying so")
    _experiment = field_validator("experiment")(classmethod(lambda cls, v: a_name(v)))


def tracking_uri(cfg: TrackingConfig) -> str:
    """MLFLOW_TRACKING_URI wins, then the config, then ./mlflow.db (absolute: a relative
    sqlite path would be read against whatever folder MLflow runs in)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or cfg.uri or \
        f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"


class RunConfig(StrictModel):
    model: ModelConfig
    candidates: dict[str, Candidate] = Field(min_length=1)
    calibration: CalibrationConfig
    engine: EngineConfig = EngineConfig()
    suites: list[str] = Field(min_length=1, description="Suite folders under eval_suites/")
    profile: Literal["smoke", "full"] = "smoke"
    seed: int = 0
    load: LoadConfig = LoadConfig()
    gates: str = Field(description="Gate policy YAML, relative to the config file")
    tracking: TrackingConfig = TrackingConfig()
    endpoints: EndpointsConfig = EndpointsConfig()
    rollout: RolloutConfig = RolloutConfig()
    tune: TuneConfig = TuneConfig()
    judge: JudgeConfig | None = Field(default=None, description=(
        "A model asked whether each traffic answer is as good as the baseline's "
        "(docs/traffic.md); off unless declared"))

    # Set by load_config, not by the user.
    source: Path = Field(default=Path("."), exclude=True)

    _candidate_names = field_validator("candidates")(classmethod(lambda cls, v: named_keys(v)))

    @property
    def base_dir(self) -> Path:
        return self.source.parent

    @model_validator(mode="after")
    def _workload_fits_context(self) -> RunConfig:
        for name in self.load.gated:
            w = self.load.profiles[name]
            longest = w.longest_request_tokens
            if w.replays or longest <= self.engine.max_model_len:
                continue
            turns = f", over {w.conversation.turns} conversation turns" if w.conversation else ""
            raise ValueError(
                f"load.profiles.{name}: its longest request ({longest} tokens: "
                f"prompt_tokens up to {w.prompt_tokens.upper} + output_tokens up to "
                f"{w.output_tokens.upper}{turns}) exceeds engine.max_model_len "
                f"({self.engine.max_model_len})")
        return self

    @property
    def workload(self) -> LoadProfile:
        """The load profile this run measures."""
        return self.load.selected

    def with_load_profile(self, names: str) -> RunConfig:
        """This config measuring other named load profiles: one name, or several separated
        by commas (the first is the run's own; each is gated)."""
        wanted = [n.strip() for n in names.split(",")]
        for name in wanted:
            if name not in self.load.profiles:
                raise InputError(
                    f"{self.source}: --load-profile {name!r} is not a load profile of this "
                    f"config; known: {', '.join(sorted(self.load.profiles))}")
        data = self.model_dump()
        data["load"]["profile"], data["load"]["also"] = wanted[0], wanted[1:]
        data["load"]["profiles"] = {k: v.model_dump(exclude_defaults=True)
                                    for k, v in self.load.profiles.items()}
        try:
            cfg = RunConfig.model_validate(data)
        except ValidationError as err:
            problems = format_validation_error(self.source, err, RunConfig)
            raise InputError(problems[0], problems) from None
        return cfg.model_copy(update={"source": self.source})

    def with_profile(self, name: Literal["smoke", "full"]) -> RunConfig:
        """This config running its suites' smoke sample or every item (--profile)."""
        return self.model_copy(update={"profile": name})

    def with_endpoints(self, baseline: str | None, candidate: str | None) -> RunConfig:
        """This config with sides measured at the given endpoint URLs (the command line's
        --baseline-endpoint / --candidate-endpoint over endpoints.<side>.url)."""
        sides = {}
        for role, url in (("baseline", baseline), ("candidate", candidate)):
            current = self.endpoints.of(role)
            if url is None:
                sides[role] = current
                continue
            fields = current.model_dump() if current is not None else {}
            try:
                sides[role] = EndpointConfig.model_validate({**fields, "url": url})
            except ValidationError as err:
                why = err.errors()[0]["msg"].removeprefix("Value error, ")
                raise InputError(f"--{role}-endpoint: {url!r}: {why}") from None
        return self.model_copy(update={"endpoints": EndpointsConfig(**sides)})

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
        shipped = (SHIPPED / p).resolve()
        # Not found anywhere: the path next to the config is the one an error should name
        # (and the reader of that key says why, e.g. a name the filesystem refuses).
        return shipped if not exists(near) and exists(shipped) else near


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
