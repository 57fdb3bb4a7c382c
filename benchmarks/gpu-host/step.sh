#!/usr/bin/env bash
# One step of rig's work on a GPU host that may vanish between two steps (a preemptible or spot
# host, or one handed back after each job), run from the repository root on that host.
#
#   step.sh install PART_DIR...                keep the bundle parts this step carried; install the
#                                              bundle once every part is here (rig bundle build)
#   step.sh compare SECONDS -- RECIPE ARGS...  guard, unpack the last step's results if this host has
#                                              none, run or resume `rig compare RECIPE ARGS...` for at
#                                              most SECONDS, then pack the results
#   step.sh run SECONDS -- RIG_ARGS...         the same for any other rig command (loadtest, up ...)
#
# Every step ends by packing the results into $RIG_PACK_OUT (rig pack): carry that folder to the
# next step as $RIG_PACK_IN. A fresh host is detected at the next step (the bundle's marker is
# missing): the step says so and exits 42, and the same step, with the bundle's parts carried
# again, carries on from the pack (`rig compare --resume` redoes the boot that was cut).
#
# Environment: RIG_SITE (default /tmp/site, where the bundle installs), RIG_STAGE (/tmp/rig-stage,
# where parts wait), RIG_RESULTS_DIR (/tmp/rig-results), RIG_PACK_IN (the last step's pack, if
# any), RIG_PACK_OUT (required for compare/run: where this step's pack goes), RIG_PACK_PART
# (15MiB: the largest part of a pack), RIG_PACK_CACHES (a recipe: also pack the compile caches its
# boots use here, as $RIG_PACK_OUT/caches), RIG_CACHES_IN (such a pack: merged into this host's
# caches at its first step, so that a fresh host of the same kind loads instead of compiling).
# Exit codes: 0 finished; 75 stopped at SECONDS, packed (run the next step); 42 a fresh host
# (carry the parts again); 10 parts still missing; otherwise rig's own code (rig --help).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
export RIG_SITE=${RIG_SITE:-/tmp/site} RIG_STAGE=${RIG_STAGE:-/tmp/rig-stage}
export RIG_RESULTS_DIR=${RIG_RESULTS_DIR:-/tmp/rig-results}
export PYTHONPATH=$RIG_SITE:$PWD:$PWD/adapter PYTHONUNBUFFERED=1
# NVLink multicast stays off in every process that uses NCCL: on a host whose GPUs others share,
# a program that uses it can put those GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${RIG_PYTHON:-python3}
rig() { "$PY" -m rig "$@"; }
EX_STOPPED=75

repack() {  # NAME RIG_PACK_ARGS...: a step's pack replaces the last step's on this host once it is whole
  local name=$1 out=${RIG_PACK_OUT:?set RIG_PACK_OUT: where this step packs}; shift
  rm -rf "$out/.$name-new"
  rig pack "$@" --out "$out/.$name-new" --part-size "${RIG_PACK_PART:-15MiB}" || return 1
  rm -rf "$out/$name" && mv "$out/.$name-new" "$out/$name"
}

packed() {  # pack the results whatever happened, then exit with the step's code
  local code=$1
  if [ -d "$RIG_RESULTS_DIR" ]; then
    repack pack --source "$RIG_RESULTS_DIR" || code=1
  fi
  if [ -n "${RIG_PACK_CACHES:-}" ]; then  # without them the next host compiles again: said, not fatal
    repack caches --caches "$RIG_PACK_CACHES"
  fi
  exit "$code"
}

guarded() {  # a fresh host has no bundle: say so in one line and stop before anything runs
  "$PY" rig/hosts/hostside.py guard --site "$RIG_SITE" || exit 42
  if [ -n "${RIG_CACHES_IN:-}" ] && [ ! -d "$RIG_RESULTS_DIR" ]; then
    rig unpack "$RIG_CACHES_IN" || exit 2
  fi
  if [ -n "${RIG_PACK_IN:-}" ] && [ ! -d "$RIG_RESULTS_DIR" ]; then
    rig unpack "$RIG_PACK_IN" --into "$RIG_RESULTS_DIR" || exit 2
  fi
}

case "${1:-}" in
install)
  shift
  "$PY" rig/hosts/hostside.py install "$@" --stage "$RIG_STAGE" --site "$RIG_SITE"
  ;;
compare|run)
  kind=$1 seconds=${2:?SECONDS}; shift 2; [ "${1:-}" = -- ] && shift
  guarded
  extra=()
  if [ "$kind" = compare ]; then
    last=$(ls -1d "$RIG_RESULTS_DIR"/compare/*/ 2>/dev/null | sort | tail -1)
    [ -n "$last" ] && extra=(--resume "${last%/}")
    set -- compare "$@"
  fi
  # SIGINT is rig's Ctrl-C: it stops the engine, keeps every finished boot and exits 130. rig stays
  # in this step's process group (--foreground), so a SIGINT sent to the step reaches it too.
  timeout --foreground -s INT -k 90 "$seconds" "$PY" -m rig "$@" "${extra[@]}"
  code=$?
  [ "$code" = 124 ] && code=$EX_STOPPED
  packed "$code"
  ;;
*)
  sed -n '2,24p' "$0"; exit 2
  ;;
esac
