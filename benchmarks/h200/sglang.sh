#!/usr/bin/env bash
# SGLang's first contact with a real GPU (issue 26) on one lent H200, in calls that each end by packing
# into $OUT (the host goes back ~30 s after a call returns, and everything with it). Written and
# rehearsed before the sitting (RIG_REHEARSAL=1: tiny-cpu stands in for the engine); first run on an H200 2026-12-02.
#
#   here, once:  bash benchmarks/h200/offline-sglang/build.sh .gpu/sgl-parts   (~3 min, 475 MiB download)
#   call 1: bash benchmarks/h200/sglang.sh first     carry .gpu/sgl-parts/sgl-part1 .gpu/sgl-parts/sgl-part2 .gpu/tools
#   call 2: bash benchmarks/h200/sglang.sh start     carry .gpu/sgl-parts/sgl-part3 .gpu/sgl-parts/sgl-part4
#                                                    .gpu/parts/part-client .gpu/parts/rig-wheels .gpu/tools
#   call 3+: bash benchmarks/h200/sglang.sh wait 540 (no carry)
#   or, for vLLM's row of the engines' table on the same host and GPU (issue 26 item 6): call 3 is
#     `wait 540` carrying .gpu/parts/part1a (vLLM's part1, first half: `resolution.sh prepare` cut it), and the
#     last is `vllm-row [S]` carrying .gpu/parts/part1b .gpu/tools: it waits up to S s for the session, then
#     installs vLLM 0.24.0 and runs the vLLM GPU test on llama8b-h200 (~250 s with its cold compile), packed
#     apart. Exit 6: not enough of the call was left (the session still ran, or the test would not fit);
#     send `vllm-row` again at once (no carry: the halves wait in /tmp/vllm-parts).
#   last, with ~6 minutes left: bash benchmarks/h200/sglang.sh capacity  carry .gpu/parts/part-aiperf (issue 27's
#     rig-vs-AIPerf table on this host's cores, no GPU: calls.sh's capacity_call; RIG_CAPACITY_BUDGET_S, RIG_CAPACITY_USERS)
#
# Two SITEs: SGLang and its pinned transformers 5.12.1 in /tmp/sgl-site (the recipe's native.pythonpath);
# the load client (Locust, from offline-vllm's part-client) and rig's own wheels in /tmp/site. rig runs
# with /tmp/site then /tmp/sgl-site on its path (part-client's pyzmq and pydantic come from sgl-part1).
# `first` installs the first two parts (the installer names the two still missing and exits 4: expected).
# `start` installs the rest, checks that SGLang imports with its pinned transformers, and starts the
# session detached: the GPU test (rig up, prose-c1 / decode-ctx3k / prefill-8k / decode-c32, rig
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

