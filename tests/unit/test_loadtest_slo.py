from pathlib import Path

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


def test_latency_by_prompt_length_and_input_throughput() -> None:
    """Short prompts answer first; a level reports each prompt-length bucket's own TTFT
    (failed requests in none), and the prompt tokens it processed per second."""
    from workbench.loadtest.results import by_prompt_length, parse_level

    data = raw([0.05, 0.06, 0.40, 0.90, 0.1], [0.5, 0.6, 1.3, 1.8, 0.1],
               [10, 10, 10, 10, 0], ["", "", "", "", "timeout"], 900, 100)
    data.update(input_lens=[64, 100, 300, 3000, 64], total_input_tokens=64 + 100 + 300 + 3000,
                itls=[[0.05] * 9] * 4 + [[]],
                completed=4, request_throughput=0.4, output_throughput=4.0,
                **{f"{s}_{m}_ms": 1.0 for s in ("mean", "p50", "p95", "p99")
                   for m in ("ttft", "tpot", "itl", "e2el")})
    buckets = by_prompt_length(data)
    assert list(buckets) == ["1-128", "129-512", ">2048"]  # no prompt of 513-2048 tokens
    assert buckets["1-128"]["requests"] == 2  # the failed short one is in no bucket
    assert buckets["1-128"]["ttft_p50_ms"] == pytest.approx(55)
    assert buckets[">2048"]["ttft_p99_ms"] == pytest.approx(900)
    assert buckets["129-512"]["tpot_p50_ms"] == pytest.approx(100)  # (1.3 - 0.4) / 9
    from workbench.config.run_config import LoadProfile

    level = parse_level(data, LoadProfile(concurrency=[2], num_prompts=5, prompt_tokens=64,
                                          output_tokens=10), 2, Path("raw.json"))
    assert level.input_throughput == pytest.approx(346.4)  # 3,464 prompt tokens in 10 s
    assert level.by_prompt_length == buckets


def test_decision_md_shows_tokens_in_and_out_queue_time_and_prompt_buckets() -> None:
    from dataclasses import replace

    from builders import record

    from workbench.record.render import render_markdown

    rec = record("promote")
    level = {**rec.load["candidate"]["levels"][0], "input_throughput": 300.0,
             "by_prompt_length": {"1-128": {"requests": 8, "ttft_p50_ms": 40.0,
                                            "ttft_p99_ms": 90.0, "tpot_p50_ms": 12.5}},
             "server": {"latency": {"queue_ms": {"p50": 2.0, "p99": 7.0}}}}
    rec = replace(rec, load={**rec.load, "candidate": {**rec.load["candidate"],
                                                       "levels": [level]}})
    md = render_markdown(rec)
    assert "| 300.0 / 50.0 / 350.0 |" in md  # in / out / total tokens per second
    assert "– / 50.0 / –" in md  # the baseline's level, measured before input was counted
    assert "| 2.0 / 7.0 |" in md  # the engine's queue time, p50 / p99
    assert "| candidate | c1 | 1-128 | 8 | 40 / 90 | 12.5 |" in md
