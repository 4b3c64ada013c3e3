"""The run configuration's `judge` section (issue 49, step 3): an OpenAI-compatible model the
team trusts, asked whether the candidate's answer to each traffic request is as good as the
baseline's. Off unless declared; no judge model is shipped."""

from __future__ import annotations

from pydantic import Field

from workbench.config.endpoints import Server

__all__ = ["JudgeConfig"]


class JudgeConfig(Server):
    model: str = Field(min_length=1, description="The judge's model id on that server")
    rubric: str = Field(description="A text file (relative to the config) saying what a good "
                                    "answer is; the record keeps its SHA-256")
    both_orders: bool = Field(default=True, description="Ask with the answers in both orders "
                              "(as good only if both say so); false: one order, drawn per item")
    check_labels: bool = Field(default=True, description=(
        "Put the labelled pairs of eval_suites/health-labels (a healthy and a broken answer "
        "to one prompt) to the judge first, and report how often it prefers the healthy one"))
    max_tokens: int = Field(default=8, ge=1, le=256, description="Tokens of the judge's reply")
    concurrency: int = Field(default=4, ge=1, le=64)
    timeout_s: float = Field(default=120.0, gt=0)
