#!/usr/bin/env bash
# Set up what the tests need on top of the main job's setup, idempotently: the test-only
# packages (requirements/test.txt) in the engine environment, and, when run as root on
# Debian, Chromium for the test that opens the MLflow UI and PostgreSQL for the tests of a
# shared tracking server (elsewhere those tests are skipped and say why), and Prometheus's
# promtool for the canary rules tests, unpacked from Debian's package into the cache (no
# Prometheus server is installed or started). scripts/test.sh runs this; the main job's
# scripts/setup.sh does not.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache=${WORKBENCH_CACHE:-$home/.cache/quant-workbench}
say() { if [[ -t 1 ]]; then printf '\033[1msetup-tests:\033[0m %s\n' "$*"; else echo "setup-tests: $*"; fi; }

bash "$repo/scripts/setup.sh"
engine="$cache/envs/engine"
marker="$engine/.test-requirements-$(sha256sum "$repo/requirements/test.txt" | cut -c1-12)"
if [[ ! -f "$marker" ]]; then
  say "installing the test requirements (requirements/test.txt) into $engine"
  "$engine/bin/pip" install -q -r "$repo/requirements/test.txt" 2>&1 |
    grep -v "is ignored: it is neither a file nor a directory" || true
  touch "$marker"
fi
if ! command -v chromium >/dev/null && [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
  say "installing Chromium (Debian's package) for the MLflow UI test, once"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
    >"$cache/chromium.log" 2>&1 || say "Chromium not installed (see $cache/chromium.log)"
fi
if ! command -v pg_config >/dev/null && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 \
    && [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
  say "installing PostgreSQL (Debian's package) for the shared tracking server tests, once"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } \
    >"$cache/postgresql.log" 2>&1 || say "PostgreSQL not installed (see $cache/postgresql.log)"
fi
promtool="$cache/tools/promtool"
if [[ ! -x "$promtool" ]] && ! command -v promtool >/dev/null && command -v apt-get >/dev/null; then
  say "unpacking promtool from Debian's prometheus package into $cache/tools, once"
  unpack=$(mktemp -d)
  { { (cd "$unpack" && apt-get download -qq prometheus) \
      || { [[ $(id -u) -eq 0 ]] && apt-get update -qq && (cd "$unpack" && apt-get download -qq prometheus); }; } \
    && dpkg-deb -x "$unpack"/prometheus_*.deb "$unpack/deb" && mkdir -p "$cache/tools" \
    && cp "$unpack/deb/usr/bin/promtool" "$promtool"; } >"$cache/promtool.log" 2>&1 \
    || say "promtool not unpacked (see $cache/promtool.log)"
  rm -rf "$unpack"
fi
