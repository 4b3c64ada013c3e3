"""A verdict a broken model cannot pass, through the real engine on tiny models.

Two tiny Llamas whose weights are set so that greedy decoding walks a fixed cycle of
English words: the "talking" one cycles through 150 distinct words, nouns and grammar
words in turn (text, to the health check: no loop within any suite's token budget), the
"looping" one through three. With
every layer's output projection zeroed, the residual stream is the current token's
embedding, and the untied output head maps each token's embedding to the next word of the
cycle, so the behaviour is exact and needs no training.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workbench.mechanisms.paths import default_model_dir

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NOUNS = """time people water story music family house garden morning river city school
market letter window friend teacher doctor village island forest mountain summer winter
kitchen office bridge station railway harbour castle church library museum theatre
painting picture camera engine machine bottle basket pocket jacket button candle blanket
pillow carpet mirror ladder hammer pencil paper notebook journey travel holiday weekend
evening night dinner lunch breakfast coffee bread butter cheese apple orange lemon sugar
honey salt pepper onion potato carrot tomato garlic chicken rabbit horse sheep cattle
farmer driver player singer writer reader student captain soldier sailor pilot nurse""".split()
# Grammar words between the nouns, as in prose (the health check reads their share).
FUNCTION = """the of and to in is for with on that as at by from it this was are be or
an not but if so do can will your my his her its our their what which there have has had
all one no here how when who were they we you he she""".split()
WORDS = [w for pair in zip(NOUNS, FUNCTION, strict=False) for w in pair] + NOUNS[len(FUNCTION):]

CONFIG = """
model: {{name: talking-llama, path: {talking}}}
candidates:
  same: {{recipe: none}}                 # the baseline's own weights: an A/A
  looping: {{checkpoint: {looping}}}
  retemplated: {{checkpoint: {retemplated}}}  # the baseline with another chat template
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
engine: {{max_model_len: 512, enforce_eager: true, kv_cache_space_gib: 1, startup_timeout_s: 600}}
suites: [advbench, arithmetic, heldout-text, {next_word}]
profile: smoke
load:
  profile: tiny
  rounds: 1
  profiles:
    tiny: {{concurrency: [2], num_prompts: 32, prompt_tokens: 32, output_tokens: 32,
           warmup_prompts: 1}}
gates: gates.yaml
tracking: {{experiment: health}}
"""
# The latency bounds are wide: on 2 shared cores a 3M-parameter model's latency is noise
# around 1x, and one session each gives an interval within a session only (an A/A once
# came out [0.68, 0.93]). The A/A must pass them; interleaved rounds, whose interval holds
# 1, are test_endpoints' (there a round costs no engine start).
# Every quality suite no gate names gets the policy's default: next-word is judged with
# it. (PLAIN below is the same policy without the default: next-word then goes unjudged.)
GATES = """
defaults:
  quality: {max_drop: 0.05}
health: {max_drop: 0.05, pooled_max_drop: 0.05}
fidelity:
  - {suite: heldout-text, min_identical_share: 0.9, min_prefix_agreement: 0.9}
latency:
  - {metric: e2el_p50_ms, max_ratio: 10.0}
  - {metric: output_throughput, min_ratio: 0.1}
"""


def single_token_words() -> list[str]:
    """WORDS that are one token each (with their leading space), in order: the cycle."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(default_model_dir())
    return [w for w in dict.fromkeys(WORDS)
            if len(tok.encode(" " + w, add_special_tokens=False)) == 1]