# The parts `start` and `scoring-check` carry: SGLang's last two, the load client, rig's wheels.
install_rest() {
  bash benchmarks/h200/offline-sglang/install.sh .gpu/sgl-parts $SITE || return 3
  # offline-vllm's installer checks that Locust imports; its pyzmq is in sgl-part1, so SGLang's SITE is on the path
  PYTHONPATH=$SITE bash .gpu/tools/install.sh .gpu/parts /tmp/site > /tmp/install.log 2>&1 || { cat /tmp/install.log; return 3; }
  python3 -m pip install -q --no-index --no-deps --disable-pip-version-check --target /tmp/site --upgrade \
    .gpu/parts/rig-wheels/*.whl >> /tmp/install.log 2>&1 || { cat /tmp/install.log; return 3; }
}

# vLLM 0.24.0 beside SGLang on this host: part1's two halves ride in calls that carry nothing else
# and wait in /tmp/vllm-parts (a carried path is gone in the next call that does not name it).
VPARTS=/tmp/vllm-parts
stash_vllm_half() {
  mkdir -p $VPARTS/part1
  if [ -f .gpu/parts/part1a/core-sm90.half.0 ]; then cp .gpu/parts/part1a/core-sm90.half.0 $VPARTS/ || return 3; fi
  if [ -f .gpu/parts/part1b/core-sm90.half.1 ]; then cp .gpu/parts/part1b/core-sm90.half.1 .gpu/parts/part1b/SHA256SUMS $VPARTS/ || return 3; fi
  return 0
}

# SGLang by hand, without rig (its own failure told from rig's driving of it; the adapters' refusals
# in its own processes): a small generated Llama, the recipe's flags; waits until healthy (at most
# 300 s) and prints the server's process group leader. Extra environment comes from the caller.
HAND_MODEL=/tmp/sgl-diag-model
http_get() {  # URL [JSON body]; no curl assumed on the host: the standard library's urllib
  python3 -c "import sys, urllib.request as u; r = u.urlopen(u.Request(sys.argv[1], data=sys.argv[2].encode() or None,
headers={'content-type': 'application/json'}), timeout=60); print(r.read().decode()[:2000])" "$1" "${2:-}"
}
launch_by_hand() {  # LOG
  local log=$1 pid deadline
  [ -d $HAND_MODEL ] || python3 .gpu/tools/make_model.py $HAND_MODEL > /dev/null || return 3
  PYTHONPATH=${HAND_PYTHONPATH:-$SITE} setsid python3 -m sglang.launch_server --model-path $HAND_MODEL --load-format dummy \
    --attention-backend triton --sampling-backend pytorch --tp-size 1 --host 127.0.0.1 --port 30000 \
    --mem-fraction-static 0.5 --enable-metrics --enable-cache-report > "$log" 2>&1 < /dev/null &
  pid=$!
  deadline=$((SECONDS + 300))
  until http_get http://127.0.0.1:30000/health > /dev/null 2>&1; do
    kill -0 $pid 2>/dev/null || { echo "SGLang exited: $(tail -n 5 "$log")" >&2; echo $pid; return 1; }
    [ $SECONDS -lt $deadline ] || { echo "not healthy in 300 s" >&2; break; }
    sleep 3
  done
  echo $pid
}
stop_by_hand() {  # PID (its process group)
  kill -TERM -- -"$1" 2>/dev/null; sleep 10; kill -KILL -- -"$1" 2>/dev/null
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv
}

case "${1:-}" in
first)
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,temperature.gpu --format=csv
  ldd --version | head -1  # the image's glibc (offline-sglang README: the serving path needs 2.27)
  bash benchmarks/h200/offline-sglang/install.sh .gpu/sgl-parts $SITE; echo "install exit $? (4 expected: parts 3-4 arrive next)"
  touch "$MARK"
  ;;
start)
  [ -f "$MARK" ] || exit 42
  install_rest || exit 3
  PYTHONPATH=$SITE python3 -c "import sglang, transformers; print('sglang', sglang.__version__, 'transformers', transformers.__version__)" || exit 3
  PYTHONPATH=/tmp/site:$SITE:$PWD:$PWD/adapter python3 -c "import locust, re2, pydantic, zmq, rig.cli" || exit 3
  start_session "${2:-480}"
  ;;
scoring-check)  # carry as `start`: the quality probes through real SGLang's /v1/tokenize and /generate, then down
  [ -f "$MARK" ] || exit 42
  install_rest || exit 3
  export PYTHONPATH=/tmp/site:$SITE:$PWD:$PWD/adapter RIG_RESULTS_DIR=$RESULTS RIG_STATE_DIR=/tmp/rig-state
  timeout -k 5 300 python3 -m rig up llama8b-sglang-h200 > /tmp/up.log 2>&1; echo "up exit $?"; tail -n 3 /tmp/up.log
  timeout -k 5 120 python3 - <<'PY'
import json, pathlib
from rig.compare.scoring import check_scoring_tokenizer, collect, probes
from rig.load.session import model_dir_for
from rig.deploy.recipe import load
record = json.loads(next(pathlib.Path("/tmp/rig-state").glob("*.json")).read_text())
check_scoring_tokenizer("sglang", lambda: model_dir_for(load("llama8b-sglang-h200")))
print("tokenizer_config passes the check")
chosen = probes(["prose"])[:4]
quality = collect(record["base_url"], record.get("served_model") or "", "sglang", chosen, 16, None)
for name, score in quality.scores.items():
    generation = quality.generations[name]
    print(name, "prompt ids", len(generation.prompt_ids or []), "output ids", len(generation.output_ids or []),
          "scored logprobs", len(score.logprobs))
PY
  echo "scoring exit $?"
  timeout -k 5 120 python3 -m rig down llama8b-sglang-h200 > /tmp/down.log 2>&1; echo "down exit $?"
  nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l
  grep -n "Traceback" -A3 "$RESULTS"/boots/*/server.log | head -20
  ;;
refusals)  # carry as `start` (~3 min): SGLang by hand with both Blackwell-only gates set, rig's adapters
  # loaded through SGLang's own plugin group (sglang.srt.plugins) in every process that loads plugins:
  # on sm_90 each refuses with its reason in the scheduler's log, and the server serves without them.
  # (rig itself refuses these gates for llama8b-sglang-h200 before a boot: the adapters are scoped
  # to mia-tp4; this is the engine-side refusal the issue asks to see in every scheduler process.)
  [ -f "$MARK" ] || exit 42
  install_rest || exit 3
  mkdir -p $RESULTS/refusals
  # first rig's own flow on a live SGLang boot: up, status, logs, down (nothing left), and the gate refused up front
  (
    export PYTHONPATH=/tmp/site:$SITE:$PWD:$PWD/adapter RIG_RESULTS_DIR=$RESULTS/refusals/rig RIG_STATE_DIR=/tmp/rig-state
    python3 -m rig up llama8b-sglang-h200 --env RIG_MXFP8_B12X=1 2>&1 | tail -n 1; echo "up with the gate: exit ${PIPESTATUS[0]} (2 expected)"
    timeout -k 5 300 python3 -m rig up llama8b-sglang-h200 > /tmp/refusals-up.log 2>&1; echo "up exit $?"; tail -n 1 /tmp/refusals-up.log
    python3 -m rig status; echo "status exit $?"
    python3 -m rig logs llama8b-sglang-h200 > $RESULTS/refusals/rig-logs.txt; echo "logs exit $?: $(wc -l < $RESULTS/refusals/rig-logs.txt) lines"
    timeout -k 5 120 python3 -m rig down llama8b-sglang-h200; echo "down exit $?"
    echo "GPU contexts left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
  ) 2>&1 | tee $RESULTS/refusals/rig-flow.txt
  overlay=$(PYTHONPATH=/tmp/site:$SITE:$PWD python3 -c "from rig import paths; from rig.boot.engine_env import adapter_overlay
print(adapter_overlay(paths.cache_dir()))") || { echo "no adapter overlay (rig.boot.engine_env)"; exit 3; }
  log=$RESULTS/refusals/server.log
  pid=$(HAND_PYTHONPATH=$overlay:$SITE RIG_ENGINE=sglang RIG_MXFP8_B12X=1 DSV41_SHARED_PAD_K=1 \
        RIG_ADAPTER_MANIFEST_DIR=$RESULTS/refusals launch_by_hand "$log")
  echo "launched (group $pid); its processes:"
  ps -o pid,ppid,args -g "$pid" | cut -c1-120 | tee $RESULTS/refusals/processes.txt
  http_get http://127.0.0.1:30000/v1/completions '{"model":"'"$HAND_MODEL"'","prompt":"Hello","max_tokens":8}' | cut -c1-300
  stop_by_hand "$pid"
  echo "--- the adapters' lines, by process (none: no process imported a target module; the manifests say what each process saw):"
  grep -h "rig_adapters\[" "$log" | cut -c1-400 | tee $RESULTS/refusals/adapter-lines.txt
  ls $RESULTS/refusals
  pack
  ;;
wait)
  [ -f "$MARK" ] || exit 42
  stash_vllm_half || exit 3
  wait_done "${2:-540}"
  pack
  ;;
