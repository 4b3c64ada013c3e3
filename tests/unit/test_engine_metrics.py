import math

import pytest

from workbench.loadtest.engine_metrics import histogram_quantile, parse_scrape, server_side_level

BEFORE = """# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="0.5",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.1
# HELP vllm:num_preemptions_total Preemptions.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="m"} 1.0
# HELP vllm:kv_cache_usage_perc KV usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
"""
AFTER = BEFORE.replace('le="0.5",model_name="m"} 2.0', 'le="0.5",model_name="m"} 12.0') \
    .replace('le="1.0",model_name="m"} 2.0', 'le="1.0",model_name="m"} 22.0') \
    .replace('le="+Inf",model_name="m"} 2.0', 'le="+Inf",model_name="m"} 22.0') \
    .replace('_count{model_name="m"} 2.0', '_count{model_name="m"} 22.0') \
    .replace('preemptions_total{model_name="m"} 1.0', 'preemptions_total{model_name="m"} 4.0')


def test_quantiles_interpolate_inside_the_bucket_holding_the_rank() -> None:
    buckets = {0.1: 0.0, 0.5: 10.0, 1.0: 20.0, math.inf: 20.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.5)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.3)
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.75)
    assert math.isnan(histogram_quantile(0.5, {math.inf: 0.0}))


def test_a_rank_in_the_open_bucket_answers_the_largest_finite_bound() -> None:
    assert histogram_quantile(0.99, {1.0: 1.0, math.inf: 10.0}) == 1.0


def test_a_level_is_what_happened_between_two_scrapes() -> None:
    level = server_side_level(parse_scrape(BEFORE), parse_scrape(AFTER))
    ttft = level["latency"]["ttft_ms"]
    assert ttft["count"] == 20  # the 2 requests before the level are not counted
    assert ttft["p50"] == pytest.approx(500.0)  # 10 in (0.1, 0.5], 10 in (0.5, 1.0]
    assert level["counters"]["num_preemptions"] == 3
    assert parse_scrape(AFTER).gauges["vllm:kv_cache_usage_perc"] == 0.25