def cycle_model(base: Path, out: Path, cycle_len: int) -> Path:
    """A copy of the tiny model that answers every chat prompt with the first cycle_len
    words of WORDS, then a newline, over and over."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    shutil.copytree(base, out)
    tok = AutoTokenizer.from_pretrained(default_model_dir())
    cycle = [tok.encode(" " + w, add_special_tokens=False)[0]
             for w in single_token_words()[:cycle_len]]
    last = tok.apply_chat_template([{"role": "user", "content": "x"}],
                                   add_generation_prompt=True, tokenize=True,
                                   return_dict=True)["input_ids"][-1]
    weights = load_file(out / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    embed = torch.randn(weights["model.embed_tokens.weight"].shape, generator=generator) * 0.5
    head = embed.clone()  # every other token repeats itself
    # one ring through the prompt's last token (a newline) and the words: each row of the
    # output head can name one predecessor only
    ring = [last, *cycle]
    following = dict(zip(ring, ring[1:] + ring[:1], strict=True))
    for token in following:
        head[token] = 0.0
    for token, nxt in following.items():
        head[nxt] = embed[token]
    weights = {k: torch.zeros_like(v) if k.endswith(("o_proj.weight", "down_proj.weight"))
               else v for k, v in weights.items()}
    weights["model.embed_tokens.weight"] = embed.to(torch.bfloat16)
    weights["lm_head.weight"] = head.to(torch.bfloat16)
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    return out


def next_word_suite(folder: Path) -> Path:
    """Multiple choice the talking model answers right every time: after a word of its
    cycle, which of two words comes next. The looping model knows only its first three
    words (every other token predicts itself), so it is at chance here."""
    words = single_token_words()[:150]
    folder.mkdir()
    (folder / "suite.yaml").write_text(
        'name: next-word\nversion: "1"\nkind: quality\nprompt_template: "{context}"\n'
        "scoring: choice\n")
    # the right word first or second in turn: a model that always picked the first option
    # would give one answer to every item, and the suite could not see a change
    rows = [{"id": f"w{i:03d}", "context": f" {words[i]}",
             "choices": [f" {words[i + 1]}", f" {words[(i + 7) % 150]}"][::1 - 2 * (i % 2)],
             "answer": i % 2, "slices": ["words"]} for i in range(4, 44)]
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "SOURCE.md").write_text("Written by this test from its own word list.\n")
    (folder / "LICENSE").write_text("The project's licence (LICENSE at the top).\n")
    return folder


def retemplated_model(base: Path, out: Path) -> Path:
    """The baseline's weights with a chat template of its own: not only the weights differ."""
    shutil.copytree(base, out)
    for name in ("chat_template.jinja", "tokenizer_config.json"):
        if (out / name).is_file():
            text = (out / name).read_text()
            (out / name).write_text(text.replace("<|im_start|>assistant", "<|im_start|>bot"))
    return out


def gates_by_name(record: dict) -> dict[str, dict]:
    return {g["gate"]: g for g in record["gates"]}