vllm-row)  # after the session, in the call: vLLM's GPU test on llama8b-h200, the same host and GPU as SGLang's
  [ -f "$MARK" ] || exit 42
  deadline=$((SECONDS + ${RIG_VLLM_ROW_BUDGET_S:-560}))  # of the call's 600 s
  stash_vllm_half || exit 3
  wait_done "${2:-300}"
  if ! grep -q "^SESSION DONE" "$LOG" 2>/dev/null && pgrep -f "$SESSION" > /dev/null; then
    echo "!!! the SGLang session still runs: no vLLM yet (send vllm-row again)"; pack; exit 6
  fi
  if [ -n "${RIG_REHEARSAL:-}" ]; then
    PY=.venv/bin/python
  else
    if [ ! -f $VPARTS/part1/core-sm90.tar.xz ]; then
      [ -f $VPARTS/core-sm90.half.0 ] && [ -f $VPARTS/core-sm90.half.1 ] \
        || { echo "!!! part1's halves: $(ls $VPARTS | tr '\n' ' ')(carry part1a in a wait, part1b here)"; pack; exit 3; }
      cat $VPARTS/core-sm90.half.0 $VPARTS/core-sm90.half.1 > $VPARTS/part1/core-sm90.tar.xz && cp $VPARTS/SHA256SUMS $VPARTS/part1/ || exit 3
    fi
    # install.sh checks part1 against its SHA256SUMS (a damaged half is refused) and skips it once installed
    bash .gpu/tools/install.sh $VPARTS /tmp/site > /tmp/vllm-install.log 2>&1 || { tail -5 /tmp/vllm-install.log; pack; exit 3; }
    tail -n 2 /tmp/vllm-install.log
    export PYTHONPATH=/tmp/site:$PWD:$PWD/adapter  # vLLM's path, without SGLang's SITE (env.sh's)
    python3 -c "import vllm, locust, re2, pydantic, rig.cli" || { pack; exit 3; }
    PY=python3
  fi
  left=$((deadline - SECONDS - 40))  # 40 s to pack
  if [ "$left" -lt "${RIG_VLLM_ROW_MIN_S:-220}" ]; then
    echo "!!! ${left} s left in this call; the vLLM row needs ~250 s: send vllm-row again (vLLM stays installed)"; pack; exit 6
  fi
  echo "=== $(date +%T) vLLM GPU test on llama8b-h200 (at most ${left} s)"
  # basetemp and raw results beside SGLang's, not over them (pytest empties its basetemp)
  RIG_GPU_TEST_RESULTS=$RESULTS/gpu-test timeout -k 5 "$left" $PY -m pytest -q -s -rs -p no:cacheprovider -m gpu \
    --basetemp="$RESULTS/pytest-vllm" tests/gpu/test_engines_gpu.py -k "llama8b-h200 and not sglang" > "$RESULTS/vllm-gpu-test.txt" 2>&1
  echo "=== $(date +%T) exit $?"
  tail -n 30 "$RESULTS/vllm-gpu-test.txt"
  pack
  ;;
