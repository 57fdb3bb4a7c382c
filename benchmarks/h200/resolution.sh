#!/usr/bin/env bash
# The resolution session (issue "Resolution on the real engine") on one lent H200, in calls that each
# end by packing into $OUT (the host goes back ~30 s after a call returns, and everything with it).
#
#   here, once:  bash benchmarks/h200/resolution.sh prepare   (part1 in two halves: see below)
#   call 1: bash benchmarks/h200/resolution.sh first      carry .gpu/parts/part1a .gpu/tools
#   call 2: bash benchmarks/h200/resolution.sh start      carry .gpu/parts/part1b .gpu/parts/part-client .gpu/parts/rig-wheels .gpu/tools
#   call 3+: bash benchmarks/h200/resolution.sh wait 540  (no carry)
#   or, for a sitting without a comparison (issue 27: c3000, capacity, gputest), call 2 is
#     bash benchmarks/h200/resolution.sh install  (carry as start: vLLM and the client, and the lag probe's benchmark)
#   last, if the budget has ~4 minutes left: bash benchmarks/h200/resolution.sh gputest
#     or (~8 minutes with RIG_C3000_DURATION=120) bash benchmarks/h200/resolution.sh c3000 [S]: rig's c3000 on real
#       vLLM (issue 27; RIG_C3000_RECIPE=llama8b-h200:frontends4 for four API server processes)
#     or (~4 minutes, no GPU) bash benchmarks/h200/resolution.sh capacity  carry .gpu/parts/part-aiperf: rig's client
#       and AIPerf side by side at 1000 and 3000 streams on this host's cores (issue 27; benchmarks/h200/aiperf-part.sh)
#     or (~4 minutes, at most ~8) bash benchmarks/h200/resolution.sh bimodal: the within-boot bimodality experiment on
#     llama-h200 (issue 25 item 4: API server and EngineCore pinned apart; benchmarks/h200/bimodal.py)
#
# part1 (52 MiB) and the tree (12 MiB, counted as the transfer counts it: a 512-byte header and
# padding per file) no longer fit one 64 MiB transfer, so `prepare` cuts part1's archive in two
# halves that travel in calls 1 and 2 and are joined (and checked against part1's SHA256SUMS) on
# the host. `first` keeps the first half and runs gpu_delay's spin check (torch only). `start` joins
# part1, installs vLLM, the load client and rig's own wheels, runs gpu_delay's GPU test, with
# RIG_CLIENT_CAPACITY=1 measures the client's capacity at 3000 streams on this host's cores (issue
# 27; no GPU, before any engine runs; at most 120 s, its output to a file: a pipe stayed open behind
# the load generator's processes once and cost a whole call), and starts the session detached
# (setsid, so it outlives the call), then waits like `wait`: `start`'s wait plus its ~200 s of set-up must stay under the
# 600 s a call may run. `wait S` waits up to S seconds for the session to end and packs what it has
# so far. `gputest` runs rig's real-vLLM GPU test (TP1) in the call. Every call but `first` begins
# with a guard: a host that was given back in between has no /tmp/parts, and the call exits 42 at
# once (start again from call 1).
# The arm under test: RIG_SESSION_ON_US (default 24 us of spin, for ~+0.5% of the ~4.35 ms step: on
# 2026-12-01 evening a 14 us spin added 12.3-14.2 us to vLLM's step by gpu_delay's in-place measure,
# +11.0 us per token by the comparison; on 2026-12-01 night 24 us added +26.4 us, +0.60%: a +1% arm
# is RIG_SESSION_ON_US=44). RIG_SESSION_ARMS: other arms (see `session`). RIG_SESSION_FLAGS: extra
# `rig compare` flags (design ones only when the budget forces them; say so).
# Rehearse it without a GPU: RIG_REHEARSAL=1 OUT=/tmp/out bash benchmarks/h200/resolution.sh session
# (tiny-cpu and token_delay stand in for llama8b-h200 and gpu_delay; nothing else changes), or the
# calls' flow: mkdir -p /tmp/parts && touch /tmp/parts/.rig-first, then `start 60` and `wait 60`
# with RIG_REHEARSAL=1 (start skips what needs the GPU and the parts).
set -u
cd "$(dirname "$0")/../.." || exit 3
[ "${1:-}" = prepare ] || OUT=${OUT:?the device tool sets OUT}
RESULTS=/tmp/rig-results
LOG=/tmp/session.log
MARK=/tmp/parts/.rig-first
PARTS=/tmp/parts

