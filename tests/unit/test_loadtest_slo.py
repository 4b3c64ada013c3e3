import pytest

from workbench.config.run_config import SLO
from workbench.loadtest.results import LevelResult, LoadResult, cost_figures, slo_figures


def raw(ttfts, latencies, outs, errors, p99_ttft_ms, p99_tpot_ms, duration=10.0) -> dict:
    return {"ttfts": ttfts, "latencies": latencies, "output_lens": outs, "errors": errors,
            "duration": duration, "p99_ttft_ms": p99_ttft_ms, "p99_tpot_ms": p99_tpot_ms}


def level(concurrency: int, slo: dict, throughput: float = 100.0) -> LevelResult:
    stats = {"p50": 1.0, "p95": 1.0, "p99": 1.0, "mean": 1.0}
    return LevelResult(concurrency, 10, 0, 10.0, 1.0, throughput, stats, stats, stats, stats,
                       "x.json", slo=slo)


def test_each_request_is_judged_by_its_own_ttft_and_tpot() -> None:
    # request 1: ttft 0.1 s, 11 tokens in 1.1 s -> tpot 0.1 s; request 2: ttft 0.5 s
    data = raw([0.1, 0.5, 0.1], [1.1, 1.5, 0.0], [11, 11, 0], ["", "", "timeout"], 450, 100)
    figures = slo_figures(data, SLO(ttft_p99_ms=200, tpot_p99_ms=100))
    assert figures["goodput_rps"] == pytest.approx(0.1)  # 1 good request in 10 s
    assert figures["good_output_throughput"] == pytest.approx(1.1)  # its 11 tokens in 10 s
    assert figures["attainment"] == pytest.approx(1 / 3, abs=1e-4)  # a failure is a miss
    assert figures["meets_slo"] is False  # p99 TTFT 450 ms > 200, and one request failed


def test_max_stable_concurrency_is_the_highest_level_meeting_the_slo() -> None:
    load = LoadResult("client", {}, [level(1, {"meets_slo": True}),
                                     level(4, {"meets_slo": True}),
                                     level(16, {"meets_slo": False})])
    stable = load.max_stable_level()
    assert stable is not None and stable.concurrency == 4
    assert LoadResult("client", {}, [level(1, {"meets_slo": False})]).max_stable_level() is None


def test_cost_per_million_tokens_and_per_good_request() -> None:
    lv = level(4, {"meets_slo": True, "goodput_rps": 2.0}, throughput=100.0)
    cost = cost_figures(lv, price_per_hour=3.6)  # one millidollar a second
    assert cost["usd_per_million_output_tokens"] == pytest.approx(10.0)
    assert cost["usd_per_good_request"] == pytest.approx(0.0005)
    assert "usd_per_million_accepted_tokens" not in cost  # measured before it was recorded
    assert cost_figures(None, 3.6)["concurrency"] is None


def test_cost_per_accepted_token_counts_only_requests_that_met_the_slo() -> None:
    """Half the output came from requests that missed the SLO: each accepted token costs
    twice what an output token does, and nothing accepted has no price."""
    lv = level(4, {"meets_slo": False, "goodput_rps": 1.0, "good_output_throughput": 50.0})
    cost = cost_figures(lv, price_per_hour=3.6)
    assert cost["usd_per_million_accepted_tokens"] == pytest.approx(
        2 * cost["usd_per_million_output_tokens"])
    none = cost_figures(level(4, {"goodput_rps": 0.0, "good_output_throughput": 0.0}), 3.6)
    assert none["usd_per_million_accepted_tokens"] is None


def test_requests_past_the_duration_bound_are_in_no_figure() -> None:
    from workbench.loadtest.results import SKIPPED

    data = raw([0.1, 0.1, 0.0], [1.1, 1.1, 0.0], [11, 11, 0], ["", "", SKIPPED], 100, 100)
    figures = slo_figures(data, SLO(ttft_p99_ms=200, tpot_p99_ms=100))
    assert figures["attainment"] == 1.0 and figures["meets_slo"] is True


def test_client_and_server_means_are_compared_within_the_stated_tolerance() -> None:
    import dataclasses

    from workbench.loadtest.results import agreement

    lv = level(1, {})
    lv = dataclasses.replace(lv, ttft_ms={**lv.ttft_ms, "mean": 112.0},
                             tpot_ms={**lv.tpot_ms, "mean": 30.0},
                             server={"latency": {"ttft_ms": {"mean": 100.0, "count": 10},
                                                 "tpot_ms": {"mean": 20.0, "count": 10}}})
    out = agreement(lv)
    assert out["ttft"]["within"] is False and out["ttft"]["diff_ms"] == 12.0  # 12% > 10%
    assert out["tpot"]["within"] is False  # 10 ms apart: above the 5 ms floor and 10%
    close = dataclasses.replace(lv, ttft_ms={**lv.ttft_ms, "mean": 104.0})
    assert agreement(close)["ttft"]["within"] is True