def test_a_looping_candidate_is_rejected_and_an_aa_passes(tiny_model: Path, tmp_path: Path,
                                                          workbench) -> None:
    talking = cycle_model(tiny_model, tmp_path / "talking", 150)
    looping = cycle_model(tiny_model, tmp_path / "looping", 3)
    retemplated = retemplated_model(talking, tmp_path / "retemplated")
    (tmp_path / "gates.yaml").write_text(GATES)
    config = tmp_path / "health.yaml"
    config.write_text(CONFIG.format(talking=talking, looping=looping, retemplated=retemplated,
                                    next_word=next_word_suite(tmp_path / "next-word"),
                                    repo=REPO))
    check_a_chat_template_difference_is_refused(config, tmp_path, workbench)

    same = workbench("evaluate", "--candidate", "same", "--config", str(config),
                     "--runs-dir", "runs", cwd=tmp_path)
    assert same.returncode in (0, 1), same.stdout + same.stderr
    record = json.loads(next((tmp_path / "runs").glob("*-same/decision.json")).read_text())
    gates = gates_by_name(record)
    health = {k: g for k, g in gates.items() if k.startswith("health:")}
    assert set(health) == {"health:advbench", "health:arithmetic", "health:(pooled)"}
    assert all(g["status"] == "pass" for g in health.values()), health
    assert record["suites"]["advbench"]["baseline"]["health"]["healthy"] == 1.0
    assert gates["fidelity:heldout-text:identical_share"]["status"] == "pass"
    assert gates["fidelity:heldout-text:prefix_agreement"]["status"] == "pass"
    latency = [g for k, g in gates.items() if k.startswith("latency:")]
    assert latency and all(g["status"] == "pass" for g in latency), latency
    # every prompt gets the same words: the arithmetic comparison says it cannot see a change
    assert record["suites"]["arithmetic"]["comparison"]["(all)"]["constant_baseline"]
    assert gates["quality:next-word"]["status"] == "pass"  # the default: 1.000 -> 1.000
    assert gates["comparability"]["status"] == "pass", gates["comparability"]
    assert record["comparability"]["prefix_cache_at_start"]["candidate"].startswith("empty")
    assert record["decision"] in ("promote", "inconclusive")
    assert record["early_stop"] is None  # an A/A is measured to the end
    assert not any(g["status"] == "not_measured" for g in record["gates"])
    # its suites ran in the watch's order, the baseline's in the config's; the exact model
    # answers each alike (the order decides when a stop can come, never a result)
    spans = json.loads(next((tmp_path / "runs").glob("*-same/timing.json")).read_text())
    order = {role: [s["name"].split(": ", 1)[1] for s in spans["spans"]
                    if s["kind"] == "suite" and s["name"].startswith(f"{role}: ")]
             for role in ("baseline", "candidate")}
    assert sorted(order["baseline"]) == sorted(order["candidate"]), order
    assert order["baseline"] != order["candidate"], order
    for name, pair in record["suites"].items():
        assert pair["candidate"]["accuracy"] == pair["baseline"]["accuracy"], name
    stopped_run = check_the_looping_candidate_is_stopped_early(config, tmp_path, workbench)

    broken = workbench("evaluate", "--candidate", "looping", "--config", str(config),
                       "--runs-dir", "runs", "--measure-all", cwd=tmp_path)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "baseline: reused cached results" in broken.stdout
    # the stopped run's suite is reused, the rest measured
    assert "looping: reused the 1 suite run(s) measured before it was stopped" in broken.stdout
    run_dir = max(d for d in (tmp_path / "runs").glob("*-looping") if d != stopped_run)
    record = json.loads((run_dir / "decision.json").read_text())
    gates = gates_by_name(record)
    assert record["decision"] == "reject" and record["early_stop"] is None
    assert record["load"]["candidate"]["levels"] and record["load"]["baseline"]["levels"]
    for name in ("health:advbench", "health:arithmetic", "health:(pooled)"):
        assert gates[name]["status"] == "fail", gates[name]
    advbench = record["suites"]["advbench"]
    assert advbench["candidate"]["health"]["degenerate"] == {"looping": advbench["candidate"]["n"]}
    # looping is not refusing: the broken model gains no refusals and no right behaviour
    assert advbench["candidate"]["metrics"]["refusal_rate"] <= \
        advbench["baseline"]["metrics"]["refusal_rate"]
    assert advbench["candidate"]["accuracy"] <= advbench["baseline"]["accuracy"]
    assert "health:(pooled)" in broken.stdout
    markdown = (run_dir / "decision.md").read_text()
    assert "## Generation health" in markdown and "looping" in markdown
    # next-word, which no gate names, is judged by the policy's default, and fails
    assert gates["quality:next-word"]["status"] == "fail", gates["quality:next-word"]
    assert record["policy"]["coverage"]["next-word"] == "the policy's quality default"
    check_regated_looping_run(run_dir, tmp_path, workbench)


