"""One load level, typed: its client-side figures, the engine's view of the same requests,
their agreement, the SLO judgement, the engine's telemetry and the over-saturation verdict
(results.py parses it; a LoadResult holds the levels of one run)."""

from __future__ import annotations

from dataclasses import dataclass, field

from typing_extensions import TypedDict

from workbench.loadtest.engine_metrics import ServerLevel
from workbench.loadtest.saturation import Saturation
from workbench.loadtest.telemetry import Telemetry

__all__ = ["Agreement", "BucketLatency", "LevelResult", "MeanAgreement", "SLOFigures"]


class SLOFigures(TypedDict, total=False):
    """slo_figures(): empty when the workload declares no SLO."""

    ttft_p99_ms: float
    tpot_p99_ms: float
    goodput_rps: float
    # output tokens per second of the requests that met the SLO: what a team pays for
    # (docs/rollout.md, "Cost"); absent in measurements made before it was recorded
    good_output_throughput: float
    attainment: float
    meets_slo: bool


class BucketLatency(TypedDict):
    """The completed requests of one prompt-length bucket at a level."""

    requests: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float


class MeanAgreement(TypedDict):
    client_mean_ms: float
    server_mean_ms: float
    diff_ms: float
    within: bool


class Agreement(TypedDict, total=False):
    """agreement(): client and server means of each latency on the same requests."""

    tolerance: float
    floor_ms: float
    ttft: MeanAgreement
    tpot: MeanAgreement
    e2el: MeanAgreement
    server_requests: float
    client_requests: int


@dataclass(frozen=True)
class LevelResult:
    concurrency: int | None  # requests in flight at most (None: unbounded arrival-rate level)
    completed: int
    failed: int
    duration_s: float
    request_throughput: float  # requests/s
    output_throughput: float  # output tokens/s
    ttft_ms: dict[str, float]  # "p50" / "p95" / "p99" / "max" / "mean"
    tpot_ms: dict[str, float]
    itl_ms: dict[str, float]
    e2el_ms: dict[str, float]
    raw_file: str
    server: ServerLevel = field(default_factory=lambda: ServerLevel())
    slo: SLOFigures = field(default_factory=lambda: SLOFigures())
    label: str = ""  # "c8" (concurrency), "r2" (arrivals/s), "x1" (trace replay speed)
    request_rate: float | None = None  # arrivals per second, open-loop levels
    skipped: int = 0  # requests not sent: past the level's max_duration_s
    agreement: Agreement = field(default_factory=lambda: Agreement())
    # the engine's state over the level (telemetry.py) and whether it outran the engine
    telemetry: Telemetry = field(default_factory=lambda: Telemetry())
    saturation: Saturation = field(default_factory=lambda: Saturation())
    # prompt tokens/s (0.0 in measurements made before it was recorded); with the output
    # tokens, what the engine processed
    input_throughput: float = 0.0
    # latency by prompt length (results.PROMPT_BUCKETS): a long prompt's first token waits
    # for its own prefill, which one percentile over every length hides
    by_prompt_length: dict[str, BucketLatency] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.label or f"c{self.concurrency}"

    @property
    def error_rate(self) -> float:
        sent = self.completed + self.failed
        return round(self.failed / sent, 4) if sent else 0.0