SESSION="resolution.sh session"
# shellcheck source=benchmarks/h200/calls.sh
source benchmarks/h200/calls.sh

# part1's halves joined (checked against its SHA256SUMS by install.sh), vLLM, the load client and
# rig's wheels installed, the imports checked (env.sh)
install_vllm() {
  if [ ! -f $PARTS/part1/core-sm90.tar.xz ]; then
    cat $PARTS/core-sm90.half.0 .gpu/parts/part1b/core-sm90.half.1 > $PARTS/part1/core-sm90.tar.xz || return 3
    cp .gpu/parts/part1b/SHA256SUMS $PARTS/part1/ && rm $PARTS/core-sm90.half.0
  fi
  bash .gpu/tools/install.sh $PARTS /tmp/site > /tmp/install.log 2>&1 || { cat /tmp/install.log; return 3; }
  source benchmarks/h200/env.sh || return 3  # part-client and rig's wheels from .gpu/parts; checks the imports
}

case "${1:-}" in
prepare)  # here: part1 in two halves, each small enough to travel beside the tree
  [ -f .gpu/parts/part1/core-sm90.tar.xz ] || { echo "no .gpu/parts/part1 (benchmarks/h200/README.md: build it first)" >&2; exit 2; }
  rm -rf .gpu/parts/part1a .gpu/parts/part1b && mkdir -p .gpu/parts/part1a .gpu/parts/part1b
  split -n 2 -d -a 1 .gpu/parts/part1/core-sm90.tar.xz /tmp/core-sm90.half.
  mv /tmp/core-sm90.half.0 .gpu/parts/part1a/ && mv /tmp/core-sm90.half.1 .gpu/parts/part1b/
  cp .gpu/parts/part1/SHA256SUMS .gpu/parts/part1b/
  du -sh .gpu/parts/part1a .gpu/parts/part1b
  ;;
first)
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.sm,temperature.gpu --format=csv
  mkdir -p $PARTS/part1 && cp .gpu/parts/part1a/core-sm90.half.0 $PARTS/ || exit 3
  export PYTHONPATH=$PWD/adapter PYTHONUNBUFFERED=1
  python3 -c "import sys; print('dont_write_bytecode', sys.flags.dont_write_bytecode)"
  python3 benchmarks/h200/spin_check.py "$OUT/spin-raw.json" > "$OUT/spin-check.txt" 2>&1; cat "$OUT/spin-check.txt"
  touch "$MARK"
  ;;
