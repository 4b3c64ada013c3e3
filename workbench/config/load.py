"""The load a run declares: its load profiles (built in, or the config's own), their
length distributions, arrival modes and SLO, and the price that turns throughput into
cost (docs/load.md).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from workbench.mechanisms.yaml_io import StrictModel, named_keys


class SLO(StrictModel):
    """The latency a request must meet to count as served well (goodput, attainment)."""

    ttft_p99_ms: float = Field(gt=0, description="Time to first token, at the 99th percentile")
    tpot_p99_ms: float = Field(gt=0, description="Time per output token, at the 99th percentile")


# Illustrative on-demand prices (USD per device-hour) for the cost figures, not quotes: set
# load.price_per_hour to what your fleet pays.
DEFAULT_PRICE_PER_HOUR = {"cpu": 0.10, "cuda": 4.00}


class LengthDist(StrictModel):
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


class Conversation(StrictModel):
    """Multi-turn chat: each of a level's requests is a conversation of `turns` requests,
    each turn's prompt the whole conversation so far plus the user's next message, sent
    when the previous answer has arrived and the user has thought (docs/load.md,
    "Conversations")."""

    turns: int = Field(ge=2, le=64, description="Requests per conversation")
    think_time_s: float = Field(default=1.0, ge=0, description="Mean pause before each "
                                "later turn (exponential, seeded)")
    user_tokens: LengthDist = Field(default=LengthDist(distribution="fixed", value=32),
                                    description="Tokens of each later user message")


class CapacitySearch(StrictModel):
    """The heaviest load that holds the SLO, searched: levels doubled from `start` until one
    does not hold, then bisected (docs/load.md, "Capacity at the SLO")."""

    start: float | None = Field(default=None, gt=0, description="The first level searched "
                                "(arrivals/s or requests in flight); default the profile's "
                                "lightest level")
    resolution: float = Field(default=0.1, gt=0, lt=1, description="Bisect until the level "
                              "that does not hold is within this share above the one that does")
    max_levels: int = Field(default=8, ge=2, le=30, description="Levels searched at most")
    max_seconds: float = Field(default=600, gt=0, description="No search level starts after "
                               "this long (per engine session)")
    level_seconds: float | None = Field(
        default=30, gt=0, description="Arrival rates: each level searched sends this many "
        "seconds of arrivals (at least the profile's num_prompts), so that it is a sustained "
        "rate, not one burst; null: num_prompts at every rate")


MODES = ("concurrency", "request_rate", "trace", "from_suite")  # a profile gives one


class LoadProfile(StrictModel):
    """One named workload: request shapes, how they arrive, the levels swept, the SLO."""

    # the levels: exactly one of these three modes
    concurrency: list[int] | None = Field(
        default=None, min_length=1, description="Closed loop: requests in flight per level")
    request_rate: list[float] | None = Field(
        default=None, min_length=1, description="Open loop: arrivals per second per level")
    trace: str | None = Field(
        default=None, description="Replay a JSONL trace (docs/load.md): arrival offsets, "
                                  "prompt and output tokens per request")
    from_suite: str | None = Field(
        default=None, description="Replay a traffic suite's own requests, as `workbench "
        "traffic-trace` writes them (docs/traffic.md, 'Load from the same traffic'): each "
        "prompt through the model's chat template and tokenizer, what the prompts share, the "
        "log's arrival times (or Poisson at arrival_rate); levels as for trace")
    arrival_rate: float | None = Field(
        default=None, gt=0, description="from_suite: Poisson arrivals per second, seeded "
                                        "(default: the log's timestamps)")
    answers: str | None = Field(
        default=None, description="from_suite: a run's baseline/items-<suite>.jsonl, whose "
        "answers' lengths are the output tokens (default: each request's max_tokens)")
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
    conversation: Conversation | None = Field(
        default=None, description="Multi-turn chat: each request a conversation "
                                  "(concurrency levels: conversations in flight)")
    capacity: CapacitySearch | None = Field(
        default=None, description="Also search for the heaviest level that holds the SLO "
                                  "(needs slo; concurrency or request_rate)")
    telemetry_interval_s: float = Field(
        default=0.5, ge=0.05, le=10, description="Seconds between reads of the engine's "
                                                 "/metrics during a level: its telemetry series")
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
        given = [k for k in MODES if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of concurrency (a sweep), request_rate "
                             "(arrivals per second), trace (a replay file) or from_suite (a "
                             f"traffic suite replayed); got {given or 'none'}")
        extra = [k for k in ("arrival_rate", "answers") if getattr(self, k) is not None]
        if extra and not self.from_suite:
            raise ValueError(f"{', '.join(extra)}: for a traffic suite's replay (from_suite)")
        if self.capacity is not None and (self.slo is None or self.mode == "trace"):
            raise ValueError("capacity: the search needs an slo to hold and a concurrency or "
                             "request_rate profile to vary")
        if self.conversation is not None and self.mode != "concurrency":
            raise ValueError("conversation: its levels are conversations in flight; give "
                             "concurrency, not request_rate or trace")
        start = self.capacity.start if self.capacity is not None else None
        if self.mode == "concurrency" and start is not None and start != int(start):
            raise ValueError(f"capacity.start: {start:g} requests in flight (a whole number)")
        if self.shared_prefix_tokens and self.shared_prefix_tokens >= self.prompt_tokens.lower:
            raise ValueError(f"shared_prefix_tokens ({self.shared_prefix_tokens}) must be "
                             f"below the shortest prompt ({self.prompt_tokens.lower})")
        return self

    @property
    def mode(self) -> Literal["concurrency", "rate", "trace"]:
        return "concurrency" if self.concurrency else "rate" if self.request_rate else "trace"

    @property
    def replays(self) -> bool:
        """Its requests are a trace's, a file's or a traffic suite's (from_suite)."""
        return bool(self.trace or self.from_suite)

    @property
    def levels(self) -> list[float]:
        return list(self.concurrency or self.request_rate or self.replay_speed)

    @property
    def longest_request_tokens(self) -> int:
        """The most tokens one request may hold, prompt and answer: for a conversation,
        its last turn, which carries every turn before it."""
        one = self.prompt_tokens.upper + self.output_tokens.upper
        conv = self.conversation
        if conv is None:
            return one
        return one + (conv.turns - 1) * (self.output_tokens.upper + conv.user_tokens.upper)

    @property
    def requests_per_level(self) -> int | None:
        """None: every request of the trace."""
        return self.num_prompts or (None if self.replays else 16)


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


