# shellcheck shell=bash
# Sourced by the lent-host session scripts (resolution.sh, sglang.sh): what every call ends with, and
# the capacity call both offer.
# The caller sets OUT (the device tool's folder), LOG (the detached session's log) and SESSION (the
# pattern that finds the session's process).

pack() {  # what the session produced so far: at most 8 files of at most 16 MiB come back from $OUT
  # (timeline PNGs left out: ~70% of the bytes, redrawn byte for byte by benchmarks/redraw_timelines.py)
  rm -f "$OUT"/rig-results.tar.xz*
  tar -C /tmp -cf - --exclude=compile-cache --exclude="*.pyc" --exclude="timeline*.png" rig-results 2>/dev/null | xz -T0 -6 > /tmp/rig-results.tar.xz
  split -b 15M -d -a 1 /tmp/rig-results.tar.xz "$OUT/rig-results.tar.xz." && rm /tmp/rig-results.tar.xz
  cp "$LOG" /tmp/ps.log "$OUT/" 2>/dev/null
  ls -la "$OUT"
  tail -25 "$LOG" 2>/dev/null
}

wait_done() {  # up to $1 seconds, or until the session wrote its last line
  local deadline=$((SECONDS + $1))
  while [ $SECONDS -lt $deadline ]; do
    grep -q "^SESSION DONE" "$LOG" 2>/dev/null && break
    pgrep -f "$SESSION" >/dev/null || { echo "!!! the session is not running"; break; }
    sleep 5
  done
}

start_session() {  # the calling script's `session` detached (it outlives the call while the host stays), then wait $1 s and pack
  setsid nohup bash "benchmarks/h200/$(basename "$0")" session > "$LOG" 2>&1 < /dev/null &  # the cwd is the repository root
  sleep 2
  wait_done "$1"
  pack
}

# Issue 27's capacity call, in the call (~4 min, no GPU), after the calling script's `start` put rig and
# the load client on PYTHONPATH (resolution.sh: env.sh; sglang.sh: both SITEs). The timed server (its
# timing known exactly) on 4 processes, engine-like (a chunk for every running stream each 50 ms step,
# up to 1024 running per process: none queue); rig's Locust on 12 worker processes, then AIPerf 0.13.0
# (.gpu/parts/part-aiperf: benchmarks/h200/aiperf-part.sh) on the same server, load and cores
# (benchmarks/client_capacity.py --aiperf), at each of RIG_CAPACITY_USERS (default 1000 and 3000)
# streams of 20 tok/s. Everything inside RIG_CAPACITY_BUDGET_S (default 540 s of the call's 600): each
# size gets what is left, and what came back is packed apart from the session's results
# (capacity.tar.xz.N; raw records too).
capacity_call() {
  local deadline=$((SECONDS + ${RIG_CAPACITY_BUDGET_S:-540})) PY USERS WORKERS SERVERS DURATION AIPERF
  if [ -n "${RIG_REHEARSAL:-}" ]; then  # here: a 3.11 AIPerf (RIG_AIPERF) stands in for the 3.12 part
    PY=.venv/bin/python USERS=${RIG_CAPACITY_USERS:-50} WORKERS=1 SERVERS=1 DURATION=20 AIPERF=${RIG_AIPERF:?RIG_AIPERF: an aiperf executable}
  else
    PY=python3 USERS=${RIG_CAPACITY_USERS:-1000 3000} WORKERS=12 SERVERS=4 DURATION=30 AIPERF=/tmp/aiperf-bin/aiperf
    ls .gpu/parts/part-aiperf/*.whl > /dev/null 2>&1 || { echo "no .gpu/parts/part-aiperf: carry it in this call"; return 3; }
    timeout -k 5 120 python3 -m pip install -q --no-index --no-deps --disable-pip-version-check --target /tmp/aiperf-site \
      --upgrade .gpu/parts/part-aiperf/*.whl > /tmp/aiperf-install.log 2>&1 || { tail -5 /tmp/aiperf-install.log; return 3; }
    mkdir -p /tmp/aiperf-bin
    # Its own path only: the engine's SITE must not shadow the versions AIPerf pins (the image's numpy
    # and transformers stay visible, as the lock assumes).
    printf '#!/bin/sh\nexec env PYTHONPATH=/tmp/aiperf-site python3 -m aiperf "$@"\n' > $AIPERF && chmod +x $AIPERF
  fi
  timeout -k 5 60 "$AIPERF" --version || { echo "AIPerf does not start (benchmarks/h200/aiperf.lock)"; return 3; }
  local tokenizer
  tokenizer=$(timeout -k 5 120 $PY -c "from pathlib import Path; from rig.tinymodel import ensure_tiny_model
print(ensure_tiny_model(Path('/tmp/rig-models')))") || { echo "no tokenizer for AIPerf (rig.tinymodel)"; return 3; }
  local capacity=/tmp/capacity users left rc
  mkdir -p $capacity
  for users in $USERS; do
    left=$((deadline - SECONDS - 30))  # 30 s to pack
    if [ "$left" -lt 90 ]; then echo "!!! $users streams: ${left} s left, not started"; continue; fi
    [ "$left" -gt 250 ] && left=250
    echo "=== $(date +%T) $users streams (at most ${left} s)"
    timeout -k 10 "$left" $PY benchmarks/client_capacity.py --users "$users" --workers $WORKERS --server-processes $SERVERS \
      --step 0.05 --max-num-seqs 1024 --duration $DURATION --max-tokens 64 --aiperf "$AIPERF" --tokenizer "$tokenizer" \
      --out $capacity/"$users" > $capacity/"$users".log 2>&1
    rc=$?
    echo "=== $(date +%T) exit $rc"
    grep -v "socket.send() raised" $capacity/"$users".log | grep -A1 -E "^[0-9]+ streams on|^note:|^rig: |^AIPerf: |Error" | tail -6
  done
  rm -f "$OUT"/capacity.tar.xz*
  tar -C /tmp -cf - capacity | xz -T0 -6 | split -b 15M -d -a 1 - "$OUT/capacity.tar.xz."
  ls -la "$OUT"
}