start)
  [ -f "$MARK" ] || exit 42
  # The comparison's length from the measured per-boot costs (2026-12-01..03: ~115 s per boot with one
  # scenario, ~45 s more per further scenario, a control's boot without rounds ~100 s, the compiled
  # burn-in ~60 s more, install and the gpu_delay test ~110 s): with RIG_SESSION_BUDGET_S (what the
  # lease has left, less the calls' overhead) a plan that cannot end inside it is refused before
  # anything installs (2026-12-03: two scenarios outran the budget in the comparison's last boot).
  scenarios=$(grep -o -- "--scenario" <<< "${RIG_SESSION_FLAGS:-}" | wc -l); [ "$scenarios" -ge 1 ] || scenarios=1
  controls=$(grep -o -- "--control" <<< "${RIG_SESSION_FLAGS:-}" | wc -l)
  estimate=$((110 + 60 + 9 * (115 + 45 * (scenarios - 1)) + 100 * controls))
  echo "the session's estimate: ~${estimate} s (${scenarios} scenario(s), ${controls} control(s), 9 boots)"
  if [ -n "${RIG_SESSION_BUDGET_S:-}" ] && [ "$estimate" -gt "$RIG_SESSION_BUDGET_S" ]; then
    echo "!!! it needs ~${estimate} s, more than RIG_SESSION_BUDGET_S=${RIG_SESSION_BUDGET_S}: not started (fewer scenarios?)"
    exit 5
  fi
  if [ -z "${RIG_REHEARSAL:-}" ]; then  # a rehearsal here goes straight to the detached session
    install_vllm || exit 3
    python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gpu_delay_gpu.py > "$OUT/gpu-delay-test.txt" 2>&1
    tail -15 "$OUT/gpu-delay-test.txt"
    nproc
  fi
  if [ -n "${RIG_CLIENT_CAPACITY:-}" ]; then  # issue 27's figure; measured 2026-12-01 evening, so only when asked
    timeout -k 5 120 python3 benchmarks/client_capacity.py --users 3000 --workers 12 --server-processes 4 --step 0.05 \
      --max-num-seqs 1024 --max-tokens 64 --duration 20 --out /tmp/client-capacity > /tmp/client-capacity.log 2>&1
    echo "client capacity exit $?"; cp /tmp/client-capacity/capacity.json "$OUT/" 2>/dev/null
    grep -v "socket.send() raised" /tmp/client-capacity.log | tail -3
  fi
  start_session "${2:-360}"
  ;;
wait)
  [ -f "$MARK" ] || exit 42
  wait_done "${2:-540}"
  pack
  ;;
install)  # carry as `start`: vLLM and the client installed, no comparison (for the calls that follow:
  # c3000, capacity, gputest); then the lag monitor's probe against real socket events on this host's
  # cores (benchmarks/lag_probe.py, ~70 s: a gevent sleep against the kernel timer the client now uses)
  [ -f "$MARK" ] || exit 42
  if [ -z "${RIG_REHEARSAL:-}" ]; then install_vllm || exit 3; PY=python3; else PY=.venv/bin/python; fi
  nproc
  timeout -k 5 150 $PY benchmarks/lag_probe.py > "$OUT/lag-probe.txt" 2>&1; echo "lag probe exit $?"
  cat "$OUT/lag-probe.txt"
  ;;
c3000)  # issue 27's real-vLLM run: 3000 users on 12 Locust workers of this host's 16 cores, in the call (~4 min)
  [ -f "$MARK" ] || exit 42
  if [ -n "${RIG_REHEARSAL:-}" ]; then
    rig() { .venv/bin/rig "$@"; }
    RECIPE=tiny-cpu SIZE=--small WORKERS=1 PY=.venv/bin/python
  else
    source benchmarks/h200/env.sh || exit 3
    # RIG_C3000_RECIPE=llama8b-h200:frontends4: four API server processes (2026-12-04 evening: one ran at one core)
    RECIPE=${RIG_C3000_RECIPE:-llama8b-h200} SIZE=--full WORKERS=12 PY=python3
  fi
  export RIG_RESULTS_DIR=$RESULTS/c3000
  mkdir -p $RIG_RESULTS_DIR
  step() { echo "=== $(date +%T) $*"; "$@"; local rc=$?; echo "=== $(date +%T) exit $rc"; return $rc; }
  {
    step rig up "$RECIPE"
    # SIGINT at the limit: the load test writes the summary of what it measured (never a lost run).
    # (-k 45: rig stops Locust through its own shutdown, up to rig.load.runner.STOP_GRACE_S = 30 s at 3000 users, then writes the summary)
    step timeout -s INT -k 45 "${2:-380}" $PY -m rig loadtest "$RECIPE" --scenario c3000 $SIZE --workers $WORKERS --duration "${RIG_C3000_DURATION:-60}"
    step rig down "$RECIPE"
  } > /tmp/c3000.log 2>&1
  cp /tmp/c3000.log "$OUT/"
  grep -v "requests done" /tmp/c3000.log | tail -40
  pack
  ;;
