#!/usr/bin/env bash
# The GPU check in one call (issue 35): what a lent CUDA machine can tell us, in ~10 minutes,
# without vLLM, a package index or more than 64 MiB of files besides the working tree.
#
#   bash scripts/gpu_check.sh prepare    # here, with the registry: .gpu/ (wheels, tokenizer)
#   bash scripts/gpu_check.sh            # there, .gpu carried: everything under $OUT
#   bash scripts/gpu_check.sh --dry-run  # here, on the CPU: the same steps, widths / 16
#
# Parts, each recorded in $OUT/parts/<part>.json and gathered into $OUT/summary.{json,txt}
# (ran / failed / skipped, seconds, figures; scripts/gpu_summary.py):
#   environment  the carried wheels unpacked offline into $GPU_CHECK_SITE, put first on
#                PYTHONPATH (only those whose version the machine lacks; gpu_wheels.py)
#   probe        nvidia-smi -L / -q / CSV queries, NVML, torch.cuda, and the workbench's own
#                visible_gpus() and process_memory_bytes() against them (gpu_probe.py)
#   quantise     the quantize worker on random-weight Llama 8B (4 layers: w4a16 g128,
#                w8a8-int8, fp8-dynamic, kv-fp8) and 70B (2 layers: w4a16 g128) shapes;
#                accelerator used, time per layer, peak memory, baseline perplexity on the
#                device vs the CPU, reloaded checkpoint vs fake-quantised (gpu_quantize.py)
#   kernels      the expected vLLM kernel per layer and tensor-parallel size (gpu_kernels.py)
#   main-job     where vLLM is importable: `workbench evaluate --candidate int4` (gpu.yaml)
#   tp2          where two GPUs answer: tensor parallel 2 through transformers (gpu_tp_check.py)
# Exit 0 only when no part failed. PYTHON picks the interpreter (default python3; the dry run
# uses the quantiser environment's), GPU_CHECK_WORK the folder for models and checkpoints
# (several GB on a GPU, outside $OUT so that only figures come back).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CACHE=${WORKBENCH_CACHE:-$HOME/.cache/quant-workbench}
DEFAULT_MODEL=$CACHE/models/SmolLM2-135M-Instruct
LIMIT_MIB=64
# What llm-compressor 0.14 imports that such a machine may lack (it has torch, transformers,
# accelerate, pandas, pyarrow, xxhash, nvidia-ml-py): the versions of the quantiser
# environment (requirements/quant.txt) it was tested with. Each is unpacked there only when
# that exact version is missing, so carrying one too many costs nothing but its size.
PINS=(llmcompressor==0.14.0.1 compressed-tensors==0.19.0 loguru==0.7.3 datasets==5.2.0
      dill==0.4.1 multiprocess==0.70.19 pydantic==2.14.4 pydantic_core==2.50.5
      annotated-types==0.8.0 typing-inspection==0.4.5 accelerate==1.16.0 requests==2.34.2
      urllib3==2.8.0 charset-normalizer==3.5.3 idna==3.20 certifi==2026.10.19.post1
      pillow==13.0.0)
SHAPE_FILES=(config.json generation_config.json tokenizer.json tokenizer_config.json
             special_tokens_map.json chat_template.jinja)

prepare() {
  local py=${PYTHON:-python3} f
  rm -rf .gpu/wheels && mkdir -p .gpu/wheels .gpu/model-shape
  # for the machine's Python 3.12 on x86-64 Linux, whatever this one is
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/wheels \
    "${PINS[@]}" || { echo "prepare: FAILED: pip download (see above)" >&2; return 1; }
  [ -f "$DEFAULT_MODEL/config.json" ] ||
    { echo "prepare: FAILED: no default model at $DEFAULT_MODEL: run scripts/setup.sh" >&2; return 1; }
  for f in "${SHAPE_FILES[@]}"; do  # its tokenizer and config; its weights are not needed
    [ -f "$DEFAULT_MODEL/$f" ] && cp "$DEFAULT_MODEL/$f" .gpu/model-shape/
  done
  ls -s --block-size=K .gpu/wheels | tail -n +2
  "$py" scripts/gpu_wheels.py size .gpu "$LIMIT_MIB" ||
    { echo "prepare: FAILED: .gpu exceeds the $LIMIT_MIB MiB the GPU machine takes" >&2; return 1; }
}

case "${1:-}" in
  prepare) prepare; exit $? ;;
  --dry-run) MODE=dry-run ;;
  "") MODE=gpu ;;
  *) echo "usage: bash scripts/gpu_check.sh [prepare | --dry-run]" >&2; exit 2 ;;
esac

