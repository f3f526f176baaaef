#!/usr/bin/env bash
# Start Kimi-VL Chat: vLLM (its output in llm.log) and the chat UI, kept up until
# Ctrl-C or ./launch.sh stop. Run ./launch.sh --help for the options.
#
# This script only picks the python that runs the launcher (serving/cli.py; the
# processes: serving/supervisor.py): KIMI_APP_PYTHON as is, else .venv's, else the
# system's python3, with which the launcher first makes .venv (serving/envs.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if [[ -n ${KIMI_APP_PYTHON-} ]]; then
  if ! "$KIMI_APP_PYTHON" -c '' 2>/dev/null; then
    echo "launch.sh: KIMI_APP_PYTHON=$KIMI_APP_PYTHON is not a python that runs" >&2
    exit 1
  fi
  exec "$KIMI_APP_PYTHON" -m serving.cli "$@"
fi
if [[ -x .venv/bin/python ]]; then
  exec .venv/bin/python -m serving.cli "$@"
fi
if ! command -v python3 >/dev/null; then
  echo "launch.sh: needs python3 (3.11 or newer, with venv) to set itself up" >&2
  exit 1
fi
exec python3 -m serving.cli "$@"
