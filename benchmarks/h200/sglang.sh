#!/usr/bin/env bash
# SGLang's first contact with a real GPU (issue 26) on one lent H200, in calls that each end by packing
# into $OUT (the host goes back ~30 s after a call returns, and everything with it). Written and
# rehearsed before the sitting (RIG_REHEARSAL=1: tiny-cpu stands in for the engine); not yet run on a GPU.
#
#   here, once:  bash benchmarks/h200/offline-sglang/build.sh .gpu/sgl-parts   (~3 min, 475 MiB download)
#   call 1: bash benchmarks/h200/sglang.sh first     carry .gpu/sgl-parts/sgl-part1 .gpu/sgl-parts/sgl-part2 .gpu/tools
#   call 2: bash benchmarks/h200/sglang.sh start     carry .gpu/sgl-parts/sgl-part3 .gpu/sgl-parts/sgl-part4
#                                                    .gpu/parts/part-client .gpu/parts/rig-wheels .gpu/tools
#   call 3+: bash benchmarks/h200/sglang.sh wait 540 (no carry)
#
# Two SITEs: SGLang and its pinned transformers 5.12.1 in /tmp/sgl-site (the recipe's native.pythonpath);
# the load client (Locust, from offline-vllm's part-client) and rig's own wheels in /tmp/site. rig runs
# with /tmp/site then /tmp/sgl-site on its path (part-client's pyzmq and pydantic come from sgl-part1).
# `first` installs the first two parts (the installer names the two still missing and exits 4: expected).
# `start` installs the rest, checks that SGLang imports with its pinned transformers, and starts the
# session detached: the GPU test (rig up, prose-c1 / decode-ctx3k / prefill-8k / chat-sharegpt, rig
# down, nothing left running), then, if it passed, `rig compare` gpu_delay off vs on at the default
# design (boot times, c=1 decode, the noise between boots, the known effect), each step logged with its exit.
# Every call but `first` begins with a guard (exit 42: the host was given back, start from call 1).
set -u
cd "$(dirname "$0")/../.." || exit 3
OUT=${OUT:?the device tool sets OUT}
RESULTS=/tmp/rig-results
LOG=/tmp/session.log
SITE=/tmp/sgl-site
MARK=$SITE/.rig-first
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

SESSION="sglang.sh session"
# shellcheck source=benchmarks/h200/calls.sh
source benchmarks/h200/calls.sh

case "${1:-}" in
first)
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,temperature.gpu --format=csv
  ldd --version | head -1  # the image's glibc (offline-sglang README: the serving path needs 2.27)
  bash benchmarks/h200/offline-sglang/install.sh .gpu/sgl-parts $SITE; echo "install exit $? (4 expected: parts 3-4 arrive next)"
  touch "$MARK"
  ;;
start)
  [ -f "$MARK" ] || exit 42
  bash benchmarks/h200/offline-sglang/install.sh .gpu/sgl-parts $SITE || exit 3
  bash .gpu/tools/install.sh .gpu/parts /tmp/site > /tmp/install.log 2>&1 || { cat /tmp/install.log; exit 3; }
  python3 -m pip install -q --no-index --no-deps --disable-pip-version-check --target /tmp/site --upgrade \
    .gpu/parts/rig-wheels/*.whl >> /tmp/install.log 2>&1 || { cat /tmp/install.log; exit 3; }
  PYTHONPATH=$SITE python3 -c "import sglang, transformers; print('sglang', sglang.__version__, 'transformers', transformers.__version__)" || exit 3
  PYTHONPATH=/tmp/site:$SITE:$PWD:$PWD/adapter python3 -c "import locust, re2, pydantic, zmq, rig.cli" || exit 3
  start_session "${2:-480}"
  ;;
wait)
  [ -f "$MARK" ] || exit 42
  wait_done "${2:-540}"
  pack
  ;;
session)
  if [ -n "${RIG_REHEARSAL:-}" ]; then
    rig() { .venv/bin/rig "$@"; }
    RECIPE=tiny-cpu OFF=off:RIG_TOKEN_DELAY_MS=0 ON=on:RIG_TOKEN_DELAY_MS=20
    gpu_test() { echo "(rehearsal: no GPU test)"; }
  else
    export PYTHONPATH=/tmp/site:$SITE:$PWD:$PWD/adapter
    rig() { python3 -m rig "$@"; }
    RECIPE=llama8b-sglang-h200 OFF=off:RIG_GPU_DELAY_US=0 ON=on:RIG_GPU_DELAY_US=${RIG_SESSION_ON_US:-40}
    gpu_test() { RIG_GPU_TEST_RESULTS=$RESULTS/gpu-test timeout -k 5 900 python3 -m pytest -q -s -p no:cacheprovider -m gpu \
                   tests/gpu/test_engines_gpu.py -k sglang; }
  fi
  export RIG_RESULTS_DIR=$RESULTS
  mkdir -p $RESULTS
  step() { echo "=== $(date +%T) $*"; "$@"; local rc=$?; echo "=== $(date +%T) exit $rc"; return $rc; }
  # The GPU test: rig up, four scenarios (their figures for the SGLang-vs-vLLM table), rig down,
  # nothing left running. Only if SGLang served them: the known-effect comparison at the default
  # design (gpu_delay on SGLang's TpModelWorker.forward_batch_generation; ~+1% of the step at 40 us,
  # as on vLLM 2026-12-02), which also gives SGLang's boot times and its noise between boots.
  if step gpu_test; then
    step rig compare "$RECIPE" --arm "$OFF" --arm "$ON"
  else
    echo "the GPU test failed: no comparison (its output above says where SGLang stopped)"
  fi
  echo "SESSION DONE $(date +%T)"
  ;;
*)
  echo "usage: sglang.sh first | start [S] | wait [S] | session" >&2
  exit 2
  ;;
esac
