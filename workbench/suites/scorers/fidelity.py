"""Fidelity of a candidate to its baseline, token by token, from stored log-probabilities.

Both models scored the same token ids (a fidelity suite sends the engine's own tokenization
as ids); each position holds the engine's top-k log-probabilities. No labels are needed.

KL divergence is computed on the baseline's top-k tokens plus one "everything else"
bucket. Merging outcomes can only lower a KL divergence (data-processing inequality), so
the figure is a lower bound of the full-vocabulary KL that tightens as k grows; with k=20
the top-k usually holds most of the mass. A baseline top-k token missing from the
candidate's top-k is given the candidate's smallest top-k probability, an upper bound on
its true probability, which keeps the estimate on the low side as well. Written here rather
than taken from lm-eval or vLLM: neither compares two engines' stored distributions.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from typing_extensions import TypedDict

from workbench.mechanisms.jsonl import jsonl_lines

__all__ = ["FidelityResult", "compare_fidelity", "first_divergence", "generation_agreement",
           "position_kl"]

_EPS = 1e-12


class AgreementFigures(TypedDict, total=False):
    items: int
    identical_share: float
    prefix_agreement: float
    first_divergence_p10: float
    first_divergence_p50: float
    first_divergence_mean: float


class GenerationAgreement(AgreementFigures, total=False):
    """generation_agreement(): empty when no greedy continuations were compared."""

    tokens: int
    slices: dict[str, AgreementFigures]


@dataclass(frozen=True)
class FidelityResult:
    suite: str
    items: int
    tokens: int
    kl_mean: float
    kl_p95: float
    top1_agreement: float
    baseline_perplexity: float
    candidate_perplexity: float
    slices: dict[str, dict[str, float]]
    skipped_items: int  # items whose token ids differ between the runs (never expected)
    method: str = "KL(baseline || candidate) over the baseline's top-k plus a tail bucket"
    # greedy continuations compared token by token (see generation_agreement); empty when
    # the suite or a run did not generate them
    agreement: GenerationAgreement = field(default_factory=lambda: GenerationAgreement())

    def to_dict(self) -> dict:
        return asdict(self)


def position_kl(base_top: list[list[float]], cand_top: list[list[float]]) -> float:
    """KL(P_base || P_cand) at one position from two top-k lists of [token_id, logprob]."""
    cand = {int(t): lp for t, lp in cand_top}
    floor = min(cand.values()) if cand else math.log(_EPS)
    kl, base_mass, cand_mass = 0.0, 0.0, 0.0
    for token, lp in base_top:
        p_base, p_cand = math.exp(lp), math.exp(cand.get(int(token), floor))
        kl += p_base * (lp - math.log(p_cand))
        base_mass += p_base
        cand_mass += p_cand
    tail_base, tail_cand = max(1.0 - base_mass, 0.0), max(1.0 - cand_mass, _EPS)
    if tail_base > _EPS:
        kl += tail_base * math.log(tail_base / tail_cand)
    return max(kl, 0.0)


def _read(path: Path) -> dict[str, dict]:
    rows = (json.loads(line) for line in jsonl_lines(path) if line.strip())
    return {r["id"]: r for r in rows}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def first_divergence(base: list[int], cand: list[int]) -> int:
    """The position of the first token where two continuations differ (their common
    length when one is a prefix of the other, their length when identical)."""
    for i, (b, c) in enumerate(zip(base, cand, strict=False)):
        if b != c:
            return i
    return min(len(base), len(cand))


def _agreement_figures(pairs: list[tuple[list[int], list[int]]]) -> AgreementFigures:
    firsts = [first_divergence(b, c) for b, c in pairs]
    identical = [b == c for b, c in pairs]
    # the share of each continuation generated before the first difference
    agreed = [1.0 if same else f / max(len(b), len(c), 1)
              for f, same, (b, c) in zip(firsts, identical, pairs, strict=True)]
    return {"items": len(pairs), "identical_share": sum(identical) / len(pairs),
            "prefix_agreement": sum(agreed) / len(pairs),
            "first_divergence_p10": _percentile([float(f) for f in firsts], 0.10),
            "first_divergence_p50": _percentile([float(f) for f in firsts], 0.50),
            "first_divergence_mean": sum(firsts) / len(firsts)}


def generation_agreement(base: dict[str, dict], cand: dict[str, dict],
                         slices_by_id: dict[str, tuple[str, ...]]) -> GenerationAgreement:
    """Both models' greedy continuations of the same prompts, item by item: the share of
    items identical to the end, the share of each continuation before the first
    difference, and where the first difference falls; overall and per slice."""
    ids = sorted(i for i in set(base) & set(cand)
                 if "continuation" in base[i] and "continuation" in cand[i])
    if not ids:
        return {}
    pairs = {i: (base[i]["continuation"], cand[i]["continuation"]) for i in ids}
    by_slice: dict[str, list[tuple[list[int], list[int]]]] = defaultdict(list)
    for i in ids:
        for s in slices_by_id.get(i, ()):
            by_slice[s].append(pairs[i])
    tokens = max(max(len(b), len(c)) for b, c in pairs.values())
    out: GenerationAgreement = {
        **_agreement_figures(list(pairs.values())), "tokens": tokens,
        "slices": {s: _agreement_figures(v) for s, v in sorted(by_slice.items())}}
    return out


def compare_fidelity(suite: str, baseline_file: Path, candidate_file: Path,
                     slices_by_id: dict[str, tuple[str, ...]],
                     keep: Callable[[str], bool] | None = None) -> FidelityResult:
    """keep: which item ids count (a split's half, suites/split.py); None: all."""
    base, cand = _read(baseline_file), _read(candidate_file)
    if keep is not None:
        base = {i: row for i, row in base.items() if keep(i)}
    kls: list[float] = []
    agree = 0
    nll = {"baseline": 0.0, "candidate": 0.0}
    per_slice: dict[str, list[tuple[float, int]]] = defaultdict(list)
    skipped = 0
    paired = sorted(set(base) & set(cand))
    for item_id in paired:
        b, c = base[item_id], cand[item_id]
        if b["tokens"] != c["tokens"]:
            skipped += 1
            continue
        for b_top, c_top in zip(b["top"], c["top"], strict=True):
            kl = position_kl(b_top, c_top)
            same = int(bool(b_top) and bool(c_top) and b_top[0][0] == c_top[0][0])
            kls.append(kl)
            agree += same
            for s in slices_by_id.get(item_id, ()):
                per_slice[s].append((kl, same))
        nll["baseline"] -= sum(b["actual"])
        nll["candidate"] -= sum(c["actual"])
    n = max(len(kls), 1)
    return FidelityResult(
        suite=suite, items=len(paired) - skipped, tokens=len(kls),
        kl_mean=sum(kls) / n, kl_p95=_percentile(kls, 0.95), top1_agreement=agree / n,
        baseline_perplexity=math.exp(nll["baseline"] / n),
        candidate_perplexity=math.exp(nll["candidate"] / n),
        slices={s: {"tokens": len(v), "kl_mean": sum(k for k, _ in v) / len(v),
                    "top1_agreement": sum(a for _, a in v) / len(v)}
                for s, v in sorted(per_slice.items())},
        skipped_items=skipped,
        agreement=generation_agreement(base, cand, slices_by_id),
    )
