#!/usr/bin/env bash
# Steps run on the device tool's H200 machine for issue 17 (see bench/results/README.md).
# The machine is offline: vLLM 0.26.0 and its missing dependencies travel as one
# xz-compressed site-packages tree split into parts of at most 60 MiB (.whl/p1..p3,
# one folder per call, appended under /tmp/gpu); this repository's code travels in
# .whl/code (copied over the checkout there, which is the lead's tree).
#
#   bash .whl/code/gpu_device.sh seed                 # unpack, Kimi shape, seed checks
#   bash .whl/code/gpu_device.sh wave V1,V2,V3 TAG S  # variants side by side, S s budget
#   bash .whl/code/gpu_device.sh moe S                # vLLM's MoE tuner, S s deadline
set -uo pipefail
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
out=${OUT:?OUT is the device tool\'s result folder}

# Our code over the lead's checkout (tracked files there are re-sent on every call).
cp -r .whl/code/repo/. ./

unpack() {
  [[ -f /tmp/site/.unpacked ]] && return 0
  echo "expected $(cat .whl/code/site.sha256)"
  echo "got      $(cat /tmp/gpu/site.tar.xz.part* | sha256sum)"
  mkdir -p /tmp/site
  if command -v xz >/dev/null; then
    cat /tmp/gpu/site.tar.xz.part* | xz -d -T0 | tar -x -C /tmp/site || return 1
  else
    cat /tmp/gpu/site.tar.xz.part* | python3 -c 'import sys, tarfile
tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz").extractall("/tmp/site", filter="tar")' ||
      return 1
  fi
  python3 -m serving.kimi_shape --out /tmp/kimi-shape --hf-cache "$HOME/.cache/huggingface/hub" &&
    touch /tmp/site/.unpacked
}

case ${1:?step} in
  seed)
    start=$SECONDS
    unpack 2>&1 | tail -n 5
    echo "unpacked in $((SECONDS - start)) s"
    { nvidia-smi; python3 -c 'import vllm, torch; print(vllm.__version__, torch.__version__)'; } \
      >"$out/setup.txt" 2>&1
    python3 -m bench.gpu_sweep seed --out "$out" --budget-s "${2:-420}" 2>&1 | tail -n 40
    cp llm.log "$out/llm.log"
    ;;
  wave)
    python3 -m bench.gpu_sweep wave "$2" --tag "$3" --out "$out" --kv-bytes 7G \
      --budget-s "${4:-330}" 2>&1 | tail -n 40
    ;;
  moe)
    python3 -m bench.moe_tune --tuner .whl/code/upstream/benchmark_moe.py \
      --save-dir serving/moe_configs --deadline-s "${2:-170}" --out "$out/moe_tune.json" \
      >"$out/moe_tune.log" 2>&1
    tail -n 25 "$out/moe_tune.log"
    cp serving/moe_configs/E=64,N=1408,device_name=NVIDIA_H200.json "$out/moe_config_h200.json"
    ;;
  *) echo "unknown step $1" >&2; exit 2 ;;
esac
