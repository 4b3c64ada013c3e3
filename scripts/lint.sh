#!/usr/bin/env bash
# The code's own checks, as CI runs them: ruff (style and likely bugs), mypy (types: a dict
# where a dataclass or TypedDict is meant is an error) and import-linter (the layer
# contract in pyproject.toml: stages import only downward; docs/architecture.md).
# Uses the engine environment that scripts/setup.sh builds (the tools come from
# requirements/test.txt, installed by scripts/setup-tests.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-tests.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
bin=.venv/bin
echo "lint: ruff"; "$bin/ruff" check workbench tests benchmarks scripts
echo "lint: mypy"; "$bin/mypy"
echo "lint: import-linter"
out=$("$bin/lint-imports" --no-cache) || { echo "$out"; exit 1; }
echo "$out" | tail -n 1
