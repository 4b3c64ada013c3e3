#!/usr/bin/env bash
# Everything a CUDA machine can check, in one call; figures go to $OUT (default ./gpu-check).
#
#   bash scripts/gpu_check.sh prepare   # here, with registry access: fills .gpu/ to carry
#   bash scripts/gpu_check.sh           # there: runs what the machine can run
#
# With vLLM importable (a GPU host set up by scripts/setup.sh, or one with vLLM installed):
#   the main job (`workbench evaluate --candidate int4`, configs/gpu.yaml) and the load
#   sweep (benchmarks/load_sweep.py: baseline, int4, fp8, kv-fp8) on the default model.
# Without vLLM (too large to bring to some GPU hosts): every candidate quantised on the GPU
#   through the workbench's quantise stage, and fidelity to the baseline through
#   transformers (scripts/gpu_engine_free.py). It needs llm-compressor and a few small
#   wheels, which `prepare` puts in .gpu/wheels with the default model's config and
#   tokenizer (its weights do not fit what such a machine is sent; random weights of the
#   same shapes stand in, and MODEL_DIR=/path/to/model uses real ones).
# Where two GPUs answer (part C, after A or B): tensor parallel 2. With vLLM, the main job
#   again with engine.tensor_parallel_size 2, and `validate` of an engine larger than the
#   host (exit 2, naming both numbers); without it, the model sharded over both GPUs by
#   transformers' tensor-parallel plan under torchrun (scripts/gpu_tp_check.py), its
#   logits compared with one GPU's.
# summary.txt in $OUT says which parts ran and how each ended. CONFIG picks another config,
# CANDIDATES (part B) a subset; GPU_CHECK_PART=A|B|C and GPU_CHECK_ALLOW_CPU=1 test the
# script on a machine without a GPU (C: part C alone, through torch.distributed's gloo).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-$REPO/gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
say() { echo "[gpu_check] $*" | tee -a "$OUT/summary.txt"; }

prepare() {
  # The wheels the machine lacks, for its Python 3.12 (versions as in requirements/quant.txt).
  local wheels=.gpu/wheels shape=.gpu/model-shape model
  mkdir -p "$wheels" "$shape"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$wheels" \
    llmcompressor==0.14.0.1 compressed-tensors==0.19.0 loguru==0.7.3 datasets==5.2.0 \
    dill==0.4.1 multiprocess==0.70.19 pydantic==2.14.4 pydantic_core==2.50.5 \
    annotated-types==0.8.0 typing-inspection==0.4.5 accelerate==1.15.0 || return 1
  model=${WORKBENCH_CACHE:-$HOME/.cache/quant-workbench}/models/SmolLM2-135M-Instruct
  [ -f "$model/config.json" ] || { echo "no default model at $model: run scripts/setup.sh"; return 1; }
  cp "$model"/{config.json,generation_config.json,tokenizer.json,tokenizer_config.json,chat_template.jinja} "$shape"/
  du -sh .gpu
}

if [ "${1:-}" = prepare ]; then prepare; exit $?; fi

: > "$OUT/summary.txt"
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  if [ "${GPU_CHECK_ALLOW_CPU:-0}" != 1 ]; then
    say "no CUDA device visible to $PY: nothing run (GPU_CHECK_ALLOW_CPU=1 runs the path on the CPU)"
    exit 1
  fi
  say "no CUDA device: running on the CPU because GPU_CHECK_ALLOW_CPU=1 (a test of the script)"
fi
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
started=$(date +%s)
status=0

have_vllm() {
  "$PY" -c 'import vllm' 2>/dev/null \
    || [ -x "${WORKBENCH_CACHE:-$HOME/.cache/quant-workbench}/envs/engine/bin/python" ]
}
PART=${GPU_CHECK_PART:-auto}   # A, B or C (part C alone) to choose, for a test of the script
if [ "$PART" = C ]; then
  say "part C only (GPU_CHECK_PART=C)"
