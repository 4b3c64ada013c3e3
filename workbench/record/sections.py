"""The decision record's sections as types.

A record is plain JSON that CI scripts and the Markdown renderer read as dicts. Its
sections are the JSON form of the stages' typed results (a measurement's load and
headroom, the fidelity comparison, the paired comparison per slice, the gate outcomes) or
small shapes built here. Naming those types on the record's fields lets pydantic write the
published schema all the way down (workbench/record/decision-v*.schema.json), so `gate`
and any consumer can check a stored record below its top level, not only its keys.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import GetPydanticSchema
from typing_extensions import NotRequired, TypedDict

from workbench.config.rollout import RolloutConfig
from workbench.gate.paired import SliceComparison
from workbench.gate.verdict import Flips, PolicySection
from workbench.loadtest.headroom import Headroom
from workbench.loadtest.results import LoadResult
from workbench.measure.judge import JudgeRun
from workbench.quantize.formats import ServedFormat
from workbench.suites.scorers.fidelity import FidelityResult

__all__ = ["CHALLENGER", "CHAMPION", "PREVIOUS_CHAMPION", "AcceleratorJson", "BatchingJson",
           "CostSection", "DeviceSection", "EarlyStopJson", "EndpointSection", "EngineSection",
           "FidelityJson", "GpuEntry", "GpusSection", "HeadroomJson", "JudgeJson",
           "JudgeLabelsJson", "LoadJson", "MlflowSection", "ModelSection", "PolicySection",
           "QuantizationSection", "Registry", "ReplicaShape", "RolloutField", "RolloutSection",
           "ServedDenseJson", "SuitePair", "json_form", "judge_json"]


def json_form(kind: type) -> Any:
    """A dict holding `dataclasses.asdict()` of kind: described in the schema by kind's
    own fields, so the schema cannot drift from the type that writes the section."""
    return Annotated[dict, GetPydanticSchema(lambda _source, handler: handler(kind))]


LoadJson = json_form(LoadResult)
HeadroomJson = json_form(Headroom)
FidelityJson = json_form(FidelityResult)
ServedFormatJson: Any = json_form(ServedFormat)
RolloutDeclaredJson: Any = json_form(RolloutConfig)


class HubSection(TypedDict):
    repo_id: str
    revision: str  # as the config asked: a branch, tag or commit
    commit: str  # what it resolved to


class ModelSection(TypedDict):
    name: str
    path: str
    digest: str  # sha256 over the model folder's files
    candidate_path: str  # "" when the candidate is served at an endpoint
    hub: NotRequired[HubSection]  # a model named by its hub repo id


class EndpointSection(TypedDict):
    """A side measured at an endpoint the workbench did not start."""

    url: str
    model: str  # the served model id
    version: str  # vLLM's /version
    auth: str  # "none", or which environment variable held the bearer token
    devices: int  # as declared in the config (for cost), not measured
    unmeasured: list[str]  # figures an endpoint cannot give (no process on this machine)


class GpuEntry(TypedDict):
    """One visible GPU, as mechanisms/gpu.py's Gpu reads it from NVML."""

    index: int  # CUDA's index in the engine's process
    uuid: str  # "GPU-…", or "MIG-…" for a MIG device
    name: str  # e.g. "NVIDIA H200"; a MIG device's ends with its profile
    memory_total_bytes: int
    compute_capability: str  # "9.0"
    mig_profile: str | None  # "3g.71gb"; None: a whole GPU


class GpusSection(TypedDict):
    gpus: list[GpuEntry]
    driver_version: str
    cuda_driver_version: str  # the newest CUDA the driver supports
    cuda_order_ambiguous: bool  # CUDA's device order may differ from NVML's


class DeviceSection(TypedDict):
    kind: str  # cpu | cuda
    cpu: str
    cpu_count: int | None
    vector_isa: NotRequired[str]  # avx512 | avx2 | other: what vLLM-CPU's kernels can use
    platform: str
    python: str
    gpus: GpusSection | None  # the GPUs the engine could use; None on a CPU
    suite_in_flight: int  # requests each suite kept in flight (serve/device.py)
    batch_invariant: str  # whether the suites ran on vLLM's batch-invariant kernels, and why
    serve_dtype: str  # the engine's --dtype, `auto` resolved for this device (both sides')
    native_bf16: bool  # whether the CPU multiplies bf16 in hardware (mechanisms/host.py)
    # 16, on a CPU: the candidate's suites' engine session, `every-core` or `vllm` (one
    # core left to vLLM's engine process); the load test always runs on vLLM's
    suite_binding: NotRequired[str]


class StandInJson(TypedDict):
    """Records 11-13: a candidate evaluated through another format (int8 W8A8 for int4 on
    an AVX2 CPU), where the device had no kernel for its own; since 14 such a candidate
    is served dense instead (ServedDenseJson)."""

    candidate: str
    requested: str  # the recipe the config names
    requested_format: str
    evaluated: str  # the recipe built and served in its place
    evaluated_format: str
    why: str


