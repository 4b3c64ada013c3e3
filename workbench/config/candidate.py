"""A candidate as the config states it: a built-in recipe, a recipe file or a ready
checkpoint, and how the engine serves it. The integer weight-only recipes (w4a16, w8a16)
are points of a space of values (method, symmetric, group size, activation order, per-module
overrides), their presets its defaults (docs/candidates.md, "Recipes as values").
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from workbench.mechanisms.yaml_io import StrictModel

__all__ = ["DEFAULT_GROUP_SIZE", "GROUPED_RECIPES", "KV_CACHE_DTYPES", "RECIPES",
           "WEIGHT_VALUES", "Candidate", "ModuleOverride", "matches"]

# Built-in quantisation recipes (subprocesses/quantize_worker.py builds them). "none" serves
# the baseline's own weights with the candidate's engine arguments (an FP8 KV cache chosen at
# serve time, or an A/A check).
RECIPES = ("w4a16", "w8a16", "w8a8-int8", "fp8-dynamic", "kv-fp8", "fp8-dynamic+kv-fp8", "none")
GROUPED_RECIPES = ("w4a16", "w8a16")
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
DEFAULT_GROUP_SIZE = 128
# the values an integer weight-only recipe takes beyond its group size
WEIGHT_VALUES = ("method", "symmetric", "actorder", "overrides")


class ModuleOverride(StrictModel):
    """Modules whose weights differ from the recipe's: 8-bit integers (group-wise, as the
    rest), or left in 16-bit. A target is a module name or a `re:` pattern, as
    llm-compressor matches them (`re:.*down_proj`)."""

    targets: list[str] = Field(min_length=1)
    bits: Literal[8, 16]

    @field_validator("targets")
    @classmethod
    def _names_or_patterns(cls, v: list[str]) -> list[str]:
        if any(not t.strip() or t.strip() == "re:" for t in v):
            raise ValueError("a target is a module name or a re: pattern, not blank")
        for t in v:
            if not t.startswith("re:") and t[:1].isupper():  # Linear, LlamaMLP, ...
                raise ValueError(f"{t!r} looks like a class name, which would take over "
                                 "every layer of that class; name modules or use re: "
                                 "patterns")
            if t.startswith("re:"):
                try:
                    re.compile(t[3:])
                except re.error as err:
                    raise ValueError(f"{t!r} is not a regular expression ({err})") from None
        return v


def matches(target: str, name: str) -> bool:
    """compressed-tensors' rule: a `re:` pattern matched from the start of the module name
    (not the whole of it), anything else the exact name."""
    return bool(re.match(target[3:], name)) if target.startswith("re:") else target == name


# vLLM loads these shards as one fused layer, which must have one scheme
# (compressed_tensors.py: "Found different quantization schemes for the shards")
FUSED = (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
         ("mlp.gate_proj", "mlp.up_proj"))
BLOCKS_CHECKED = 128  # block indices a pattern is tried on for the fused-shard check


class Candidate(StrictModel):
    """A named candidate: a built-in recipe, an llm-compressor recipe file, or a ready
    checkpoint folder; plus how the engine serves it."""

    recipe: Literal["w4a16", "w8a16", "w8a8-int8", "fp8-dynamic", "kv-fp8",
                    "fp8-dynamic+kv-fp8", "none"] | None = None
    # integer weight-only recipes (w4a16, w8a16) as values: the presets are their defaults
    method: Literal["gptq", "awq", "rtn"] | None = Field(default=None, description=(
        "How the weights are rounded (w4a16, w8a16): gptq (default), awq (activation-aware "
        "scales, then round-to-nearest), rtn (round-to-nearest, no calibration data)"))
    symmetric: bool | None = Field(default=None, description=(
        "Symmetric integer weights (w4a16, w8a16; default true, false for awq): false adds "
        "a zero point per group"))
    actorder: Literal["static", "group", "weight"] | None = Field(default=None, description=(
        "GPTQ's activation ordering (gptq only; default: GPTQ's own, static; 'group' is not "
        "loaded by vLLM 0.32)"))
    overrides: list[ModuleOverride] = Field(default_factory=list, description=(
        "Modules given other weights than the rest: 8-bit, or left in 16-bit"))
    recipe_file: str | None = Field(
        default=None, description="An llm-compressor recipe YAML, passed through unchanged")
    checkpoint: str | None = Field(default=None, description="A ready quantised model folder")
    group_size: int | None = Field(
        default=None, gt=0, description=f"Weight group size (w4a16, w8a16; default "
                                        f"{DEFAULT_GROUP_SIZE})")
    smoothing_strength: float | None = Field(default=None, gt=0, lt=1, description=(
        "SmoothQuant migration strength (w8a8-int8; default 0.8)"))
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
        self._check_weight_values()

    def _check_weight_values(self) -> None:
        given = [k for k in WEIGHT_VALUES if getattr(self, k) not in (None, [])]
        if given and self.recipe not in GROUPED_RECIPES:
            raise ValueError(f"'{given[0]}' applies only to recipes {', '.join(GROUPED_RECIPES)}")
        if self.actorder is not None and self.resolved_method != "gptq":
            raise ValueError(f"'actorder' applies only to method gptq, not "
                             f"{self.resolved_method}")
        if self.actorder == "group":  # vLLM's compressed_tensors.py refuses to load it
            raise ValueError("actorder 'group' is not loaded by vLLM 0.32 (compressed-tensors "
                             "group activation ordering is no longer supported there); use "
                             "'static' or 'weight'")
        if self.recipe == "w8a16" and any(o.bits == 8 for o in self.overrides):
            raise ValueError("an 8-bit override in recipe w8a16 changes nothing: every "
                             "module is 8-bit already")
        split = self._split_fused_layer()
        if split:
            raise ValueError(f"{' and '.join(split)} are loaded by vLLM as one fused layer "
                             "and must share one scheme; override all of them or none")

    def module_bits(self, name: str) -> int:
        """The bits an integer weight-only recipe stores module `name` at: 16 where an
        `ignore` entry or a 16-bit override names it (whatever their order), 8 where an
        8-bit override does, else the recipe's."""
        sixteen = [*self.ignore, *(t for o in self.overrides if o.bits == 16 for t in o.targets)]
        if any(matches(t, name) for t in sixteen):
            return 16
        eight = [t for o in self.overrides if o.bits == 8 for t in o.targets]
        return 8 if any(matches(t, name) for t in eight) else (
            4 if self.recipe == "w4a16" else 8)

    def _split_fused_layer(self) -> list[str]:
        """The shards of a fused layer the overrides give different bits, if any."""
        if not self.overrides:
            return []
        for block in range(BLOCKS_CHECKED):
            for shards in FUSED:
                names = [f"model.layers.{block}.{s}" for s in shards]
                if len({self.module_bits(n) for n in names}) > 1:
                    return names
        return []

    @property
    def resolved_method(self) -> str | None:
        return (self.method or "gptq") if self.recipe in GROUPED_RECIPES else None

    @property
    def resolved_symmetric(self) -> bool | None:
        if self.recipe not in GROUPED_RECIPES:
            return None
        return self.symmetric if self.symmetric is not None else self.resolved_method != "awq"

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
        return {**params, **self._weight_values()}

    def weight_values(self) -> dict[str, Any]:
        """Every value of an integer weight-only recipe, defaults filled in (the record's
        statement of what was built); {} for any other candidate."""
        if self.recipe not in GROUPED_RECIPES:
            return {}
        return {"method": self.resolved_method, "bits": 4 if self.recipe == "w4a16" else 8,
                "symmetric": self.resolved_symmetric, "group_size": self.resolved_group_size,
                "actorder": self.actorder or ("static" if self.resolved_method == "gptq"
                                              else None),
                "overrides": [o.model_dump() for o in self.overrides]}

    def _weight_values(self) -> dict[str, Any]:
        """The recipe's values where they differ from the preset's (GPTQ, symmetric, GPTQ's
        own ordering, no overrides), so a preset keeps the artifact key it had."""
        if self.recipe not in GROUPED_RECIPES:
            return {}
        out: dict[str, Any] = {}
        if self.resolved_method != "gptq":
            out["method"] = self.resolved_method
        if self.resolved_symmetric is False:
            out["symmetric"] = False
        if self.actorder is not None:
            out["actorder"] = self.actorder
        if self.overrides:
            out["overrides"] = [o.model_dump() for o in self.overrides]
        return out

    def serve_args(self) -> list[str]:
        """Engine arguments for serving this candidate."""
        kv = [] if self.kv_cache_dtype == "auto" else ["--kv-cache-dtype", self.kv_cache_dtype]
        return kv + list(self.engine_args)