capacity)  # issue 27, in the call (~4 min, no GPU): rig's client and AIPerf side by side on this host's cores, after `start`
  [ -f "$MARK" ] || exit 42
  if [ -z "${RIG_REHEARSAL:-}" ]; then source benchmarks/h200/env.sh || exit 3; fi
  capacity_call
  ;;
bimodal)  # issue 25 item 4, in the call (~4 min): prose-c1 on llama-h200 as booted, pinned, unpinned again
  [ -f "$MARK" ] || exit 42
  if [ -n "${RIG_REHEARSAL:-}" ]; then
    rig() { .venv/bin/rig "$@"; }
    RECIPE=tiny-cpu SIZE=--small PY=.venv/bin/python PORT=8321 ENGINE_CORES=0 API_CORES=1 CLIENT_CORES=0-1 ALL_CORES=0-1
  else
    source benchmarks/h200/env.sh || exit 3
    # EngineCore and the API server on two cores each, apart; the load client on four of its own.
    RECIPE=llama-h200 SIZE=--full PY=python3 PORT=8341 ENGINE_CORES=2,3 API_CORES=6,7 CLIENT_CORES=12-15 ALL_CORES=0-15
  fi
  export RIG_RESULTS_DIR=$RESULTS/bimodal
  rm -rf "$RIG_RESULTS_DIR" /tmp/cores.log && mkdir -p "$RIG_RESULTS_DIR"  # a second call on this host starts afresh
  step() { echo "=== $(date +%T) $*"; "$@"; local rc=$?; echo "=== $(date +%T) exit $rc"; return $rc; }
  # One deadline for the whole call (600 s at most): what is left of it, less what down and the pack
  # need (~90 s), caps each step; a run that would get under 40 s is skipped.
  deadline=$((SECONDS + ${RIG_BIMODAL_BUDGET_S:-470}))
  cap() { local left=$((deadline - SECONDS - 90)); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }
  # One boot for all three runs: a run that finds nothing up would boot (and stop) one of its own, so
  # the runs go only while this boot is up; SIGINT at the limit keeps what a run measured.
  run() {
    local limit; limit=$(cap 75)
    if [ "$limit" -lt 40 ]; then echo "!!! $limit s left for a run: skipped"; return 1; fi
    step timeout -s INT -k 10 "$limit" taskset -c "$CLIENT_CORES" \
      $PY -m rig loadtest "$RECIPE" --scenario prose-c1 $SIZE --duration "${RIG_BIMODAL_DURATION:-20}"
  }
  sampler=
  trap '[ -z "$sampler" ] || kill "$sampler" 2>/dev/null' EXIT
  {
    if step timeout -k 20 "$(cap 240)" $PY -m rig up "$RECIPE"; then
      api=$(pgrep -o -f -- "--port $PORT")  # the server the native driver started (its group's leader)
      engine=$([ -z "$api" ] || ps --ppid "$api" -o pid=,rss= --sort=-rss | awk 'NR == 1 {print $1}')  # EngineCore: the CUDA context
      echo "API server pid ${api:-none}, EngineCore pid ${engine:-none} (the API server's largest child)"
      if [ -n "$api" ]; then
        ( while sleep 0.2; do for pid in $api $engine; do echo "$(date +%s.%N) $pid $(ps -o psr= -p "$pid" | tr -d ' ')"; done; done ) > /tmp/cores.log 2>/dev/null &
        sampler=$!
        run  # as booted (the scenario's warmup, then the measured run)
        if taskset -a -cp "$API_CORES" "$api" > /dev/null && { [ -z "$engine" ] || taskset -a -cp "$ENGINE_CORES" "$engine" > /dev/null; }; then
          echo "pinned: API server on $API_CORES, EngineCore on $ENGINE_CORES, client on $CLIENT_CORES"
          run
          if taskset -a -cp "$ALL_CORES" "$api" > /dev/null && { [ -z "$engine" ] || taskset -a -cp "$ALL_CORES" "$engine" > /dev/null; }; then
            echo "unpinned again"
            run
          else
            echo "!!! could not unpin: the third run is left out"
          fi
        else
          echo "!!! could not pin: the second and third runs are left out"
        fi
        kill "$sampler" 2>/dev/null; sampler=
      else
        echo "!!! no process listens with --port $PORT: no run (they would boot their own)"
      fi
    fi
    step timeout -k 10 50 $PY -m rig down "$RECIPE"
    $PY benchmarks/h200/bimodal.py "$RIG_RESULTS_DIR" --cores /tmp/cores.log
  } > /tmp/bimodal.log 2>&1
  touch /tmp/cores.log
  cp /tmp/bimodal.log /tmp/cores.log "$OUT/"
  grep -v "requests done\|booting" /tmp/bimodal.log | tail -40
  pack
  ;;
