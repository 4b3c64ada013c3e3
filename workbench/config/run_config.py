"""The run configuration: one YAML file validated into typed objects.

Every problem names the file, the dotted key the user typed and what is allowed, and all
problems are reported at once (``workbench validate``), not one per try.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from workbench.mechanisms.errors import InputError
from workbench.mechanisms.files import name_problem, read_text
from workbench.mechanisms.hub import resolve_hub_model
from workbench.mechanisms.paths import SHIPPED, default_model_dir

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

# Built-in quantisation recipes (subprocesses/quantize_worker.py builds them). "none" serves
# the baseline's own weights with the candidate's engine arguments (an FP8 KV cache chosen at
# serve time, or an A/A check).
RECIPES = ("w4a16", "w8a16", "w8a8-int8", "fp8-dynamic", "kv-fp8", "fp8-dynamic+kv-fp8", "none")
GROUPED_RECIPES = ("w4a16", "w8a16")
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
DEFAULT_GROUP_SIZE = 128


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _a_name(value: str) -> str:
    problem = name_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _named_keys(mapping: dict[str, Any]) -> dict[str, Any]:
    """A mapping whose keys become folder and file names (docs/reliability.md)."""
    for key in mapping:
        _a_name(key)
    return mapping


class ModelConfig(_Strict):
    name: str = Field(description="Name served to clients and shown in records")
    _name = field_validator("name")(classmethod(lambda cls, v: _a_name(v)))
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
    tensor_parallel_size: int = Field(default=1, ge=1, description="Devices one model layer is "
                                      "split across (vLLM --tensor-parallel-size)")
    pipeline_parallel_size: int = Field(default=1, ge=1, description="Stages the layers are "
                                        "split into (vLLM --pipeline-parallel-size)")
    data_parallel_size: int = Field(default=1, ge=1, description="Replicas behind one endpoint "
                                    "(vLLM --data-parallel-size)")
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        default=None, description="How vLLM starts its workers: mp (processes on this host) "
                                  "or ray (a Ray cluster, multi-node); default: vLLM's choice")
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = "bfloat16"
    enforce_eager: bool = Field(
        default=False, description="Skip torch.compile: faster start, slower decode"
    )
    kv_cache_space_gib: int = Field(default=2, ge=1, description="KV cache size on CPU (GiB)")
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    startup_timeout_s: float = Field(default=900, gt=0)
    request_timeout_s: float = Field(default=300, gt=0)
    extra_args: list[str] = Field(default_factory=list)

    def identity(self) -> dict[str, Any]:
        """What a measurement on this engine depends on, for cache keys: every field, less
        the parallel ones while they are at their defaults (one device, vLLM's executor),
        so measurements cached before they existed, on exactly that engine, stay valid."""
        defaults = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1,
                    "data_parallel_size": 1, "distributed_executor_backend": None}
        return {k: v for k, v in self.model_dump().items()
                if k not in defaults or v != defaults[k]}

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


class EndpointConfig(_Strict):
    """A model already served behind an OpenAI-compatible vLLM endpoint: measured where it
    runs, neither quantised nor started by the workbench (docs/scale.md)."""

    url: str = Field(description="The server's root, e.g. https://llm.internal:8000 (not /v1)")
    api_key_env: str | None = Field(
        default=None, description="Name of the environment variable holding the API key, "
                                  "sent as a bearer token; the key itself never appears in a "
                                  "config, record, log or MLflow")
    model: str | None = Field(default=None, description="The served model id; default: the "
                                                        "only one /v1/models lists")
    devices: int = Field(default=1, ge=1, description="Devices the deployment holds, for cost "
                                                      "per million tokens (not measurable)")

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"must be an http:// or https:// URL, got {v!r}")
        if "@" in v.split("/")[2]:
            raise ValueError("must not carry credentials (user:password@); name the key's "
                             "environment variable in api_key_env")
        return v.rstrip("/").removesuffix("/v1")

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError("must be the name of an environment variable (letters, digits, "
                             "_), not the key itself")
        return v


class EndpointsConfig(_Strict):
    baseline: EndpointConfig | None = None
    candidate: EndpointConfig | None = None

    def of(self, role: str) -> EndpointConfig | None:
        return self.baseline if role == "baseline" else self.candidate

    def devices(self, role: str) -> int:
        ep = self.of(role)
        return ep.devices if ep is not None else 1


class SLO(_Strict):
    """The latency a request must meet to count as served well (goodput, attainment)."""

    ttft_p99_ms: float = Field(gt=0, description="Time to first token, at the 99th percentile")
    tpot_p99_ms: float = Field(gt=0, description="Time per output token, at the 99th percentile")


# Illustrative on-demand prices (USD per device-hour) for the cost figures, not quotes: set
# load.price_per_hour to what your fleet pays.
DEFAULT_PRICE_PER_HOUR = {"cpu": 0.10, "cuda": 4.00}


class LengthDist(_Strict):
    """Token counts drawn per request: fixed, uniform in [min, max], or lognormal around a
    median (clipped to [min, max]). A plain integer in the YAML means fixed."""

    distribution: Literal["fixed", "uniform", "lognormal"]
    value: int | None = Field(default=None, gt=0, description="fixed: every request")
    min: int = Field(default=1, gt=0)
    max: int | None = Field(default=None, gt=0, description="uniform, lognormal: upper bound")
    median: int | None = Field(default=None, gt=0, description="lognormal: the median")
    sigma: float | None = Field(default=None, gt=0, le=3,
                                description="lognormal: standard deviation of the log")

    @model_validator(mode="before")
    @classmethod
    def _from_int(cls, data: Any) -> Any:
        return {"distribution": "fixed", "value": data} if isinstance(data, int) else data

    @model_validator(mode="after")
    def _complete(self) -> LengthDist:
        needs = {"fixed": ("value",), "uniform": ("max",), "lognormal": ("median", "sigma",
                                                                          "max")}
        missing = [k for k in needs[self.distribution] if getattr(self, k) is None]
        if missing:
            raise ValueError(f"a {self.distribution} distribution needs "
                             f"{', '.join(missing)}")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        if self.median is not None and not self.min <= self.median <= (self.max or 0):
            raise ValueError(f"median ({self.median}) must lie in [min, max]")
        return self

    @property
    def lower(self) -> int:
        return self.value if self.distribution == "fixed" and self.value else self.min

    @property
    def upper(self) -> int:
        return self.value if self.distribution == "fixed" and self.value else (self.max or 0)


class LoadProfile(_Strict):
    """One named workload: request shapes, how they arrive, the levels swept, the SLO."""

    # the levels: exactly one of these three modes
    concurrency: list[int] | None = Field(
        default=None, min_length=1, description="Closed loop: requests in flight per level")
    request_rate: list[float] | None = Field(
        default=None, min_length=1, description="Open loop: arrivals per second per level")
    trace: str | None = Field(
        default=None, description="Replay a JSONL trace (docs/load.md): arrival offsets, "
                                  "prompt and output tokens per request")
    replay_speed: list[float] = Field(
        default=[1.0], min_length=1, description="trace: one level per time compression")
    burstiness: float = Field(default=1.0, gt=0, description="request_rate: gamma shape of "
                                                              "the gaps; 1 = Poisson, <1 bursty")
    max_concurrency: int | None = Field(
        default=None, gt=0, description="request_rate / trace: cap on requests in flight")
    # the requests
    prompt_tokens: LengthDist = Field(default=LengthDist(distribution="fixed", value=128))
    output_tokens: LengthDist = Field(default=LengthDist(distribution="fixed", value=64))
    shared_prefix_tokens: int = Field(
        default=0, ge=0, description="A prefix every prompt shares (a system prompt): "
                                     "prefix-cache effects")
    # the bounds
    num_prompts: int | None = Field(default=None, gt=0, description="Requests per level "
                                    "(default 16; a trace: all of its requests)")
    max_duration_s: float | None = Field(
        default=None, gt=0, description="Stop sending new requests after this long per level")
    warmup_prompts: int = Field(default=2, ge=0, description="Sent before the first level; "
                                                              "in no figure")
    seed: int = 0
    slo: SLO | None = Field(default=None, description="Per-request latency targets: goodput, "
                                                       "SLO attainment, max stable level")
    price_per_hour: float | None = Field(
        default=None, gt=0, description="Device price (USD/hour) for cost per million output "
                                        "tokens; default per device kind, illustrative")

    @field_validator("concurrency", "request_rate", "replay_speed")
    @classmethod
    def _positive_levels(cls, v: list | None) -> list | None:
        if v is not None and any(x <= 0 for x in v):
            raise ValueError(f"levels must be positive, got {v}")
        return sorted(set(v)) if v is not None else None

    @model_validator(mode="after")
    def _one_mode(self) -> LoadProfile:
        given = [k for k in ("concurrency", "request_rate", "trace") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of concurrency (a sweep), request_rate "
                             "(arrivals per second) or trace (a replay file); got "
                             f"{given or 'none'}")
        if self.shared_prefix_tokens and self.shared_prefix_tokens >= self.prompt_tokens.lower:
            raise ValueError(f"shared_prefix_tokens ({self.shared_prefix_tokens}) must be "
                             f"below the shortest prompt ({self.prompt_tokens.lower})")
        return self

    @property
    def mode(self) -> Literal["concurrency", "rate", "trace"]:
        return "concurrency" if self.concurrency else "rate" if self.request_rate else "trace"

    @property
    def levels(self) -> list[float]:
        return list(self.concurrency or self.request_rate or self.replay_speed)

    @property
    def requests_per_level(self) -> int | None:
        """None: every request of the trace."""
        return self.num_prompts or (None if self.trace else 16)


# Built-in workloads, sized for one data-centre GPU serving a model of a few billion
# parameters; a config overrides any field (configs/default.yaml shrinks them for the CPU).
# Their SLOs are starting points for a chat product and an offline batch job, not standards.
BUILTIN_PROFILES: dict[str, dict[str, Any]] = {
    "interactive": {
        "concurrency": [1, 4, 16, 64], "num_prompts": 256, "max_duration_s": 180,
        "prompt_tokens": {"distribution": "lognormal", "median": 512, "sigma": 0.8,
                          "min": 160, "max": 3072},
        "output_tokens": {"distribution": "lognormal", "median": 160, "sigma": 0.6,
                          "min": 16, "max": 1024},
        "shared_prefix_tokens": 128, "warmup_prompts": 8,
        "slo": {"ttft_p99_ms": 800, "tpot_p99_ms": 60},
    },
    "batch": {
        "request_rate": [2, 8, 32], "burstiness": 0.5, "num_prompts": 512,
        "max_duration_s": 300,
        "prompt_tokens": {"distribution": "uniform", "min": 256, "max": 2048},
        "output_tokens": {"distribution": "uniform", "min": 64, "max": 1024},
        "warmup_prompts": 8,
        "slo": {"ttft_p99_ms": 10000, "tpot_p99_ms": 250},
    },
}


class LoadConfig(_Strict):
    """The named workloads of a config and the one a run measures."""

    profile: str = Field(default="interactive", description="The profile this run measures "
                                                             "(`--load-profile` overrides)")
    profiles: dict[str, LoadProfile] = Field(
        default_factory=dict, description="Named workloads; `interactive` and `batch` are "
                                          "built in, and an entry of that name overrides "
                                          "their fields")
    rounds: int = Field(
        default=2, ge=1, le=10, description="Engine sessions per model for the load test, "
                                            "interleaved baseline, candidate, baseline, ...: "
                                            "latency intervals then include the variance "
                                            "between sessions (docs/gates.md)")

    @model_validator(mode="before")
    @classmethod
    def _merge_builtins(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        given = data.get("profiles") or {}
        if not isinstance(given, dict):
            return data
        merged = {name: dict(fields) for name, fields in BUILTIN_PROFILES.items()}
        for name, fields in given.items():
            if name in merged and isinstance(fields, dict):
                base = merged[name]
                # naming one mode replaces the built-in's mode
                if {"concurrency", "request_rate", "trace"} & fields.keys():
                    for mode_key in ("concurrency", "request_rate", "trace"):
                        base.pop(mode_key, None)
                merged[name] = {**base, **fields}
            else:
                merged[name] = fields
        return {**data, "profiles": merged}

    _profile_names = field_validator("profiles")(classmethod(lambda cls, v: _named_keys(v)))

    @model_validator(mode="after")
    def _known_profile(self) -> LoadConfig:
        if self.profile not in self.profiles:
            raise ValueError(f"unknown load profile {self.profile!r}; known: "
                             f"{', '.join(sorted(self.profiles))}")
        return self

    @property
    def selected(self) -> LoadProfile:
        return self.profiles[self.profile]

    def declared(self) -> list[str]:
        """The selected profile and every one the config itself sets: a built-in the config
        leaves untouched is sized for a GPU and is not this config's to fit."""
        untouched = {name for name, fields in BUILTIN_PROFILES.items()
                     if self.profiles.get(name) == LoadProfile.model_validate(fields)}
        return sorted({self.profile} | (set(self.profiles) - untouched))


class TrackingConfig(_Strict):
    uri: str | None = Field(
        default=None, description="MLflow tracking URI; default sqlite:///<cwd>/mlflow.db"
    )
    experiment: str = "quant-workbench"
    required: bool = Field(
        default=True, description="A tracking server that does not answer is an input error "
                                  "(exit 2, before anything runs); false: run and record "
                                  "locally without MLflow, saying so")
    _experiment = field_validator("experiment")(classmethod(lambda cls, v: _a_name(v)))


def tracking_uri(cfg: TrackingConfig) -> str:
    """MLFLOW_TRACKING_URI wins, then the config, then ./mlflow.db (absolute: a relative
    sqlite path would be read against whatever folder MLflow runs in)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or cfg.uri or \
        f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"


class RunConfig(_Strict):
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

    # Set by load_config, not by the user.
    source: Path = Field(default=Path("."), exclude=True)

    _candidate_names = field_validator("candidates")(classmethod(lambda cls, v: _named_keys(v)))

    @property
    def base_dir(self) -> Path:
        return self.source.parent

    @model_validator(mode="after")
    def _workload_fits_context(self) -> RunConfig:
        w = self.load.selected
        longest = w.prompt_tokens.upper + w.output_tokens.upper
        if not w.trace and longest > self.engine.max_model_len:
            raise ValueError(
                f"load.profiles.{self.load.profile}: its longest request ({longest} tokens: "
                f"prompt_tokens up to {w.prompt_tokens.upper} + output_tokens up to "
                f"{w.output_tokens.upper}) exceeds engine.max_model_len "
                f"({self.engine.max_model_len})")
        return self

    @property
    def workload(self) -> LoadProfile:
        """The load profile this run measures."""
        return self.load.selected

    def with_load_profile(self, name: str) -> RunConfig:
        """This config measuring another of its named load profiles."""
        if name not in self.load.profiles:
            raise InputError(f"{self.source}: --load-profile {name!r} is not a load profile "
                             f"of this config; known: {', '.join(sorted(self.load.profiles))}")
        data = self.model_dump()
        data["load"]["profile"] = name
        data["load"]["profiles"] = {k: v.model_dump(exclude_defaults=True)
                                    for k, v in self.load.profiles.items()}
        try:
            cfg = RunConfig.model_validate(data)
        except ValidationError as err:
            problems = format_validation_error(self.source, err, RunConfig)
            raise InputError(problems[0], problems) from None
        return cfg.model_copy(update={"source": self.source})

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
        # Not found anywhere: the path next to the config is the one an error should name.
        return shipped if not near.exists() and shipped.exists() else near


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: by
    default the last one silently wins, so a config would not mean what it reads as."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (lines {seen[key]} and {line})",
                    key_node.start_mark)
            if isinstance(key, (str, int, float, bool)):
                seen[key] = line
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file strictly (UTF-8, no duplicate keys), turning every problem into an
    InputError naming the file (and line)."""
    text = read_text(path)
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
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
        key = ".".join(str(p) for p in e["loc"])
        where = f"{path}: {key}:" if key else f"{path}:"  # a cross-field error names its fields
        if e["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(model, e["loc"]))
            lines.append(f"{where} unknown key (allowed here: {allowed})")
        elif e["type"] == "missing":
            lines.append(f"{where} required key is missing")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"{where} {msg}{_shown_input(e.get('input'))}")
    return lines


def _shown_input(value: Any) -> str:
    """' (got ...)' for a value short enough to read on one line; never a whole section."""
    if isinstance(value, (dict, list)):
        return ""
    text = repr(value)
    return f" (got {text})" if len(text) <= 80 else f" (got {text[:77]}...)"


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