capacity)  # issue 27 after the session (~4 min, no GPU; carry .gpu/parts/part-aiperf): benchmarks/h200/calls.sh
  [ -f "$MARK" ] || exit 42
  if [ -z "${RIG_REHEARSAL:-}" ]; then
    export PYTHONPATH=/tmp/site:$SITE:$PWD:$PWD/adapter
    python3 -c "import locust, re2, rig.cli" || exit 3
  fi
  capacity_call
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
    # --basetemp inside RESULTS: a failing test's boot log and state come back in the pack too.
    # A skip (the recipe's interpreter does not import SGLang) is a failure here, not a pass.
    gpu_test() {
      RIG_GPU_TEST_RESULTS=$RESULTS/gpu-test timeout -k 5 900 python3 -m pytest -q -s -rs -p no:cacheprovider -m gpu \
        --basetemp="$RESULTS/pytest" tests/gpu/test_engines_gpu.py -k sglang > "$RESULTS/gpu-test.txt" 2>&1
      local rc=$?
      cat "$RESULTS/gpu-test.txt"
      [ $rc -eq 0 ] && grep -q " passed" "$RESULTS/gpu-test.txt" && ! grep -q " skipped" "$RESULTS/gpu-test.txt"
    }
    # rig's adapters against the real 0.5.17 wheel on the real sm_90 GPU: the drift check, and the two
    # Blackwell-only adapters with their gates set, imported as SGLang's scheduler imports their targets.
    adapters_on_the_wheel() {
      python3 -m rig_adapters check-targets sglang
      local gate module
      # every module that holds one of the adapter's targets (2026-12-02 imported only layers.linear
      # for shared_pad_k, whose target there exists: nothing was refused until fp8's was imported)
      local quant=sglang.srt.layers.quantization
      for gate in "RIG_MXFP8_B12X:$quant.fp8_utils" "DSV41_SHARED_PAD_K:sglang.srt.layers.linear,$quant.fp8,$quant.fp8_utils"; do
        module=${gate#*:}; gate=${gate%%:*}
        echo "--- $gate=1, then import $module"
        env RIG_ENGINE=sglang "$gate=1" timeout 120 python3 -c \
          "from rig_adapters.runtime import ARMER, engine_plugin; engine_plugin(); import $module; print('refused:', sorted(ARMER.refused) or 'none')"
        echo "--- exit $?"
      done
    }
    # Only if the GPU test failed: SGLang launched by hand with the recipe's flags on a small generated
    # Llama, without rig, so the pack tells SGLang's own failure from rig's driving of it.
    sglang_by_hand() {
      local pid
      pid=$(launch_by_hand "$RESULTS/sglang-by-hand.log") || return $?
      http_get http://127.0.0.1:30000/v1/completions '{"model":"'"$HAND_MODEL"'","prompt":"Hello","max_tokens":8}'
      http_get http://127.0.0.1:30000/metrics | grep -c '^sglang'
      stop_by_hand "$pid"
    }
  fi
  export RIG_RESULTS_DIR=$RESULTS
  mkdir -p $RESULTS
  step() { echo "=== $(date +%T) $*"; "$@"; local rc=$?; echo "=== $(date +%T) exit $rc"; return $rc; }
  # The GPU test: rig up, four scenarios (their figures for the SGLang-vs-vLLM table), rig down,
  # nothing left running. Only if SGLang served them: the known-effect comparison at the default
  # design (gpu_delay on SGLang's TpModelWorker.forward_batch_generation; ~+1% of the step at 40 us,
  # as on vLLM 2026-12-02), which also gives SGLang's boot times and its noise between boots.
  if [ -z "${RIG_REHEARSAL:-}" ]; then step adapters_on_the_wheel; fi
  if step gpu_test; then
    step rig compare "$RECIPE" --arm "$OFF" --arm "$ON"
  else
    echo "the GPU test failed: no comparison (its output above says where SGLang stopped)"
    if [ -z "${RIG_REHEARSAL:-}" ]; then step sglang_by_hand; fi
  fi
  echo "SESSION DONE $(date +%T)"
  ;;
*)
  echo "usage: sglang.sh first | start [S] | scoring-check | refusals | wait [S] | vllm-row [S] | capacity | session" >&2
  exit 2
  ;;
esac
