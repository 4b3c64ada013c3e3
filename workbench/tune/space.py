"""The space of integer weight-only recipes a tune searches (issue 47): the recipe values of
config/candidate.py crossed over the declared axes, each point an ordinary candidate.

Points are tried cheapest first: by the weight bytes each would store, estimated from the
model's config.json (its linear layers at the point's bits, a 16-bit scale per group, a
zero point per group where asymmetric; everything else at 16 bits), so that the first
point the policy promotes is the smallest. Points of equal size follow a stated prior
(GPTQ, then AWQ, then round-to-nearest), until a measured proxy replaces it (docs/tune.md).
A point the model's widths or this device's engine cannot take is left out, with the
reason, before anything is built.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from workbench.config.candidate import Candidate, ModuleOverride
from workbench.mechanisms.yaml_io import StrictModel
from workbench.quantize.formats import (
    dense_reason,
    format_of_candidate,
    group_size_problems,
    unsupported_reason,
)

__all__ = ["METHOD_PRIOR", "SpacePoint", "TuneSpace", "linear_shapes", "points",
           "weight_bytes"]

METHOD_PRIOR = ("gptq", "awq", "rtn")  # at equal size: the order tried (a stated prior)
SCALE_BITS = 16  # a group's scale, stored in the baseline's 16-bit dtype
Method = Literal["gptq", "awq", "rtn"]
DEFAULT_METHODS: tuple[Method, ...] = ("gptq", "awq")


def _no_overrides() -> list[list[ModuleOverride]]:
    return [[]]


class TuneSpace(StrictModel):
    """The axes of the space; every combination is a point."""

    methods: list[Method] = Field(default_factory=lambda: list(DEFAULT_METHODS), min_length=1)
    symmetric: list[bool] = Field(default_factory=lambda: [True, False], min_length=1)
    group_sizes: list[int] = Field(default_factory=lambda: [128, 64, 32], min_length=1)
    # each entry one value of the axis: a set of overrides (none: the recipe everywhere)
    overrides: list[list[ModuleOverride]] = Field(default_factory=_no_overrides, min_length=1)


@dataclass(frozen=True)
class SpacePoint:
    name: str
    candidate: Candidate
    weight_bytes: int  # estimated from config.json

    @property
    def label(self) -> str:
        c = self.candidate
        text = f"{c.resolved_method} {'sym' if c.resolved_symmetric else 'asym'} " \
               f"g{c.resolved_group_size}"
        return text + "".join(f", {o.bits}-bit: {' '.join(o.targets)}" for o in c.overrides)


def linear_shapes(config: dict) -> dict[str, tuple[int, int]]:
    """Each decoder linear layer's (in, out) width, by a representative module name."""
    text = config.get("text_config", config)
    hidden, inter = text["hidden_size"], text["intermediate_size"]
    heads = text["num_attention_heads"]
    head_dim = text.get("head_dim") or hidden // heads
    kv = text.get("num_key_value_heads", heads) * head_dim
    return {"self_attn.q_proj": (hidden, heads * head_dim), "self_attn.k_proj": (hidden, kv),
            "self_attn.v_proj": (hidden, kv), "self_attn.o_proj": (heads * head_dim, hidden),
            "mlp.gate_proj": (hidden, inter), "mlp.up_proj": (hidden, inter),
            "mlp.down_proj": (inter, hidden)}


def weight_bytes(cand: Candidate, config: dict) -> int:
    """The bytes the candidate's weights would take: each decoder linear of every block at
    its bits plus a scale (and a zero point where asymmetric) per group; everything else
    at 16 bits."""
    text = config.get("text_config", config)
    group = cand.resolved_group_size or 1
    total = 16 * text["vocab_size"] * text["hidden_size"]  # embeddings (a tied head: once)
    if not text.get("tie_word_embeddings", False):  # Llama's own default: a head of its own
        total *= 2
    for block in range(text["num_hidden_layers"]):
        for part, (width_in, width_out) in linear_shapes(config).items():
            bits = cand.module_bits(f"model.layers.{block}.{part}")
            per_weight = 16 if bits == 16 else bits + (SCALE_BITS + (
                0 if cand.resolved_symmetric else bits)) / group
            total += int(per_weight * width_in * width_out)
    return total // 8


def _candidate(base: Candidate, method: str, symmetric: bool, group: int,
               overrides: list[ModuleOverride]) -> Candidate:
    return Candidate(recipe=base.recipe, method=method,  # type: ignore[arg-type]
                     symmetric=symmetric, group_size=group, overrides=overrides,
                     ignore=base.ignore, kv_cache_dtype=base.kv_cache_dtype,
                     engine_args=base.engine_args)


def _name(base: str, method: str, symmetric: bool, group: int, index: int) -> str:
    return f"{base}-{method}-{'sym' if symmetric else 'asym'}-g{group}" + (
        f"-o{index}" if index else "")


def points(base_name: str, base: Candidate, space: TuneSpace, model_dir: Path,
           device: str) -> tuple[list[SpacePoint], list[tuple[str, str]]]:
    """Every point of the space, cheapest first, and each one left out with why."""
    config = json.loads((model_dir / "config.json").read_text())
    kept, left = [], []
    for (method, sym, group, (index, overrides)) in itertools.product(
            space.methods, space.symmetric, space.group_sizes, enumerate(space.overrides)):
        name = _name(base_name, method, sym, group, index)
        ragged = group_size_problems(model_dir, group)
        if ragged:
            left.append((name, f"group size {group} does not divide {'; '.join(ragged)}"))
            continue
        cand = _candidate(base, method, sym, group, overrides)
        fmt = format_of_candidate(cand)
        why = None if fmt is None or dense_reason(fmt, device) else \
            unsupported_reason(fmt, device)  # served dense where there is no int4 kernel
        if why:
            left.append((name, why))
            continue
        kept.append(SpacePoint(name, cand, weight_bytes(cand, config)))
    kept.sort(key=lambda p: (p.weight_bytes, METHOD_PRIOR.index(p.candidate.resolved_method
                                                                or "gptq")))
    return kept, left