gputest)
  [ -f "$MARK" ] || exit 42
  source benchmarks/h200/env.sh || exit 3
  # RIG_GPUTEST_K picks the recipe: "llama8b-h200" for the 8B row of the engines' table (~4 min with a cold compile)
  # its raw results (boots, runs) come back in the pack, beside the session's
  RIG_GPU_TEST_RESULTS=$RESULTS/gpu-test timeout -k 5 400 python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/gpu/test_engines_gpu.py -k "${RIG_GPUTEST_K:-llama-h200 and tp1}" > "$OUT/vllm-gpu-test.txt" 2>&1
  tail -30 "$OUT/vllm-gpu-test.txt"
  pack
  ;;
session)
  if [ -n "${RIG_REHEARSAL:-}" ]; then
    export PYTHONUNBUFFERED=1
    rig() { .venv/bin/rig "$@"; }
    RECIPE=tiny-cpu OFF=off:RIG_TOKEN_DELAY_MS=0 ON=on:RIG_TOKEN_DELAY_MS=20
  else
    source benchmarks/h200/env.sh || exit 3
    RECIPE=llama8b-h200 OFF=off:RIG_GPU_DELAY_US=0 ON=on:RIG_GPU_DELAY_US=${RIG_SESSION_ON_US:-24}
  fi
  export RIG_RESULTS_DIR=$RESULTS
  mkdir -p $RESULTS
  step() { echo "=== $(date +%T) $*"; "$@"; local rc=$?; echo "=== $(date +%T) exit $rc"; return $rc; }
  # Processes and their CPU every 5 s (compile workers alive during a window or not; who uses the CPU).
  ( while sleep 5; do echo "--- $(date +%T)"; ps -eo pid,ppid,pcpu,rss,etimes,comm --sort=-pcpu | head -12; done ) > /tmp/ps.log 2>&1 &
  sampler=$!
  # The comparison with no design flags: the machine's first boot compiles, so it is kept as a burn-in
  # and booted again; then 4 ABBA pairs, 2 rounds of 10 s each, prose-c1.
  # RIG_SESSION_ARMS (space-separated arm specs) replaces the two: e.g. the identical-arm check
  # "off:RIG_GPU_DELAY_US=0 same:RIG_GPU_DELAY_US=0", or the numerics arm "off:RIG_GPU_DELAY_US=0 fp16:@fp16".
  if [ -n "${RIG_SESSION_ARMS:-}" ]; then read -ra arms <<< "$RIG_SESSION_ARMS"; else arms=("$OFF" "$ON"); fi
  arm_flags=()
  for arm in "${arms[@]}"; do arm_flags+=(--arm "$arm"); done
  # shellcheck disable=SC2086 # RIG_SESSION_FLAGS holds several words (e.g. "--boots 2")
  step rig compare "$RECIPE" "${arm_flags[@]}" ${RIG_SESSION_FLAGS:-}
  kill "$sampler" 2>/dev/null
  echo "SESSION DONE $(date +%T)"
  ;;
*)
  echo "usage: resolution.sh prepare | first | start [S] | install | wait [S] | gputest | c3000 [S] | capacity | bimodal | session" >&2
  exit 2
  ;;
esac
