"""A small valid project for the input-contract and fuzz tests, and the CLI run in-process
with the engine and the quantiser replaced by a stand-in that refuses to start: only the
workbench's own up-front checks are under test, so anything that gets past them reaches the
stand-in and is reported as accepted."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from workbench.cli import main

# SmolLM2-135M's shapes (hidden 576: a group size of 256 does not divide it), with a
# context of 2048.
MODEL_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
                "num_key_value_heads": 3, "num_hidden_layers": 30, "head_dim": 64,
                "max_position_embeddings": 2048, "vocab_size": 64}
WORDS = ("what is plus minus times the answer a b c one two three four five six seven "
         "eight nine ten question please tell me").split()


class StandInReached(Exception):
    """The checks accepted the input: the stand-in for the first real work was called."""


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise StandInReached("stand-in reached: the checks accepted the input")


def write_tokenizer(path: Path) -> None:
    """A word-level tokenizer (one token per word): the context check counts with it."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(path))


NUMERIC_ITEMS = [{"id": f"q{i}", "question": f"what is {i} plus one", "answer": i + 1,
                  "slices": ["small" if i < 6 else "large"]} for i in range(12)]


def write_suite(folder: Path, spec: dict, items: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "suite.yaml").write_text(yaml.safe_dump(spec))
    (folder / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    (folder / "SOURCE.md").write_text("Written for the workbench's tests.\n")
    (folder / "LICENSE").write_text("Apache-2.0\n")
    return folder


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def accepted(self) -> bool:
        return "stand-in reached" in self.stderr


class Project:
    """A config with one candidate of each kind, a numeric suite, data files and a gate
    policy, all in one folder; mutate any file, then run a command on it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.model = root / "model"
        self.model.mkdir(parents=True)
        (self.model / "config.json").write_text(json.dumps(MODEL_CONFIG))
        write_tokenizer(self.model / "tokenizer.json")
        data = root / "data"
        data.mkdir()
        (data / "calib.jsonl").write_text("".join(
            json.dumps({"text": f"calibration text number {i}"}) + "\n" for i in range(20)))
        (data / "heldout.jsonl").write_text("".join(
            json.dumps({"text": f"held out text {i}", "domain": "prose"}) + "\n"
            for i in range(4)))
        self.suite = write_suite(root / "suites" / "num", {
            "name": "num", "version": "1", "kind": "quality", "scoring": "numeric",
            "prompt_template": "{question}", "max_tokens": 8}, NUMERIC_ITEMS)
        (root / "gates.yaml").write_text(yaml.safe_dump(self.gates))
        self.write_config(self.config)

    @property
    def config(self) -> dict:
        return {
            "model": {"name": "tiny", "path": "model"},
            "candidates": {"int4": {"recipe": "w4a16", "group_size": 64},
                           "aa": {"recipe": "none"}},
            "calibration": {"files": ["data/calib.jsonl"], "num_samples": 8, "seq_len": 32,
                            "heldout": ["data/heldout.jsonl"], "heldout_samples": 2},
            "engine": {"max_model_len": 512},
            "suites": [str(self.suite)],
            "load": {"profile": "tiny", "rounds": 1, "profiles": {"tiny": {
                "concurrency": [1], "num_prompts": 2, "prompt_tokens": 16,
                "output_tokens": 8, "warmup_prompts": 0}}},
            "gates": "gates.yaml",
        }

    @property
    def gates(self) -> dict:
        return {"quality": [{"suite": "num", "max_drop": 0.1}]}

    @property
    def config_file(self) -> Path:
        return self.root / "config.yaml"

    def write_config(self, data: dict) -> None:
        self.config_file.write_text(yaml.safe_dump(data))

    def files(self) -> dict[str, int]:
        """Every file under the project and the cache, with its size: what a refused
        command must leave as it was."""
        found = {}
        # the working folder: the project, the cache, runs/ and mlflow.db all live here
        for p in self.root.parent.rglob("*"):
            if p.is_file() or p.is_symlink():
                found[str(p)] = p.lstat().st_size
        return found

    def run(self, *args: str) -> Result:
        out = CliRunner().invoke(main, list(args), catch_exceptions=True)
        stderr = out.stderr if out.stderr_bytes is not None else ""
        if out.exception is not None and not isinstance(out.exception, SystemExit):
            stderr += f"\nuncaught {type(out.exception).__name__}: {out.exception}"
        return Result(out.exit_code, out.stdout, stderr)


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A valid project in tmp_path (the working directory), an empty cache, and stand-ins
    for everything that would start work."""
    import workbench.pipeline.evaluate
    import workbench.quantize.build
    import workbench.serve.engine

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the config's URI is under test
    (tmp_path / "cache").mkdir()
    monkeypatch.setattr(workbench.pipeline.evaluate, "new_run_dir", _refuse)
    monkeypatch.setattr(workbench.quantize.build, "run_worker", _refuse)
    monkeypatch.setattr(workbench.serve.engine.EngineServer, "start", _refuse)
    return Project(tmp_path / "project")
