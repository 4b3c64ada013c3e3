"""The space of integer weight-only recipes a tune searches (issue 47): the recipe values of
config/candidate.py crossed over the declared axes, each point an ordinary candidate.

Points are tried cheapest first: by the weight bytes each would store, estimated from the
model's config.json (its linear layers at the point's bits, a 16-bit scale per group, a
zero point per group where asymmetric; everything else at 16 bits), so that the first
point the policy promotes is the smallest. Points of equal size follow a stated prior
(GPTQ, then AWQ, then round-to-nearest) here; the walk reorders them by their builds'
held-out perplexity as it reaches them (walk.py, docs/tune.md).
A point the model's widths or this device's engine cannot take is left out, with the
reason, before anything is built.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from workbench.config.candidate import Candidate, ModuleOverride
from workbench.config.tune import TuneSpace
from workbench.quantize.checks import gpu_capability
from workbench.quantize.formats import (
    dense_reason,
    format_of_candidate,
    group_size_problems,
    unsupported_reason,
)
from workbench.quantize.sensitivity import keep_blocks_ignore

__all__ = ["METHOD_PRIOR", "SpacePoint", "TuneSpace", "linear_shapes", "points",
           "weight_bytes"]

METHOD_PRIOR = ("gptq", "awq", "rtn")  # at equal size: the order tried (a stated prior)
SCALE_BITS = 16  # a group's scale, stored in the baseline's 16-bit dtype


@dataclass(frozen=True)
class SpacePoint:
    name: str
    candidate: Candidate
    weight_bytes: int  # estimated from config.json
    kept: tuple[int, ...] = ()  # decoder blocks left in 16-bit, the most sensitive first

    @property
    def label(self) -> str:
        c = self.candidate
        text = f"{c.resolved_method} {'sym' if c.resolved_symmetric else 'asym'} " \
               f"g{c.resolved_group_size}"
        text += "".join(f", {o.bits}-bit: {' '.join(o.targets)}" for o in c.overrides)
        return text + (f", blocks {sorted(self.kept)} in 16-bit" if self.kept else "")

    def values(self) -> dict:
        """The point's recipe values, as tune.json states them."""
        c = self.candidate
        return {"method": c.resolved_method, "symmetric": c.resolved_symmetric,
                "group_size": c.resolved_group_size,
                "overrides": [o.model_dump() for o in c.overrides], "kept": list(self.kept)}


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


def weight_bytes(cand: Candidate, config: dict, kept: tuple[int, ...] = ()) -> int:
    """The bytes the candidate's weights would take: each decoder linear of every block at
    its bits plus a scale (and a zero point where asymmetric) per group; the kept blocks
    and everything else at 16 bits."""
    text = config.get("text_config", config)
    group = cand.resolved_group_size or 1
    total = 16 * text["vocab_size"] * text["hidden_size"]  # embeddings (a tied head: once)
    if not text.get("tie_word_embeddings", False):  # Llama's own default: a head of its own
        total *= 2
    for block in range(text["num_hidden_layers"]):
        for part, (width_in, width_out) in linear_shapes(config).items():
            bits = 16 if block in kept else cand.module_bits(f"model.layers.{block}.{part}")
            per_weight = 16 if bits == 16 else bits + (SCALE_BITS + (
                0 if cand.resolved_symmetric else bits)) / group
            total += int(per_weight * width_in * width_out)
    return total // 8


def _candidate(base: Candidate, method: str, symmetric: bool, group: int,
               overrides: list[ModuleOverride], kept: tuple[int, ...]) -> Candidate:
    """The point as a candidate: the base's own entry with the axes' values (its GPTQ
    activation order kept where the point is GPTQ too)."""
    entry = keep_blocks_ignore(list(kept))  # llm-compressor leaves these blocks unquantised
    cand = Candidate(recipe=base.recipe, method=method,  # type: ignore[arg-type]
                     symmetric=symmetric, group_size=group, overrides=overrides,
                     actorder=base.actorder if method == "gptq" else None,
                     ignore=[*base.ignore, *([entry] if entry else [])],
                     kv_cache_dtype=base.kv_cache_dtype, engine_args=base.engine_args)
    # the base itself, where the point builds the same: its name and entry, so the build
    # and measurement an evaluate or a sweep made of it are found again (as keep-k's k = 0)
    return base if cand.recipe_params() == base.recipe_params() else cand


def _name(base: str, method: str, symmetric: bool, group: int, index: int, keep: int) -> str:
    return f"{base}-{method}-{'sym' if symmetric else 'asym'}-g{group}" + (
        f"-o{index}" if index else "") + (f"-keep{keep}" if keep else "")


def _left_out(model_dir: Path, cand: Candidate, device: str) -> str | None:
    """Why this device or the model's widths cannot take the point (None: they can)."""
    group = cand.resolved_group_size or 0
    ragged = group_size_problems(model_dir, group)
    if ragged:
        return f"group size {group} does not divide {'; '.join(ragged)}"
    fmt = format_of_candidate(cand)
    if fmt is None or dense_reason(fmt, device):
        return None  # served dense where there is no int4 kernel
    return unsupported_reason(fmt, device, capability=gpu_capability(device))


def points(base_name: str, base: Candidate, space: TuneSpace, model_dir: Path,
           device: str, ranked: list[int] | None = None
           ) -> tuple[list[SpacePoint], list[tuple[str, str]]]:
    """Every point of the space, cheapest first, and each one left out with why. `ranked`:
    the decoder blocks, the most sensitive first (needed where the keep axis is above 0)."""
    config = json.loads((model_dir / "config.json").read_text())
    ranked = ranked or []
    kept, left = [], []
    for (method, sym, group, (index, overrides), keep) in itertools.product(
            space.methods, space.symmetric, space.group_sizes, enumerate(space.overrides),
            space.keep):
        name = _name(base_name, method, sym, group, index, keep)
        if keep > len(ranked):
            left.append((name, f"keep {keep}: the sensitivity ranking has {len(ranked)} "
                               "blocks"))
            continue
        blocks = tuple(ranked[:keep])
        try:
            cand = _candidate(base, method, sym, group, overrides, blocks)
        except ValidationError as err:  # a combination a candidate refuses (candidate.py)
            left.append((name, err.errors()[0]["msg"].removeprefix("Value error, ")))
            continue
        name = base_name if cand is base else name
        why = _left_out(model_dir, cand, device)
        if why:
            left.append((name, why))
            continue
        kept.append(SpacePoint(name, cand, weight_bytes(cand, config, blocks), blocks))
    kept.sort(key=lambda p: (p.weight_bytes, METHOD_PRIOR.index(p.candidate.resolved_method
                                                                or "gptq")))
    return kept, left
