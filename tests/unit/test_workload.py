"""Workloads: length distributions, trace files, the benchmark's timed-trace form, named
load profiles in the config."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from workbench.config.run_config import LoadProfile, load_config
from workbench.loadtest.workload import (
    SHARED_CHUNK_IDS,
    Request,
    draw_requests,
    read_trace,
    trace_row,
    write_timed_trace,
)
from workbench.mechanisms.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def profile(**fields) -> LoadProfile:
    return LoadProfile.model_validate({"concurrency": [1], **fields})


def test_lognormal_lengths_centre_on_the_median_and_stay_in_bounds() -> None:
    p = profile(prompt_tokens={"distribution": "lognormal", "median": 200, "sigma": 0.8,
                               "min": 50, "max": 600}, output_tokens=32)
    lengths = np.array([r.prompt_tokens for r in draw_requests(p, 4000, seed=1)])
    assert lengths.min() >= 50 and lengths.max() <= 600
    assert 185 <= np.median(lengths) <= 215
    assert (lengths == 600).any() and (lengths == 50).any()  # the tails are clipped, not cut
    assert {r.output_tokens for r in draw_requests(p, 50, seed=1)} == {32}


def test_uniform_lengths_cover_the_range_and_the_draw_is_seeded() -> None:
    p = profile(prompt_tokens={"distribution": "uniform", "min": 10, "max": 20})
    first = draw_requests(p, 500, seed=3)
    assert {r.prompt_tokens for r in first} == set(range(10, 21))
    assert first == draw_requests(p, 500, seed=3) != draw_requests(p, 500, seed=4)


def test_a_distribution_missing_its_parameters_is_refused() -> None:
    with pytest.raises(ValueError, match="lognormal distribution needs sigma, max"):
        profile(prompt_tokens={"distribution": "lognormal", "median": 100})


def test_exactly_one_mode_and_a_prefix_shorter_than_every_prompt() -> None:
    with pytest.raises(ValueError, match="exactly one of concurrency"):
        LoadProfile.model_validate({"concurrency": [1], "request_rate": [2.0]})
    with pytest.raises(ValueError, match="shared_prefix_tokens .64. must be below the "
                                         "shortest prompt .64."):
        profile(prompt_tokens=64, shared_prefix_tokens=64)


def write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_a_trace_is_read_in_order(tmp_path: Path) -> None:
    trace = write(tmp_path / "t.jsonl", [
        {"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5},
        {"arrival_s": 0.5, "prompt_tokens": 20, "output_tokens": 6, "note": "kept aside"}])
    assert read_trace(trace, 512) == [Request(0.0, 10, 5), Request(0.5, 20, 6)]


@pytest.mark.parametrize(("row", "message"), [
    ('{"arrival_s": 0, "prompt_tokens": 10}', r"t.jsonl:2: output_tokens must be a whole number"),
    ('{"arrival_s": 0, "prompt_tokens": 1.5, "output_tokens": 2}', "prompt_tokens must be a whole"),
    ('{"arrival_s": -1, "prompt_tokens": 10, "output_tokens": 2}', "arrival_s must be >= 0"),
    ('{"arrival_s": 0.3, "prompt_tokens": 500, "output_tokens": 20}', "exceed engine.max_model"),
    ('{"arrival_s": 0.3, "prompt_tokens": 10', r"t.jsonl:2: not valid JSON"),
])
def test_a_bad_trace_line_is_named(tmp_path: Path, row: str, message: str) -> None:
    trace = write(tmp_path / "t.jsonl", ['{"arrival_s": 0.2, "prompt_tokens": 10, '
                                         '"output_tokens": 5}', row])
    with pytest.raises(InputError, match=message):
        read_trace(trace, 512)


def test_arrivals_out_of_order_are_refused(tmp_path: Path) -> None:
    trace = write(tmp_path / "t.jsonl", [
        {"arrival_s": 2, "prompt_tokens": 10, "output_tokens": 5},
        {"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 5}])
    with pytest.raises(InputError, match="t.jsonl:2: arrival_s 1.0 is before"):
        read_trace(trace, 512)


def test_the_shipped_example_trace_reads() -> None:
    requests = read_trace(REPO / "load_traces" / "example.jsonl", 2048)
    assert len(requests) == 36 and requests[-1].arrival_s < 30


def test_timed_trace_ids_share_the_prefix_and_nothing_else(tmp_path: Path) -> None:
    requests = [Request(0.0, 100, 8), Request(1.5, 37, 8)]
    chunk = write_timed_trace(requests, 24, 0, tmp_path / "a.jsonl")
    assert chunk == 8  # the prefix ends on a chunk boundary
    a, b = (json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines())
    assert a["hash_ids"][:3] == b["hash_ids"][:3] == [0, 1, 2]  # 24 shared tokens
    assert not set(a["hash_ids"][3:]) & set(b["hash_ids"][3:])
    # enough chunks for every prompt token; the benchmark cuts the last chunk short
    assert len(a["hash_ids"]) * chunk >= 100 > (len(a["hash_ids"]) - 1) * chunk
    assert (b["timestamp"], b["input_length"], b["output_length"]) == (1.5, 37, 8)
    write_timed_trace(requests, 24, 1, tmp_path / "b.jsonl")  # another level
    other = json.loads((tmp_path / "b.jsonl").read_text().splitlines()[0])
    assert other["hash_ids"][:3] == [0, 1, 2] and not set(other["hash_ids"][3:]) & set(
        a["hash_ids"][3:])


def test_a_traces_shared_chunks_are_read_and_written_back(tmp_path: Path) -> None:
    requests = [Request(0.0, 40, 5, prefix_chunks=(0, 1)), Request(0.5, 20, 6)]
    trace = write(tmp_path / "t.jsonl", [trace_row(r) for r in requests])
    assert read_trace(trace, 512) == requests
    assert "prefix_chunks" not in json.loads(trace.read_text().splitlines()[1])


@pytest.mark.parametrize(("chunks", "message"), [
    ('"0,1"', "prefix_chunks must be a list of whole numbers from 0"),
    ("[0, -1]", "prefix_chunks must be a list"),
    ("[0, true]", "prefix_chunks must be a list"),
    ("[0, 1, 2]", "t.jsonl:1: prefix_chunks cover 48 tokens, more than its prompt_tokens"),
    ("[100000000]", "prefix_chunks must be a list of whole numbers from 0 to 99999999"),
])
def test_bad_shared_chunks_are_named(tmp_path: Path, chunks: str, message: str) -> None:
    trace = write(tmp_path / "t.jsonl", ['{"arrival_s": 0, "prompt_tokens": 40, '
                                         f'"output_tokens": 5, "prefix_chunks": {chunks}}}'])
    with pytest.raises(InputError, match=message):
        read_trace(trace, 512)


def test_a_chunk_number_is_the_same_tokens_from_the_start_on_every_line(
        tmp_path: Path) -> None:
    good = [Request(0.0, 40, 5, prefix_chunks=(0, 1)), Request(0.1, 40, 5, prefix_chunks=(0,)),
            Request(0.2, 40, 5, prefix_chunks=(2, 3))]
    assert read_trace(write(tmp_path / "g.jsonl", [trace_row(r) for r in good]), 512) == good
    for chunks, said in (((1,), "1 follows nothing here but came after 0"),
                         ((2, 1), "1 follows 2 here but came after 0"),
                         ((0, 2), "2 follows 0 here but came first")):
        rows = [trace_row(r) for r in good] + [trace_row(Request(0.3, 40, 5, prefix_chunks=chunks))]
        with pytest.raises(InputError, match=rf"t.jsonl:4: prefix_chunks: {said}"):
            read_trace(write(tmp_path / "t.jsonl", rows), 512)


def test_a_trace_that_says_what_it_shares_takes_no_profile_prefix_besides(
        tmp_path: Path) -> None:
    trace = write(tmp_path / "t.jsonl", [trace_row(Request(0.0, 40, 5, prefix_chunks=(0,)))])
    with pytest.raises(InputError, match=r"shared_prefix_tokens \(24\) would add another"):
        read_trace(trace, 512, shared_prefix_tokens=24)
    assert read_trace(trace, 512, shared_prefix_tokens=0)[0].prefix_chunks == (0,)


def test_timed_trace_ids_share_what_the_trace_says_on_every_level(tmp_path: Path) -> None:
    # two prompts opening with one segment's system prompt (two chunks), one with only its
    # first chunk in common, one sharing nothing
    requests = [Request(0.0, 70, 8, prefix_chunks=(0, 1)),
                Request(0.1, 50, 8, prefix_chunks=(0, 1)),
                Request(0.2, 30, 8, prefix_chunks=(0,)), Request(0.3, 30, 8)]
    assert write_timed_trace(requests, 0, 0, tmp_path / "a.jsonl") == 16
    lines = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    ids = [line["hash_ids"] for line in lines]
    system = [SHARED_CHUNK_IDS, SHARED_CHUNK_IDS + 1]
    assert ids[0][:2] == ids[1][:2] == system and ids[2][:1] == system[:1]
    assert ids[2][1] != system[1] and not set(ids[3]) & set(system)
    own = [set(i[len(r.prefix_chunks):]) for i, r in zip(ids, requests, strict=True)]
    assert all(not (a & b) for n, a in enumerate(own) for b in own[n + 1:])
    assert [len(i) for i in ids] == [5, 4, 2, 2]  # every prompt token, in chunks of 16
    write_timed_trace(requests, 0, 1, tmp_path / "b.jsonl")  # another level
    again = json.loads((tmp_path / "b.jsonl").read_text().splitlines()[0])["hash_ids"]
    assert again[:2] == system and not set(again[2:]) & own[0]


def test_builtin_profiles_are_there_and_a_config_overrides_their_fields(tmp_path: Path) -> None:
    cfg = load_config(REPO / "configs" / "default.yaml")
    assert {"interactive", "batch", "replay"} <= set(cfg.load.profiles)
    assert cfg.workload.concurrency == [1, 8] and cfg.workload.slo is not None
    batch = cfg.with_load_profile("batch").workload
    assert batch.mode == "rate" and batch.burstiness == 0.5  # kept from the built-in
    with pytest.raises(InputError, match="--load-profile 'nope' is not a load profile"):
        cfg.with_load_profile("nope")


def test_a_profile_too_long_for_the_context_names_both_figures(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (REPO / "configs" / "default.yaml").read_text()
    bad.write_text(text.replace("max_model_len: 2048", "max_model_len: 256"))
    with pytest.raises(InputError, match=r"longest request \(480 tokens: prompt_tokens up to "
                                         r"384 \+ output_tokens up to 96\) exceeds engine"):
        load_config(bad)


def test_naming_a_mode_replaces_the_builtin_one(tmp_path: Path) -> None:
    text = (REPO / "configs" / "default.yaml").read_text().replace(
        "      request_rate: [1, 4]\n", "      concurrency: [2]\n")
    (tmp_path / "c.yaml").write_text(text)
    batch = load_config(tmp_path / "c.yaml").with_load_profile("batch").workload
    assert batch.mode == "concurrency" and batch.request_rate is None


def test_the_workload_says_what_a_traces_requests_share() -> None:
    from workbench.config.run_config import LoadProfile
    from workbench.loadtest.results import workload_summary

    profile = LoadProfile(trace="t.jsonl")
    shared = workload_summary(profile, [Request(0.0, 40, 5, prefix_chunks=(0, 1)),
                                        Request(0.5, 40, 5, prefix_chunks=(0,)),
                                        Request(0.7, 40, 5, prefix_chunks=(2,)),
                                        Request(0.9, 40, 5)])
    # chunk 0 is shared (two requests); 1 and 2 open one request each: not shared
    assert (shared["requests_sharing_a_prefix"], shared["shared_chunk_tokens"]) == (2, 32)
    plain = workload_summary(profile, [Request(0.0, 40, 5)])
    assert "requests_sharing_a_prefix" not in plain  # as every workload before
