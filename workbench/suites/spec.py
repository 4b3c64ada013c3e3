"""A suite's YAML spec (suite.yaml): its kind, how its items are scored, its sizes.

eval_suites/README.md describes the format; definition.py loads a suite folder with it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from workbench.mechanisms.files import name_problem

__all__ = ["EXPECTATIONS", "GENERATING", "KIND_SCORINGS", "SUITE_KINDS", "SampleSizes",
           "SuiteSpec"]

SUITE_KINDS = ("quality", "fidelity", "safety", "structured", "traffic")
# Which scorings each kind may use: a safety suite is scored only by refusal detection,
# a structured one only against its schema, fidelity only by log-probabilities.
KIND_SCORINGS = {
    "quality": ("numeric", "exact", "choice", "code", "instructions", "lm-eval"),
    "fidelity": ("logprobs",),
    "safety": ("refusal",),
    "structured": ("json",),
    # a team's own requests, with no reference: each answer held against the baseline's
    # (suites/traffic.py reads them, gate/traffic.py pairs them)
    "traffic": ("agreement",),
}
# Scorings whose items are generated text: each carries a generation-health check.
GENERATING = ("numeric", "exact", "code", "refusal", "json", "instructions", "agreement")
EXPECTATIONS = ("refuse", "comply")


class SampleSizes(BaseModel):
    model_config = ConfigDict(extra="forbid")
    smoke: int | None = Field(default=None, gt=0, description="Items in the smoke profile")
    full: int | None = Field(default=None, gt=0, description="Items in the full profile (all)")


class SuiteSpec(BaseModel):
    """The suite's YAML file."""

    model_config = ConfigDict(extra="forbid")
    name: str
    version: str
    kind: Literal["quality", "fidelity", "safety", "structured", "traffic"]
    description: str = ""
    data: str = "items.jsonl"
    system_prompt: str | None = None
    prompt_template: str = Field(default="",
                                 description="Python format string over the item's fields "
                                             "(not used by lm-eval suites)")
    scoring: Literal["numeric", "exact", "choice", "code", "logprobs", "refusal", "json",
                     "instructions", "lm-eval", "agreement"] = "numeric"
    task: str | None = Field(default=None,
                             description="lm-eval: the task YAML in the suite folder; its "
                                         "local JSONL data holds the items (each with an id)")
    answer_field: str = "answer"
    choices_field: str = Field(
        default="choices", description="choice: the item field listing each continuation "
                                       "scored after the prompt; the answer is its index")
    choice_normalise: Literal["none", "characters"] = Field(
        default="none", description="choice: 'characters' picks the choice of highest "
        "log-likelihood per character (lm-eval's acc_norm), for answer-text continuations "
        "whose lengths differ; 'none' the highest sum (letters, yes/no)")
    max_tokens: int = Field(default=32, gt=0, description="Tokens per answer (agreement: "
                            "for a request that names no max_tokens of its own)")
    check_field: str = Field(
        default="check", description="code: the item field holding the test program run "
                                     "after the prompt and the completion; instructions: the "
                                     "field listing the instructions to check")
    schema_field: str = Field(
        default="schema", description="json: the item field holding the JSON Schema the "
                                      "response must satisfy")
    decoding: list[Literal["unguided", "guided"]] = Field(
        default=["unguided", "guided"], min_length=1,
        description="json: run free generation, the engine's schema-guided decoding, or both "
                    "(each is its own result: <name> and <name>-guided)")
    stop: list[str] = Field(default_factory=list, max_length=4,
                            description="code: stop sequences for the raw completion (the "
                                        "OpenAI API, and vLLM's, take at most 4)")
    timeout_s: float = Field(default=10.0, gt=0, description="code: time limit per program")
    top_k: int = Field(default=20, ge=1, le=20,
                       description="fidelity: prompt log-probabilities kept per position "
                                   "(vLLM allows at most 20 by default)")
    max_prompt_tokens: int = Field(default=256, ge=8,
                                   description="fidelity: texts are cut to this many tokens")
    agreement_prompt_tokens: int = Field(
        default=64, ge=1, description="fidelity: each text's first tokens, after which both "
                                      "models continue greedily (generation agreement)")
    agreement_tokens: int = Field(
        default=32, ge=0, le=512, description="fidelity: greedy tokens compared with the "
                                              "baseline's, item by item (0: no agreement check)")
    sample: SampleSizes = SampleSizes()
    store_responses: bool = Field(default=True, description=(
        "false: the answers stay in the run folder and the result cache on this machine; "
        "what is logged to MLflow holds each answer's SHA-256 and length instead "
        "(docs/traffic.md, 'Privacy')"))

    @field_validator("name", "data", "task")
    @classmethod
    def _plain_name(cls, v: str | None) -> str | None:
        """The name becomes result file names; data and task are files in the suite's own
        folder: neither may act as a path."""
        problem = name_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        return v

    def model_post_init(self, _ctx: object) -> None:
        allowed = KIND_SCORINGS[self.kind]
        if self.scoring not in allowed:
            raise ValueError(f"kind {self.kind!r} is scored by {', '.join(allowed)}, "
                             f"not {self.scoring!r}")
        if self.scoring in ("choice", "code") and self.system_prompt:
            raise ValueError(f"scoring '{self.scoring}' continues raw text: no system_prompt")
        if (self.scoring == "lm-eval") != (self.task is not None):
            raise ValueError("scoring 'lm-eval' needs 'task' (the lm-eval task YAML), and "
                             "'task' is only for it")
        if self.scoring not in ("lm-eval", "agreement") and not self.prompt_template:
            raise ValueError("prompt_template is required (a format string over item fields)")

    @property
    def needs_answer(self) -> bool:
        return self.scoring not in ("logprobs", "code", "instructions", "lm-eval",
                                    "agreement")

    def run_names(self) -> list[str]:
        return [name for name, _ in self.runs()]

    def runs(self) -> list[tuple[str, bool]]:
        """(result name, guided) for each way the suite is run: json suites may run twice."""
        if self.scoring != "json":
            return [(self.name, False)]
        return [(self.name if mode == "unguided" else f"{self.name}-guided", mode == "guided")
                for mode in self.decoding]
