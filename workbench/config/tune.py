"""The `tune:` section of a run config: the space of integer weight-only recipes a tune
searches (issue 47). Each axis lists the values tried; every combination is a point, an
ordinary candidate built from the tuned candidate's own entry (tune/space.py). Without a
space, `tune` keeps the candidate's recipe and searches one axis: how many of its most
sensitive decoder blocks to leave in 16-bit (tune/schedule.py, docs/tune.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from workbench.config.candidate import ModuleOverride
from workbench.mechanisms.yaml_io import StrictModel

__all__ = ["DEFAULT_METHODS", "Method", "TuneConfig", "TuneSpace"]

Method = Literal["gptq", "awq", "rtn"]
DEFAULT_METHODS: tuple[Method, ...] = ("gptq", "awq")


def _no_overrides() -> list[list[ModuleOverride]]:
    return [[]]


def _distinct(values: list) -> list:
    if len(set(map(repr, values))) != len(values):
        raise ValueError(f"{values}: a value is listed twice")
    return values


class TuneSpace(StrictModel):
    """The axes of the space; every combination is a point. The defaults are the built-in
    int4 space: GPTQ and AWQ, symmetric and asymmetric, groups of 128, 64 and 32."""

    methods: list[Method] = Field(default_factory=lambda: list(DEFAULT_METHODS), min_length=1)
    symmetric: list[bool] = Field(default_factory=lambda: [True, False], min_length=1)
    group_sizes: list[int] = Field(default_factory=lambda: [128, 64, 32], min_length=1)
    # each entry one value of the axis: a set of overrides (none: the recipe everywhere)
    overrides: list[list[ModuleOverride]] = Field(default_factory=_no_overrides, min_length=1)
    keep: list[int] = Field(default_factory=lambda: [0], min_length=1, description=(
        "How many of the decoder blocks most sensitive to the candidate's grid each point "
        "leaves in 16-bit (0: none); a value above 0 measures the layer sensitivity first"))

    rank_equal_size: bool = Field(default=False, description=(
        "Before trying points of equal size, build each and try them by held-out "
        "perplexity, lowest first (docs/tune.md, 'Points of equal size'): worth it where "
        "a build is cheap beside a trial; off by default, since on a 2-core CPU an AWQ "
        "build takes longer than a stopped trial"))

    _unique = field_validator("methods", "symmetric", "group_sizes", "keep")(
        classmethod(lambda cls, v: _distinct(v)))

    @field_validator("group_sizes")
    @classmethod
    def _positive_groups(cls, v: list[int]) -> list[int]:
        if any(g < 1 for g in v):
            raise ValueError(f"{v}: a group size is a positive number of weights")
        return v

    @field_validator("keep")
    @classmethod
    def _blocks(cls, v: list[int]) -> list[int]:
        if any(k < 0 for k in v):
            raise ValueError(f"{v}: a number of blocks is 0 or more")
        return v


class TuneConfig(StrictModel):
    space: TuneSpace | None = Field(default=None, description=(
        "The recipes `tune` searches, cheapest first (tune/space.py); unset: the "
        "candidate's own recipe with its most sensitive blocks kept in 16-bit, one more at "
        "a time (docs/tune.md)"))
