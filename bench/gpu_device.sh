#!/usr/bin/env bash
# Steps run on the device tool's H200 machine for the GPU sweep (see docs/gpu.md).
# The machine is offline: vLLM 0.26.0 with its missing dependencies (/tmp/site) and the
# app's own dependencies for Python 3.12 (/tmp/appsite) travel as one xz-compressed tar
# split into parts of 55 MiB (or, for issue 53's room steps, zstd-compressed with the zstd
# binary and Debian's haproxy carried in .whl/haproxy) (git-ignored .whl/pN/partNN, one folder per call, appended
# under /tmp/gpu; the machine keeps /tmp only while it stays busy). This checkout's code
# travels with every call.
#
#   bash bench/gpu_device.sh carry                  # append the carried .whl/part* to /tmp/gpu
#   bash bench/gpu_device.sh moe S                  # unpack; vLLM's MoE tuner, S s deadline
#   bash bench/gpu_device.sh wave V1,V2 TAG S       # variants side by side, S s budget
#   bash bench/gpu_device.sh appload S [PAIRS] [WORKERS] [LEVELS]  # launch.sh + the app under load
#   bash bench/gpu_device.sh room-up                # plain ./launch.sh: status, a photo question, kill -9 of vLLM
#   bash bench/gpu_device.sh room-load PAIRS        # the default launch and one process under load; stop
set -uo pipefail
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
out=${OUT:?OUT is the device tool\'s result folder}
moe_dir=/tmp/moe_configs  # the tuned fused-MoE file, kept between calls

unpack() {
  [[ -f /tmp/site/.unpacked ]] && return 0
  local sums=.whl/bundle.sha256 decompress=(xz -d -T0)
  if [[ -x .whl/haproxy/bin/zstd ]]; then  # issue 53's bundle: zstd (carried) is 4x faster to pack
    sums=.whl/haproxy/bundle.sha256 decompress=(.whl/haproxy/bin/zstd -d -q)
  fi
  echo "expected $(cat "$sums")"
  echo "got      $(cat /tmp/gpu/part* | sha256sum)"
  cat /tmp/gpu/part* | "${decompress[@]}" | tar -x -C /tmp || return 1
  python3 -m serving.kimi_shape --out /tmp/kimi-shape --hf-cache "$HOME/.cache/huggingface/hub" &&
    touch /tmp/site/.unpacked
}

use_tuned_moe() {  # a file tuned in this lease replaces the repository's serving/moe_configs
  [[ -d $moe_dir ]] && cp "$moe_dir"/*.json serving/moe_configs/
  return 0
}

case ${1:?step} in
  carry)
    mkdir -p /tmp/gpu && cp .whl/p*/part* /tmp/gpu/ && ls -la /tmp/gpu
    ;;
  moe)
    start=$SECONDS
    unpack 2>&1 | tail -n 5
    echo "unpacked in $((SECONDS - start)) s"
    nvidia-smi >"$out/setup.txt" 2>&1
    VLLM_MOE_TUNE_CACHE_CLEAR_INTERVAL=0 python3 -m bench.moe_tune --tuner .whl/upstream/benchmark_moe.py --save-dir "$moe_dir" \
      --deadline-s "${2:-450}" --out "$out/moe_tune.json" >"$out/moe_tune.log" 2>&1
    tail -n 25 "$out/moe_tune.log"
    cp "$moe_dir"/*.json "$out/"
    ;;
  wave)
    unpack 2>&1 | tail -n 3
    use_tuned_moe
    PYTHONPATH=/tmp/site:/tmp/appsite python3 -m bench.gpu_sweep wave "$2" --tag "$3" --out "$out" --kv-bytes 7G \
      --budget-s "${4:-330}" 2>&1 | tail -n 40
    ;;
  appload)
    unpack 2>&1 | tail -n 3
    use_tuned_moe
    start=$SECONDS
    export PYTHONPATH=/tmp/site:/tmp/appsite  # launch.sh's own Python needs the app's packages
    KIMI_VLLM_PYTHON=python3 KIMI_APP_PYTHON=python3 KIMI_VLLM_EXTRA_ARGS='--load-format dummy' \
      setsid ./launch.sh --server-only --tp 1 >"$out/launch.log" 2>&1 </dev/null &
    launcher=$!
    port=8100  # launch.sh's KIMI_VLLM_PORT
    until curl -sf -m 2 -o /dev/null "http://127.0.0.1:$port/health"; do
      kill -0 "$launcher" 2>/dev/null || { tail -n 20 "$out/launch.log"; exit 1; }
      ((SECONDS - start > 400)) && { tail -n 30 llm.log; exit 1; }
      sleep 2
    done
    echo "healthy after $((SECONDS - start)) s"
    set -a && . ./.env && set +a
    grep -m1 -o "Using [^ ]* MoE config[^.]*\|Using configuration from [^ ]* for MoE layer" llm.log
    PYTHONPATH=/tmp/appsite:/tmp/site timeout "$((${2:-540} - SECONDS + start))" python3 -m bench.bench_load sweep \
      --server "http://127.0.0.1:$port/v1" --levels ${5:-8 32 64} --kinds photo --pairs "${3:-30}" \
      --app-workers "${4:-1}" --tokens 512 --no-plot --name "gpu_app_load_${4:-1}" \
      --app-log "$out/app.log" 2>&1 | tail -n 14
    cp artifacts/bench/load_gpu_app_load_* "$out/" 2>/dev/null
    command -v haproxy nginx || echo "no haproxy or nginx here"
    ./launch.sh stop >/dev/null 2>&1
    cp llm.log "$out/llm.log"
    ;;
  room-up)  # issue 53: the default launch (HAProxy carried in .whl/haproxy), left running
    unpack 2>&1 | tail -n 3
    start=$SECONDS
    export PYTHONPATH=/tmp/site:/tmp/appsite PATH=$PWD/.whl/haproxy/bin:$PATH KIMI_APP_PYTHON=python3
    nproc && command -v haproxy
    KIMI_VLLM_PYTHON=python3 KIMI_APP_PYTHON=python3 KIMI_VLLM_EXTRA_ARGS='--load-format dummy' \
      setsid ./launch.sh >"$out/launch.log" 2>&1 </dev/null &
    until curl -sf -m 2 -o /dev/null http://127.0.0.1:8300/; do
      ((SECONDS - start > 420)) && { tail -n 30 "$out/launch.log"; exit 1; }
      sleep 2
    done
    echo "UI healthy after $((SECONDS - start)) s"
    grep -v "^  " "$out/launch.log" | head -n 20
    ./launch.sh status 2>&1 | tee "$out/status-up.txt"
    PYTHONPATH=/tmp/appsite:/tmp/site python3 -m bench.gpu_room ask http://127.0.0.1:8300
    victim=$(pgrep -o -f "vllm_main.py serve")
    echo "kill -9 vLLM pid $victim at $((SECONDS - start)) s"
    kill -9 "$victim"
    gone=$SECONDS
    sleep 5
    until curl -sf -m 2 -o /dev/null http://127.0.0.1:8100/health; do
      ((SECONDS - start > 560)) && { tail -n 20 "$out/launch.log"; exit 1; }
      sleep 2
    done
    echo "vLLM healthy again $((SECONDS - gone)) s after kill -9"
    PYTHONPATH=/tmp/appsite:/tmp/site python3 -m bench.gpu_room ask http://127.0.0.1:8300
    ./launch.sh status 2>&1 | tee "$out/status-recovered.txt"
    cp llm.log "$out/llm.log"
    ;;
  room-load)  # issue 53: 8/32/64 photo chats: the default launch (HAProxy), then one process
    export PYTHONPATH=/tmp/appsite:/tmp/site PATH=$PWD/.whl/haproxy/bin:$PATH KIMI_APP_PYTHON=python3
    ./launch.sh status 2>&1 | tee "$out/status-before-load.txt"
    curl -sf -m 5 -o /dev/null http://127.0.0.1:8300/ || { echo "the launch is not up"; exit 1; }
    set -a && . ./.env && set +a
    for how in default one; do
      [[ $how == default ]] && where=(--app-url http://127.0.0.1:8300) || where=(--app-workers 1)
      timeout 270 python3 -m bench.bench_load sweep --server http://127.0.0.1:8100/v1 "${where[@]}" \
        --levels 8 32 64 --kinds photo --pairs "${2:-8}" --tokens 512 --no-plot \
        --name "gpu_room_$how" 2>&1 | tail -n 8
      cp artifacts/bench/load_gpu_room_"$how".* "$out/" 2>/dev/null
    done
    ./launch.sh stop 2>&1 | tail -n 3
    sleep 2
    ./launch.sh status 2>&1 | tail -n 3
    pgrep -af "vllm_main|ui_main|haproxy" || echo "nothing left running"
    ;;
  *) echo "unknown step $1" >&2; exit 2 ;;
esac
