# shellcheck shell=bash
# Sourced by the lent-host session scripts (resolution.sh, sglang.sh): what every call ends with.
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
