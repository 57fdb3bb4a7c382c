#!/usr/bin/env bash
# The resolution session (issue "Resolution on the real engine") on one lent H200, in calls that each
# end by packing into $OUT (the host goes back ~30 s after a call returns, and everything with it).
#
#   call 1: bash benchmarks/h200/resolution.sh first      carry .gpu/parts/part1 .gpu/parts/rig-wheels .gpu/tools
#   call 2: bash benchmarks/h200/resolution.sh start      carry .gpu/parts/part-client
#   call 3+: bash benchmarks/h200/resolution.sh wait 540  (no carry)
#
# `first` installs vLLM (part1) and rig's own wheels, prints gpu_delay's spin check and runs its GPU
# test (torch only). `start` installs the load client and starts the session detached (setsid, so it
# outlives the call), then waits like `wait`. `wait S` waits up to S seconds for the session to end
# and packs what it has so far. Every call but `first` begins with a guard: a host that was given back
# in between has no /tmp/site, and the call exits 42 at once (start again from call 1).
# Rehearse it without a GPU: RIG_REHEARSAL=1 OUT=/tmp/out bash benchmarks/h200/resolution.sh session
# (tiny-cpu and token_delay stand in for llama8b-h200 and gpu_delay; nothing else changes).
set -u
cd "$(dirname "$0")/../.." || exit 3
OUT=${OUT:?the device tool sets OUT}
RESULTS=/tmp/rig-results
LOG=/tmp/session.log
MARK=/tmp/site/.rig-part1

pack() {  # what the session produced so far: at most 8 files of at most 16 MiB come back from $OUT
  rm -f "$OUT"/rig-results.tar.xz*
  tar -C /tmp -cf - --exclude='compile-cache' --exclude='*.pyc' rig-results 2>/dev/null | xz -T0 -6 > /tmp/rig-results.tar.xz
  split -b 15M -d -a 1 /tmp/rig-results.tar.xz "$OUT/rig-results.tar.xz." && rm /tmp/rig-results.tar.xz
  cp "$LOG" /tmp/ps.log "$OUT/" 2>/dev/null
  ls -la "$OUT"
  tail -25 "$LOG" 2>/dev/null
}

wait_done() {  # up to $1 seconds, or until the session wrote its last line
  local deadline=$((SECONDS + $1))
  while [ $SECONDS -lt $deadline ]; do
    grep -q "^SESSION DONE" "$LOG" 2>/dev/null && break
    pgrep -f "resolution.sh session" >/dev/null || { echo "!!! the session is not running"; break; }
    sleep 5
  done
}

case "${1:-}" in
first)
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.sm,temperature.gpu --format=csv
  bash .gpu/tools/install.sh .gpu/parts /tmp/site > /tmp/install.log 2>&1 || { cat /tmp/install.log; exit 3; }
  python3 -m pip install -q --no-index --no-deps --disable-pip-version-check --target /tmp/site --upgrade \
    .gpu/parts/rig-wheels/*.whl >> /tmp/install.log 2>&1 || { cat /tmp/install.log; exit 3; }
  tail -3 /tmp/install.log
  export PYTHONPATH=/tmp/site:$PWD:$PWD/adapter PYTHONUNBUFFERED=1
  python3 -c "import vllm, re2, pydantic; print('vllm', vllm.__version__)" || exit 3
  python3 benchmarks/h200/spin_check.py 2>&1 | tee "$OUT/spin-check.txt"
  python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gpu_delay_gpu.py 2>&1 | tail -3 | tee -a "$OUT/spin-check.txt"
  touch "$MARK"
  ;;
start)
  [ -f "$MARK" ] || exit 42
  source benchmarks/h200/env.sh || exit 3
  setsid nohup bash benchmarks/h200/resolution.sh session > "$LOG" 2>&1 < /dev/null &
  sleep 2
  wait_done "${2:-520}"
  pack
  ;;
wait)
  [ -f "$MARK" ] || exit 42
  wait_done "${2:-540}"
  pack
  ;;
session)
  if [ -n "${RIG_REHEARSAL:-}" ]; then
    export PYTHONUNBUFFERED=1
    rig() { .venv/bin/rig "$@"; }
    RECIPE=tiny-cpu OFF=off:RIG_TOKEN_DELAY_MS=0 ON=on:RIG_TOKEN_DELAY_MS=20
  else
    source benchmarks/h200/env.sh || exit 3
    RECIPE=llama8b-h200 OFF=off:RIG_GPU_DELAY_US=0 ON=on:RIG_GPU_DELAY_US=44
  fi
  export RIG_RESULTS_DIR=$RESULTS
  mkdir -p $RESULTS
  step() { echo "=== $(date +%T) $*"; "$@"; local rc=$?; echo "=== $(date +%T) exit $rc"; return $rc; }
  # Processes and their CPU every 5 s (compile workers alive during a window or not; who uses the CPU).
  ( while sleep 5; do echo "--- $(date +%T)"; ps -eo pid,ppid,pcpu,rss,etimes,comm --sort=-pcpu | head -12; done ) > /tmp/ps.log 2>&1 &
  # 1. The comparison with no design flags: burn-in boot (the machine's first, so its caches are cold),
  #    then 4 ABBA pairs, 2 rounds of 10 s each, prose-c1. gpu_delay at 44 us is +1% of a ~4.4 ms step.
  step rig compare "$RECIPE" --arm "$OFF" --arm "$ON"
  # 2. The cause of the cold-boot deficit: a boot with empty caches of its own, late in the session (the
  #    GPU has long been busy). If it reads as low as the burn-in did, compiling in the boot is the cause,
  #    not the first GPU work on a fresh host.
  if step rig up "$RECIPE" --cold-caches; then  # two loadtests: the first also runs the discarded warmup
    step rig loadtest "$RECIPE" --scenario prose-c1 --duration 10
    step rig loadtest "$RECIPE" --scenario prose-c1 --duration 10
  fi
  step rig down "$RECIPE"
  echo "SESSION DONE $(date +%T)"
  ;;
*)
  echo "usage: resolution.sh first | start [S] | wait [S] | session" >&2
  exit 2
  ;;
esac
