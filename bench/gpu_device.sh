#!/usr/bin/env bash
# Steps run on the device tool's H200 machine for the GPU sweep (see bench/results/README.md).
# The machine is offline: vLLM 0.26.0 with its missing dependencies (/tmp/site) and the
# app's own dependencies for Python 3.12 (/tmp/appsite) travel as one xz-compressed tar
# split into parts of 55 MiB (git-ignored .whl/pN/partNN, one folder per call, appended
# under /tmp/gpu; the machine keeps /tmp only while it stays busy). This checkout's code
# travels with every call.
#
#   bash bench/gpu_device.sh carry                  # append the carried .whl/part* to /tmp/gpu
#   bash bench/gpu_device.sh moe S                  # unpack; vLLM's MoE tuner, S s deadline
#   bash bench/gpu_device.sh wave V1,V2 TAG S       # variants side by side, S s budget
#   bash bench/gpu_device.sh appload S [PAIRS] [WORKERS] [LEVELS]  # launch.sh + the app under load
set -uo pipefail
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
out=${OUT:?OUT is the device tool\'s result folder}
moe_dir=/tmp/moe_configs  # the tuned fused-MoE file, kept between calls

unpack() {
  [[ -f /tmp/site/.unpacked ]] && return 0
  echo "expected $(cat .whl/bundle.sha256)"
  echo "got      $(cat /tmp/gpu/part* | sha256sum)"
  cat /tmp/gpu/part* | xz -d -T0 | tar -x -C /tmp || return 1
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
    cp bench/results/load_gpu_app_load_* "$out/" 2>/dev/null
    command -v haproxy nginx || echo "no haproxy or nginx here"
    ./launch.sh stop >/dev/null 2>&1
    cp llm.log "$out/llm.log"
    ;;
  *) echo "unknown step $1" >&2; exit 2 ;;
esac