class LoadConfig(StrictModel):
    """The named workloads of a config and the one a run measures."""

    profile: str = Field(default="interactive", description="The profile this run measures "
                         "(`--load-profile` overrides); a list of names measures and gates "
                         "each of them in the same engine sessions, the first as the run's "
                         "own (docs/load.md, 'Several load classes')")
    also: list[str] = Field(
        default_factory=list, max_length=3, description="Further profiles measured after "
        "`profile` in every engine session and gated each against its own SLO; written "
        "`profile: [first, second, ...]`")
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
    def _profile_list(cls, data: Any) -> Any:
        """`profile: [a, b]`: the first is the run's own profile, the rest `also`."""
        if not isinstance(data, dict) or not isinstance(data.get("profile"), list):
            return data
        names = data["profile"]
        if not 1 <= len(names) <= 4:
            raise ValueError(f"profile: a list of 1 to 4 load profiles, got {len(names)}")
        if "also" in data:
            raise ValueError("give further profiles either in the profile list or in also, "
                             "not both")
        return {**data, "profile": names[0], "also": names[1:]}

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
                # naming one mode replaces the built-in's mode; a replay replays every
                # request unless it says how many (num_prompts)
                if set(MODES) & fields.keys():
                    for mode_key in MODES:
                        base.pop(mode_key, None)
                    if {"trace", "from_suite"} & fields.keys():
                        base.pop("num_prompts", None)
                merged[name] = {**base, **fields}
            else:
                merged[name] = fields
        return {**data, "profiles": merged}

    _profile_names = field_validator("profiles")(classmethod(lambda cls, v: named_keys(v)))

    @model_validator(mode="after")
    def _known_profile(self) -> LoadConfig:
        for name in self.gated:
            if name not in self.profiles:
                raise ValueError(f"unknown load profile {name!r}; known: "
                                 f"{', '.join(sorted(self.profiles))}")
        if len(set(self.gated)) != len(self.gated):
            raise ValueError(f"a load profile is named twice in {self.gated}")
        return self

    @property
    def selected(self) -> LoadProfile:
        return self.profiles[self.profile]

    @property
    def gated(self) -> list[str]:
        """Every profile this run measures and gates, its own first."""
        return [self.profile, *self.also]

    @property
    def further(self) -> dict[str, LoadProfile]:
        """The profiles measured after the run's own, in order."""
        return {name: self.profiles[name] for name in self.also}

    def declared(self) -> list[str]:
        """The selected profile and every one the config itself sets: a built-in the config
        leaves untouched is sized for a GPU and is not this config's to fit."""
        untouched = {name for name, fields in BUILTIN_PROFILES.items()
                     if self.profiles.get(name) == LoadProfile.model_validate(fields)}
        return sorted(set(self.gated) | (set(self.profiles) - untouched))