OUT=${OUT:-$REPO/gpu-check}
WORK=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/gpu-check-work}
SITE=${GPU_CHECK_SITE:-${TMPDIR:-/tmp}/gpu-check-site}
if [ "$MODE" = dry-run ]; then
  PY=${PYTHON:-$CACHE/envs/quant/bin/python}
  TOKENIZER=.gpu/model-shape; [ -f "$TOKENIZER/tokenizer.json" ] || TOKENIZER=$DEFAULT_MODEL
  QUANT_BUDGET_S=${GPU_CHECK_QUANT_S:-1200}
else
  PY=${PYTHON:-python3}
  TOKENIZER=.gpu/model-shape
  QUANT_BUDGET_S=${GPU_CHECK_QUANT_S:-420}   # of the ~10 minutes the machine is lent for
fi
command -v "$PY" >/dev/null || { echo "gpu_check: no Python at $PY (set PYTHON)" >&2; exit 2; }
# nothing may reach a network: the machine has none, and a try costs a timeout
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
rm -rf "$OUT/parts" "$OUT/logs" "$OUT/quantise" "$OUT/probe"
mkdir -p "$OUT/logs"
STARTED=$SECONDS

mark() { "$PY" scripts/gpu_summary.py mark "$OUT" "$@"; }
status_of() {
  "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["status"])' \
    "$OUT/parts/$1.json" 2>/dev/null || echo missing
}

# part NAME LIMIT_S CMD...: a helper that writes its own record; a crash or a timeout
# before it did is recorded here as a failure.
part() {
  local name=$1 limit=$2 t0=$SECONDS rc; shift 2
  echo "[gpu_check] $name ..."
  timeout --kill-after=10 "$limit" "$@" > "$OUT/logs/$name.log" 2>&1
  rc=$?
  if [ ! -f "$OUT/parts/$name.json" ]; then
    local why="exit $rc"; [ "$rc" -eq 124 ] && why="timed out after $limit s"
    mark "$name" failed $((SECONDS - t0)) "$why before writing its record: $(tail -n 1 "$OUT/logs/$name.log")"
  fi
  echo "[gpu_check] $name: $(status_of "$name") ($((SECONDS - t0)) s)"
}

# ran NAME T0 RC DETAIL: a part the shell runs itself, recorded from its exit code
ran() { local st=failed; [ "$3" -eq 0 ] && st=ran; mark "$1" "$st" $((SECONDS - $2)) "exit $3; $4"; }

part environment 300 "$PY" scripts/gpu_wheels.py install .gpu/wheels "$SITE" "$OUT"
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
part probe 180 "$PY" scripts/gpu_probe.py "$OUT" "$MODE"

if [ "$MODE" = gpu ] && ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  mark quantise skipped 0 "no CUDA device answers torch (the --dry-run runs this part on the CPU)"
elif [ "$(status_of environment)" != ran ]; then
  mark quantise skipped 0 "llm-compressor is not importable (the environment part failed)"
else
  part quantise $((QUANT_BUDGET_S + 120)) "$PY" scripts/gpu_quantize.py "$OUT" "$MODE" \
    "$TOKENIZER" "$WORK" "$QUANT_BUDGET_S"
fi
part kernels 120 "$PY" scripts/gpu_kernels.py "$OUT" "$MODE"

if [ "$MODE" = dry-run ]; then
  mark main-job skipped 0 "dry run: vLLM's main job on the CPU is the integration tests' part"
elif "$PY" -c 'import vllm' 2>/dev/null && [ -x .venv/bin/workbench ]; then
  t0=$SECONDS
  .venv/bin/workbench evaluate --config configs/gpu.yaml --candidate int4 \
    --runs-dir "$OUT/runs" > "$OUT/logs/main-job.log" 2>&1
  rc=$?; [ "$rc" -eq 1 ] && rc=0   # 1: reject or inconclusive, a verdict all the same
  ran main-job "$t0" "$rc" "workbench evaluate --candidate int4; decision in runs/"
else
  mark main-job skipped 0 "vLLM is not importable by $PY (or no .venv/bin/workbench)"
fi

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -ge 2 ]; then
  t0=$SECONDS
  timeout 300 "$PY" -m torch.distributed.run --nproc-per-node 2 scripts/gpu_tp_check.py \
    --out "$OUT" > "$OUT/logs/tp2.log" 2>&1
  ran tp2 "$t0" $? "figures in tp2.json"
else
  mark tp2 skipped 0 "${gpus:-0} GPU(s) answer nvidia-smi -L; tensor parallel 2 needs two"
fi

echo "[gpu_check] done in $((SECONDS - STARTED)) s; $OUT/summary.txt:"
"$PY" scripts/gpu_summary.py write "$OUT" "$MODE"