class ServedDenseJson(TypedDict):
    """14: a candidate served as its weights dequantised, where this device has no kernel
    for its format (quantize/formats.py, DenseServing): its quality figures are its own,
    its speed and memory are not, and their gates are not judged (gate/served.py)."""

    candidate: str
    format: str  # the candidate's own format (W4A16)
    why: str  # why this device has no kernel for it
    checkpoint: str  # the dense checkpoint the engine served (quantize/dense.py)
    not_judged: str  # the reason each speed and memory gate gives
    # the decision on every gate this device can judge (speed and memory left out)
    judged_here: Literal["promote", "reject", "inconclusive"]


class JudgeJson(TypedDict):
    """15: the judge model that read the traffic suites' answers (measure/judge.py): who,
    by which rubric (its SHA-256, never its text), and what it said in all."""

    model: str
    url: str
    rubric_sha256: str
    both_orders: bool
    asked: int
    as_good: int
    no_verdict: int  # replies it could not read: counted against the candidate
    # the labelled pairs it was checked on first (a healthy and a broken answer to one
    # prompt, eval_suites/health-labels); absent where judge.check_labels was off
    labels: NotRequired[JudgeLabelsJson]


class JudgeLabelsJson(TypedDict):
    asked: int
    healthy_preferred: int  # in every order it was shown
    no_verdict: int


def judge_json(run: JudgeRun) -> JudgeJson:
    """The record's judge section from the judge stage's result."""
    section = JudgeJson(model=run.model, url=run.url, rubric_sha256=run.rubric_sha256,
                        both_orders=run.both_orders, asked=run.asked, as_good=run.as_good,
                        no_verdict=run.no_verdict)
    if run.labels is not None:
        section["labels"] = JudgeLabelsJson(asked=run.labels.asked,
                                            healthy_preferred=run.labels.healthy_preferred,
                                            no_verdict=run.labels.no_verdict)
    return section


class SliceScore(TypedDict):
    n: int
    accuracy: NotRequired[float]  # scored suites
    perplexity: NotRequired[float]  # fidelity suites (log-probabilities of held-out text)


class HealthSummary(TypedDict):
    n: int
    healthy: float  # share of responses that are not degenerate
    degenerate: dict[str, int]  # why -> how many (looping, empty, fragments, language)


class SuiteSummary(TypedDict):
    n: int
    kind: str
    accuracy: float
    slices: dict[str, SliceScore]
    metrics: dict[str, float]
    digest: str
    health: NotRequired[HealthSummary]  # suites that generate


class SuitePair(TypedDict):
    baseline: SuiteSummary
    candidate: SuiteSummary
    flips: NotRequired[Flips]  # not for fidelity suites
    comparison: NotRequired[dict[str, SliceComparison]]  # slice ("(all)") -> comparison
    health_comparison: NotRequired[dict[str, SliceComparison]]


class ColdStart(TypedDict):
    healthy_s: float
    first_token_s: float


class BatchingJson(TypedDict):
    """How the engine batched, a condition of every latency figure (issue 38): its batch
    limits (configured, or vLLM's defaults for the device: serve/device.py) and the
    scheduling flags its log stated; None where the log did not say."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool | None
    prefix_caching: bool | None


class EarlyStopJson(TypedDict):
    """Why the candidate was measured no further (gate/early.py, measure/watch.py)."""

    after: str  # the suite run whose result decided it
    gates: list[str]  # the gates that had failed past doubt
    evidence: list[str]  # each gate's one-line evidence, in the same order
    level: str  # the level they failed at: the look's alpha over every planned test
    not_measured: list[str]  # the suite runs never started
    load_not_measured: bool  # the candidate's load test did not run (nor a cached baseline's)


class EngineSection(TypedDict):
    version: str
    config: dict[str, Any]  # config.EngineConfig as written in the config
    baseline_command: list[str]
    candidate_command: list[str]
    baseline_cache: dict[str, str]  # vllm:cache_config_info labels
    candidate_cache: dict[str, str]
    kernels: dict[str, dict[str, str]]  # role -> layer kind -> kernel, from the engine log
    cold_start: dict[str, ColdStart]
    batching: NotRequired[dict[str, BatchingJson]]  # 12: role -> its batch (not at endpoints)


class CalibrationUsed(TypedDict, total=False):
    files: list[str]
    num_samples: int
    seq_len: int
    seed: int
    heldout: list[str]
    heldout_samples: int
    samples_digest: str


class HeldoutFidelity(TypedDict, total=False):
    """Perplexity on held-out text before and after quantising (the quantiser measures it)."""

    heldout_samples: int
    heldout_digest: str
    seq_len: int
    tokens: int
    baseline_perplexity: float
    candidate_perplexity: float
    perplexity_ratio: float
    baseline_cached: bool
    seconds: float
    device: str  # where both perplexities were computed (the quantiser's device)
    method: str


class AcceleratorJson(TypedDict):
    """The GPU calibration ran on, as the quantiser's torch named it."""

    name: str
    capability: str  # "9.0"
    index: int
    device_count: int
    cuda: str | None  # torch's CUDA version