def check_the_looping_candidate_is_stopped_early(config: Path, tmp_path: Path,
                                                 workbench) -> Path:
    """Measured by default, the looping model is stopped after the first suite that fails
    it past doubt: the rest of its suites and the load test are not measured; the
    record, decision.md and MLflow say which and why; the decision is the reject it is."""
    stopped = workbench("evaluate", "--candidate", "looping", "--config", str(config),
                        "--runs-dir", "runs", cwd=tmp_path)
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "looping stopped early after" in stopped.stdout
    run_dir = next((tmp_path / "runs").glob("*-looping"))
    record = json.loads((run_dir / "decision.json").read_text())
    stop = record["early_stop"]
    assert record["decision"] == "reject" and stop is not None and stop["load_not_measured"]
    assert "tests: p <=" in stop["level"]
    gates = gates_by_name(record)
    assert stop["gates"] and all(gates[g]["status"] == "fail" for g in stop["gates"])
    # the first suite it ran decided it: every other suite is left out, and named
    measured = set(record["suites"])
    assert measured == {stop["after"]} and len(stop["not_measured"]) == 3
    assert not set(stop["not_measured"]) & measured
    left_out = {g["gate"] for g in record["gates"] if g["status"] == "not_measured"}
    assert any(g.startswith("latency:") for g in left_out) and "health:(pooled)" in left_out
    for suite in stop["not_measured"]:
        assert not (run_dir / "candidate" / f"items-{suite}.jsonl").exists()
    # the baseline came from the cache: its load session, due after the candidate's
    # suites, was not run either
    assert record["load"]["candidate"]["levels"] == [] == record["load"]["baseline"]["levels"]
    markdown = (run_dir / "decision.md").read_text()
    assert "**Stopped early** after" in markdown and "Not measured:" in markdown
    assert "NOT MEASURED" in markdown

    import mlflow

    mlflow.set_tracking_uri(record["mlflow"]["tracking_uri"])
    run = mlflow.MlflowClient().get_run(record["mlflow"]["run_id"])
    assert run.data.tags["stopped_early"] == "true"
    assert run.data.tags["stopped_early.after"] == stop["after"]
    assert run.data.tags["mlflow.runName"].endswith("stopped early")
    return run_dir


PLAIN = GATES.replace("defaults:\n  quality: {max_drop: 0.05}\n", "")
# Floors on the looping model's healthy share (none of its responses is healthy): at the
# 40 items of advbench an interval from 0 reaches above 0.05; over the 160 items pooled it
# does not. And a floor its baseline (the talking model, arithmetic 0) misses.
FLOORS = """
health: {max_drop: 1.0, pooled_max_drop: 1.0, min_value: 0.05}
quality:
  - {suite: arithmetic, max_drop: 1.0, min_value: 0.5}
"""


def check_regated_looping_run(run_dir: Path, tmp_path: Path, workbench) -> None:
    """The stored looping run judged again, no engine: without the policy's default the
    suite it failed goes unjudged (and says so); a floor is inconclusive at few items and
    decided at many; a floor the baseline misses is named as the policy's defect."""
    (tmp_path / "plain.yaml").write_text(PLAIN)
    plain = workbench("gate", str(run_dir), "--policy", "plain.yaml", cwd=tmp_path)
    regated = json.loads((run_dir / "gate-plain" / "decision.json").read_text())
    assert "quality:next-word" not in gates_by_name(regated), plain.stdout
    assert regated["policy"]["coverage"]["next-word"].startswith("not gated")
    (tmp_path / "floors.yaml").write_text(FLOORS)
    floors = workbench("gate", str(run_dir), "--policy", "floors.yaml", cwd=tmp_path)
    assert floors.returncode == 1, floors.stdout + floors.stderr
    record = json.loads((run_dir / "gate-floors" / "decision.json").read_text())
    gates = gates_by_name(record)
    small, pooled = gates["health:advbench:floor"], gates["health:(pooled):floor"]
    assert small["evidence"]["candidate"]["n"] == 40 and small["status"] == "inconclusive"
    assert "more items would decide it" in small["detail"]
    assert pooled["evidence"]["candidate"]["n"] > 100 and pooled["status"] == "fail"
    missed = gates["quality:arithmetic:floor"]
    assert missed["baseline_status"] == "fail" and "the baseline misses it" in missed["detail"]
    assert record["policy"]["baseline_misses"] == ["quality:arithmetic:floor"]
    markdown = (run_dir / "gate-floors" / "decision.md").read_text()
    assert "No candidate of this model can pass this policy: `quality:arithmetic:floor`" \
        in markdown
    assert "no candidate of this model can pass this policy" in floors.stdout.lower()


def check_a_chat_template_difference_is_refused(config: Path, tmp_path: Path,
                                                workbench) -> None:
    """Seen up front: exit 2 naming the difference, nothing written or started."""
    refused = workbench("validate", "--config", str(config), "--candidate", "retemplated",
                        cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "candidates.retemplated.checkpoint: its chat template differs" in refused.stderr
    assert not (tmp_path / "runs").exists()
