"""How well a cheap signal predicts a trial's verdict (tune/proxies.py, issue 47 step 4):
the AUC is the Mann-Whitney statistic, a proxy that separates the promoted trials scores 1,
one that orders them backwards 0, one of a single class of trials None."""

from __future__ import annotations

import pytest

from workbench.tune.proxies import auc, proxy_fits, trial_proxies


def test_auc_counts_pairs_and_ties() -> None:
    assert auc([1.0, 1.1, 1.5, 2.0], [True, True, False, False]) == 1.0
    assert auc([2.0, 1.0], [True, False]) == 0.0
    assert auc([1.0, 1.0], [True, False]) == 0.5
    assert auc([1.0, 1.2, 1.1], [True, False, True]) == 1.0
    assert auc([1.0, 2.0], [True, True]) is None


def test_auc_is_scipys_mann_whitney() -> None:
    from scipy.stats import mannwhitneyu

    values = [1.02, 1.10, 1.27, 1.05, 1.31, 1.10, 1.08]
    passed = [True, True, False, True, False, False, True]
    good = [-v for v, p in zip(values, passed, strict=True) if p]  # lower is better
    bad = [-v for v, p in zip(values, passed, strict=True) if not p]
    u = mannwhitneyu(good, bad).statistic
    assert auc(values, passed) == pytest.approx(u / (len(good) * len(bad)))


def test_the_proxies_are_read_from_a_trials_record() -> None:
    record = {"quantization": {"fidelity": {"perplexity_ratio": 1.27}, "size_bytes": 112e6},
              "fidelity": {"heldout-text": {"kl_mean": 0.258}}}
    assert trial_proxies(record) == {"perplexity_ratio": 1.27, "kl_mean": 0.258,
                                     "weights_bytes": 112e6}
    stopped = {"quantization": {"fidelity": {"perplexity_ratio": 1.3}}, "fidelity": {}}
    assert trial_proxies(stopped) == {"perplexity_ratio": 1.3}  # stopped before its KL
    fits = {f.proxy: f for f in proxy_fits([(trial_proxies(record), False),
                                            (trial_proxies(stopped), False),
                                            ({"perplexity_ratio": 1.1}, True)])}
    assert fits["perplexity_ratio"].auc == 1.0 and fits["perplexity_ratio"].trials == 3
    assert fits["kl_mean"].auc is None and fits["kl_mean"].promoted == 0