class OverrideJson(TypedDict):
    targets: list[str]  # module names or re: patterns
    bits: int  # 8, or 16: left unquantised


class RecipeValuesJson(TypedDict):
    """An integer weight-only recipe as values (config/candidate.py)."""

    method: str  # gptq | awq | rtn
    bits: int
    symmetric: bool
    group_size: int
    actorder: str | None  # gptq's activation order; None for awq and rtn
    overrides: list[OverrideJson]


class QuantizationSection(TypedDict, total=False):
    """The artifact's manifest (subprocesses/quantize_worker.py writes it) and how it is served."""

    candidate: str
    source: str  # built | cache | checkpoint | baseline weights
    recipe: dict[str, Any]  # the candidate's entry in the config (config.Candidate)
    format: ServedFormatJson
    key: str
    model_dir: str
    model_digest: str
    calibration: CalibrationUsed
    fidelity: HeldoutFidelity | None
    wall_time_s: float
    oneshot_s: float
    device: str  # where calibration ran, read from the calibrated model
    compute_dtype: str  # what the quantiser computed in there (bf16, or float32 on a CPU
    stored_dtype: str   # without native bf16); what the checkpoint stores, as the baseline
    accelerator: AcceleratorJson | None  # None: on the CPU
    peak_rss_mb: float | None
    peak_gpu_mb: float | None
    scheme_summary: dict[str, Any]  # llm-compressor's per-layer schemes, as it reports them
    library_versions: dict[str, str]
    size_bytes: int
    baseline_size_bytes: int
    compression_ratio: float
    created_at: str
    # 14: an integer weight-only recipe's every value, defaults filled in
    recipe_values: RecipeValuesJson
    served_format: ServedFormatJson
    # what the engine really runs where that is not the format's label (an FP8 W8A8
    # checkpoint on an A100 runs weight-only through Marlin: quantize/gpu_rules.py)
    runs_as: str | None
    serve_args: list[str]
    path: str


class CapacityCost(TypedDict):
    """What serving costs at the capacity the search found (the heaviest level held)."""

    knob: str
    held: float
    usd_per_million_output_tokens: float


class CostSection(TypedDict):
    price_per_hour: float  # for the whole engine: price_per_device_hour x devices
    devices: NotRequired[int]
    price_per_device_hour: NotRequired[float]
    level: str | None  # the heaviest level that met the SLO; None: none did
    concurrency: int | None
    usd_per_million_output_tokens: NotRequired[float]
    usd_per_good_request: NotRequired[float | None]
    # 12: per million output tokens of requests that met the SLO (None: none did)
    usd_per_million_accepted_tokens: NotRequired[float | None]
    price_source: str
    at_capacity: NotRequired[CapacityCost]


# The registry's aliases (docs/rollout.md): the promoted version, the one it replaced (what a
# rollback returns to), and the last candidate that was not promoted.
CHAMPION = "champion"
PREVIOUS_CHAMPION = "previous-champion"
CHALLENGER = "challenger"


class Registry(TypedDict):
    registered_model: str
    version: str
    alias: str
    # 12: the version that held `champion` when this one was registered ("" when none): after
    # a promotion the rollback target, kept under the alias `previous-champion`; after any
    # other outcome the champion that stays (docs/rollout.md)
    champion_before: NotRequired[str]


class MlflowSection(TypedDict, total=False):
    tracking_uri: str
    run_id: str
    experiment_id: str
    parent_run_id: str  # the sweep's run, when the evaluation is part of one
    ui: str  # the UI page of the experiment's runs (a URL, or a page for `mlflow ui`)
    status: str  # complete | incomplete
    error: str
    not_logged: list[str]
    log_later: str
    logged_later: str
    registry: Registry


class RolloutField(TypedDict):
    text: str  # what a person reads
    source: str  # measured | config | declared | not declared


class ReplicaShape(TypedDict):
    """One model's fleet for the declared peak, from its capacity at the SLO."""

    devices_per_replica: int
    capacity_rps: float | None  # requests/s one replica served within the SLO (pessimistic)
    replicas: int | None  # None: no peak declared, or no capacity measured
    fleet_price_per_hour: float | None
    why: str  # how the figure was reached, or why there is none


class RolloutSection(TypedDict):
    fields: dict[str, RolloutField]  # FIELDS, in that order
    replicas: dict[str, ReplicaShape]  # role -> its fleet
    declared: RolloutDeclaredJson  # the config's `rollout:` as validated (`gate` rebuilds from it)
