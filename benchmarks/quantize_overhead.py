"""What `workbench quantize` costs on top of a bare llm-compressor `oneshot` call.

    .venv/bin/python benchmarks/quantize_overhead.py [--candidate int4] [--repeats 2]

Both sides quantise the same model with the same recipe and the same calibration samples,
alternately, in the quantiser environment, each timed as a whole command from process
start to saved checkpoint:

- bare: a short script that loads the model, calls `oneshot` and `save_pretrained`. It
  builds the modifiers with the workbench worker's own `build_recipe`, so the recipe is
  identical by construction; nothing else of the workbench runs.
- workbench: `workbench quantize --candidate NAME` with an empty artifact cache, so it
  really builds: CLI start-up, config validation, calibration sampling, the artifact key,
  the worker subprocess, the held-out perplexity check, the manifest, the atomic rename.

The first workbench run also computes the baseline's held-out perplexity; later repeats
find it cached (as every candidate after the first does in practice). Prints each pair
and the overhead in percent.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.config.run_config import load_config  # noqa: E402
from workbench.mechanisms.paths import link_shared_cache, offline_env, quant_python  # noqa: E402
from workbench.quantize.build import calibration_samples  # noqa: E402

BARE = '''
import json, sys
sys.path.insert(0, sys.argv[2])
from worker import build_recipe
job = json.loads(open(sys.argv[1]).read())
import torch
from datasets import Dataset
from llmcompressor import oneshot
from transformers import AutoModelForCausalLM, AutoTokenizer
torch.manual_seed(job["seed"])
model = AutoModelForCausalLM.from_pretrained(job["model_dir"], dtype=torch.bfloat16)
tokenizer = AutoTokenizer.from_pretrained(job["model_dir"])
kwargs = {}
if job["texts"]:
    ds = Dataset.from_dict({"text": job["texts"]}).map(
        lambda r: tokenizer(r["text"], truncation=True, max_length=job["seq_len"],
                            add_special_tokens=False), remove_columns=["text"])
    kwargs = dict(dataset=ds, num_calibration_samples=len(job["texts"]),
                  max_seq_length=job["seq_len"], shuffle_calibration_samples=False)
oneshot(model=model, recipe=build_recipe(job), **kwargs)
model.save_pretrained(job["out_dir"], save_compressed=True)
tokenizer.save_pretrained(job["out_dir"])
'''


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - start


def quant_config(config_json: Path) -> dict:
    return json.loads(config_json.read_text())["quantization_config"]


def bare_job(config: Path, candidate: str, out_dir: Path) -> dict:
    cfg = load_config(config)
    cand = cfg.candidate(candidate)
    if cand.recipe is None or cand.recipe == "none":
        sys.exit(f"{candidate}: the benchmark needs a built-in recipe")
    texts = calibration_samples(cfg.calibration, cfg.resolve) if cand.recipe != "fp8-dynamic" \
        else []
    return {**cand.recipe_params(), "model_dir": str(cfg.model.resolved_path(cfg.base_dir)),
            "texts": texts, "seq_len": cfg.calibration.seq_len, "seed": cfg.calibration.seed,
            "out_dir": str(out_dir)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="int4")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "default.yaml")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="wb-qbench-") as tmp_name:
        tmp = Path(tmp_name)
        scratch = link_shared_cache(tmp / "cache")
        env = offline_env({**os.environ, "WORKBENCH_CACHE": str(scratch)})
        (tmp / "bare.py").write_text(BARE)
        job = bare_job(args.config, args.candidate, tmp / "bare-out")
        (tmp / "job.json").write_text(json.dumps(job))
        bare_cmd = [str(quant_python()), str(tmp / "bare.py"), str(tmp / "job.json"),
                    str(REPO / "workbench" / "quantize")]
        wb_cmd = [str(REPO / ".venv" / "bin" / "workbench"), "quantize", "--candidate",
                  args.candidate, "--config", str(args.config), "--runs-dir", str(tmp / "runs")]
        rows = []
        for i in range(args.repeats):
            shutil.rmtree(tmp / "bare-out", ignore_errors=True)
            shutil.rmtree(scratch / "artifacts", ignore_errors=True)  # force a real build
            bare_s = timed(bare_cmd, env, tmp)
            wb_s = timed(wb_cmd, env, tmp)
            manifest = json.loads(next((scratch / "artifacts").glob("*/manifest.json"))
                                  .read_text())
            fid = manifest.get("fidelity") or {}
            rows.append((i + 1, bare_s, wb_s, manifest["oneshot_s"], fid.get("seconds", 0.0),
                         fid.get("baseline_cached")))
            built = next((scratch / "artifacts").glob("*/config.json"))
            same = quant_config(tmp / "bare-out" / "config.json") == quant_config(built)
        print(f"candidate {args.candidate} ({job['recipe']}), model {job['model_dir']}, "
              f"{len(job['texts'])} samples x {job['seq_len']} tokens; same quantization_config "
              f"as bare: {same}")
        print("run  bare_s  workbench_s  overhead  (oneshot_s  perplexity_check_s  "
              "baseline_ppl_cached)")
        for i, bare_s, wb_s, oneshot_s, ppl_s, cached in rows:
            print(f"{i:3d}  {bare_s:6.1f}  {wb_s:11.1f}  {100 * (wb_s - bare_s) / bare_s:+7.1f}%  "
                  f"({oneshot_s:6.1f}  {ppl_s:6.1f}  {cached})")


if __name__ == "__main__":
    main()
