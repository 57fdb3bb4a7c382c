# What lab/lab.sh and lab/slurm.sh share: a step's timing line, a message, a pid file's process.
# The sourcing script sets LAB_NAME (the prefix of its lines) and LAB_STEP_WIDTH.

step() {  # step NAME FUNCTION: run one step, print its duration
  local name=$1 t0=$SECONDS
  shift
  "$@"
  printf '%s: %-*s %4ds\n' "$LAB_NAME" "$LAB_STEP_WIDTH" "$name" $((SECONDS - t0))
}
say() { echo "$LAB_NAME:   $*"; }
running() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
# A process that runs: an exited one nobody reaped (a zombie) answers kill -0 but holds nothing.
alive() { [[ -r /proc/$1/status ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; }

stop_pidfile() {  # stop_pidfile NAME FILE: SIGTERM the process, wait up to 20 s for it to end
  local pid
  if running "$2"; then
    pid=$(cat "$2")  # read once: a daemon removes its own pid file as it stops
    kill "$pid" && say "stopped $1 (pid $pid)"
    for _ in $(seq 40); do alive "$pid" || break; sleep 0.5; done
  fi
  rm -f "$2"
}
