"""Is a cheap signal worth its cost? (issue 47, step 4): over a tune's trials, how well each
proxy, known before or early in a trial, separates the trials the policy promoted from the
rest; and the one known before any engine starts, the build's held-out perplexity ratio,
orders the points of equal size in a walk over a space (order_by_proxy, walk.py).

The proxies a trial's record holds:
- `perplexity_ratio`: the build's held-out perplexity over the baseline's
  (quantization.fidelity), known once the artifact is built, before any engine starts;
- `kl_mean`: the token KL on the held-out text through the engine (fidelity suite);
- `weights_bytes`: the artifact's size, the space's own order (smaller is cheaper, not
  better: it predicts failure, if anything).
Each is scored by its AUC (the Mann-Whitney statistic): the chance that a promoted trial's
value is better (lower) than a rejected one's, ties counting half; 0.5 is no better than a
coin, 1.0 separates them completely. None where the trials are all of one kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ORDERING_PROXY", "PROXIES", "ProxyFit", "auc", "order_by_proxy", "proxy_fits",
           "trial_proxies"]

PROXIES = ("perplexity_ratio", "kl_mean", "weights_bytes")
# the proxy that orders points of equal size: the only one known before an engine starts
# (token KL needs the engine, the size is already the walk's order)
ORDERING_PROXY = "perplexity_ratio"


def auc(values: Sequence[float], passed: Sequence[bool]) -> float | None:
    """P(a passed trial's value < a failed trial's value), ties half: lower is better."""
    good = [v for v, p in zip(values, passed, strict=True) if p]
    bad = [v for v, p in zip(values, passed, strict=True) if not p]
    if not good or not bad:
        return None
    wins = sum(1.0 if g < b else 0.5 if g == b else 0.0 for g in good for b in bad)
    return wins / (len(good) * len(bad))


@dataclass(frozen=True)
class ProxyFit:
    proxy: str
    trials: int  # trials that had this proxy
    promoted: int
    auc: float | None


def trial_proxies(record: dict) -> dict[str, float]:
    """The proxies one trial's decision record holds (those it measured)."""
    out: dict[str, float] = {}
    built = (record.get("quantization") or {}).get("fidelity") or {}
    if isinstance(built.get("perplexity_ratio"), int | float):
        out["perplexity_ratio"] = float(built["perplexity_ratio"])
    for fid in (record.get("fidelity") or {}).values():
        if isinstance(fid, dict) and isinstance(fid.get("kl_mean"), int | float):
            out["kl_mean"] = float(fid["kl_mean"])
            break
    size = (record.get("quantization") or {}).get("size_bytes")
    if isinstance(size, int | float):
        out["weights_bytes"] = float(size)
    return out


def proxy_fits(trials: Sequence[tuple[dict[str, float], bool]]) -> list[ProxyFit]:
    """Each proxy's AUC over the trials that have it (proxies, promoted)."""
    fits = []
    for name in PROXIES:
        having = [(p[name], ok) for p, ok in trials if name in p]
        fits.append(ProxyFit(name, len(having), sum(ok for _, ok in having),
                             auc([v for v, _ in having], [ok for _, ok in having])))
    return fits


def order_by_proxy(names: Sequence[str], values: dict[str, float | None]) -> list[str]:
    """The names, lowest proxy value (most likely to pass) first; a name without a value
    keeps its place in the stated order after those with one (a stable sort, so ties keep
    the prior too)."""
    known = sorted((n for n in names if values.get(n) is not None),
                   key=lambda n: float(values[n] or 0.0))
    return known + [n for n in names if values.get(n) is None]