elif [ "$PART" = A ] || { [ "$PART" = auto ] && have_vllm; }; then
  say "vLLM found: part A, the main job and the load sweep on the default model"
  WB=${WORKBENCH:-$REPO/.venv/bin/workbench}
  if [ ! -x "$WB" ]; then
    say "no workbench at $WB: run scripts/setup.sh on this host first; part A not run"
    exit 1
  fi
  if "$PY" -c 'import vllm' 2>/dev/null; then export WORKBENCH_ENGINE_PYTHON=${WORKBENCH_ENGINE_PYTHON:-$(command -v "$PY")}; fi
  t0=$(date +%s)
  "$WB" evaluate --config "${CONFIG:-configs/gpu.yaml}" --candidate int4 --runs-dir "$OUT/runs" > "$OUT/main_job.log" 2>&1
  rc=$?
  say "main job: exit $rc ($(( $(date +%s) - t0 )) s; 0 promote, 1 reject/inconclusive, 2 input, 3 infrastructure)"
  cp "$OUT"/runs/*/decision.md "$OUT/decision.md" 2>/dev/null
  [ "$rc" -le 1 ] || status=1
  t0=$(date +%s)
  "$REPO/.venv/bin/python" benchmarks/load_sweep.py --config "${CONFIG:-configs/gpu.yaml}" \
    --candidates int4,fp8,kv-fp8 --out "$OUT/sweep" > "$OUT/load_sweep.md" 2> "$OUT/load_sweep.log"
  rc=$?
  say "load sweep: exit $rc ($(( $(date +%s) - t0 )) s), tables in load_sweep.md"
  [ "$rc" -eq 0 ] || status=1
else
  say "no vLLM: part B, every candidate quantised on this device and checked through transformers"
  if ! "$PY" -c 'import llmcompressor, pydantic' 2>/dev/null && [ -d .gpu/wheels ]; then
    # into the interpreter's own environment when it can be written, so that the
    # workbench reads the library versions from it; else beside it
    if ! "$PY" -m pip install -q --no-index --no-deps --no-compile .gpu/wheels/*.whl 2> "$OUT/pip.log"; then
      "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/wheels/*.whl >> "$OUT/pip.log" 2>&1
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
  fi
  if ! "$PY" -c 'import llmcompressor, pydantic' 2>> "$OUT/pip.log"; then
    say "llm-compressor is not importable by $PY (run 'bash scripts/gpu_check.sh prepare' here and carry .gpu): part B not run"
    exit 1
  fi
  export WORKBENCH_QUANT_PYTHON=${WORKBENCH_QUANT_PYTHON:-$(command -v "$PY")}
  export WORKBENCH_CACHE=${WORKBENCH_CACHE:-/tmp/wb-gpu-cache}
  t0=$(date +%s)
  PYTHONUNBUFFERED=1 "$PY" scripts/gpu_engine_free.py --config "${CONFIG:-configs/gpu.yaml}" \
    --out "$OUT" ${MODEL_DIR:+--model "$MODEL_DIR"} ${CANDIDATES:+--candidates "$CANDIDATES"} \
    2>&1 | tee "$OUT/engine_free.log" | grep '^\[gpu_engine_free\]'
  rc=${PIPESTATUS[0]}
  say "quantise + engine-free fidelity: exit $rc ($(( $(date +%s) - t0 )) s), figures in engine_free.json"
  [ "$rc" -eq 0 ] || status=1
fi

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${gpus:-0}" -ge 2 ] || [ "$PART" = C ]; then
  say "$gpus GPUs answer: part C, tensor parallel 2"
  if [ "$PART" = A ] || { [ "$PART" = auto ] && have_vllm; }; then
    tp_config="$OUT/gpu-tp2.yaml"
    "$REPO/.venv/bin/python" - "${CONFIG:-configs/gpu.yaml}" "$tp_config" "$((gpus + 1))" <<'PY'
import sys, yaml
from pathlib import Path
src, dst, too_many = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
cfg = yaml.safe_load(src.read_text())
for key in ("gates",):  # paths stay relative to the original config's folder
    cfg[key] = str((src.parent / cfg[key]).resolve())
cfg["calibration"]["files"] = [str((src.parent / f).resolve()) if (src.parent / f).exists()
                               else f for f in cfg["calibration"]["files"]]
cfg.setdefault("engine", {})["tensor_parallel_size"] = 2
dst.write_text(yaml.safe_dump(cfg))
cfg["engine"]["tensor_parallel_size"] = too_many
dst.with_name("gpu-too-many.yaml").write_text(yaml.safe_dump(cfg))
PY
    "$WB" validate --config "$OUT/gpu-too-many.yaml" --candidate int4 > "$OUT/validate_too_many.log" 2>&1
    rc=$?
    say "validate with tensor_parallel_size $((gpus + 1)) on $gpus GPUs: exit $rc (2 expected): $(tail -n 1 "$OUT/validate_too_many.log")"
    [ "$rc" -eq 2 ] || status=1
    t0=$(date +%s)
    "$WB" evaluate --config "$tp_config" --candidate int4 --runs-dir "$OUT/runs-tp2" > "$OUT/main_job_tp2.log" 2>&1
    rc=$?
    say "main job with tensor parallel 2: exit $rc ($(( $(date +%s) - t0 )) s)"
    cp "$OUT"/runs-tp2/*/decision.md "$OUT/decision-tp2.md" 2>/dev/null
    [ "$rc" -le 1 ] || status=1
  else
    t0=$(date +%s)
    "$PY" -m torch.distributed.run --nproc-per-node 2 scripts/gpu_tp_check.py --out "$OUT" \
      ${MODEL_DIR:+--model "$MODEL_DIR"} > "$OUT/tp2.log" 2>&1
    rc=$?
    say "tensor parallel 2 through transformers: exit $rc ($(( $(date +%s) - t0 )) s), figures in tp2.json"
    [ "$rc" -eq 0 ] || status=1
  fi
else
  say "part C (tensor parallel 2) not run: ${gpus:-0} GPU(s) answer nvidia-smi -L"
fi
say "done in $(( $(date +%s) - started )) s, status $status"
exit $status
