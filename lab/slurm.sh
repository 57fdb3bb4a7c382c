#!/usr/bin/env bash
# The Slurm lab: a real two-node Slurm cluster on this one machine, with no systemd. Debian's
# slurm-wlm and munge; munged, slurmctld and two slurmd (nodes n1 and n2, Slurm's multiple-slurmd
# mode: one port each) with a config written under the state directory (proctrack/linuxproc,
# task/none: no cgroups needed). `make slurm-lab` runs `lab/slurm.sh up` (idempotent); `down` stops
# the daemons. Clients (sinfo, salloc, srun, rig) find the cluster through SLURM_CONF, which `up`
# prints; the Makefile and the tests read it from the state directory.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=${RIG_SLURM_DIR:-$PWD/.rig/slurm}
CTLD_PORT=${RIG_SLURM_CTLD_PORT:-16817}
NODE_PORT=${RIG_SLURM_NODE_PORT:-16818}  # n1; n2 takes the next one
NODES=(n1 n2)
CPUS=$(nproc)
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)
export SLURM_CONF=$STATE/slurm.conf

LAB_NAME=slurm-lab LAB_STEP_WIDTH=10
. lab/lib.sh

packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    say "slurm-wlm and munge already installed ($(slurmctld -V))"; return
  fi
  if ((EUID != 0)); then
    echo "slurm-lab: installing slurm-wlm and munge needs root (apt-get); run \`sudo make slurm-lab\` or install them yourself" >&2
    exit 1
  fi
  say "installing slurm-wlm munge from Debian packages"
  apt-get update -qq >"$STATE/apt.log" 2>&1 || { tail -5 "$STATE/apt.log"; echo "slurm-lab: apt-get update failed" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >>"$STATE/apt.log" 2>&1 \
    || { tail -5 "$STATE/apt.log"; exit 1; }
}

config() {
  local host node port=$NODE_PORT
  host=$(hostname -s)
  mkdir -p "$STATE/munge" "$STATE/ctld" "$STATE/spool"
  chmod 0700 "$STATE/munge"
  if [[ ! -f $STATE/munge/munge.key ]]; then  # the cluster's own key: nothing outside the lab shares it
    dd if=/dev/urandom of="$STATE/munge/munge.key.partial" bs=1024 count=1 status=none
    chmod 0400 "$STATE/munge/munge.key.partial" && mv "$STATE/munge/munge.key.partial" "$STATE/munge/munge.key"
  fi
  {
    cat <<CONF
ClusterName=riglab
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmdTimeout=30
CONF
    for node in "${NODES[@]}"; do
      echo "NodeName=$node NodeHostname=$host NodeAddr=127.0.0.1 Port=$port CPUs=$CPUS State=UNKNOWN"
      port=$((port + 1))
    done
    echo "PartitionName=lab Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
  } >"$STATE/slurm.conf.partial"
  mv "$STATE/slurm.conf.partial" "$STATE/slurm.conf"
  say "config $STATE/slurm.conf (slurmctld on 127.0.0.1:$CTLD_PORT, nodes ${NODES[*]})"
}

daemons() {
  if ! running "$STATE/munged.pid"; then
    munged --force --socket="$STATE/munge/munge.socket" --key-file="$STATE/munge/munge.key" \
      --pid-file="$STATE/munged.pid" --log-file="$STATE/munged.log" --seed-file="$STATE/munge/munged.seed"
    say "munged started (socket $STATE/munge/munge.socket)"
  fi
  if ! running "$STATE/slurmctld.pid"; then
    slurmctld -i >>"$STATE/slurmctld.out" 2>&1 </dev/null
    say "slurmctld started"
  fi
  local node
  for node in "${NODES[@]}"; do
    mkdir -p "$STATE/spool/$node"
    if ! running "$STATE/slurmd-$node.pid"; then
      slurmd -N "$node" >>"$STATE/slurmd-$node.out" 2>&1 </dev/null
      say "slurmd -N $node started"
    fi
  done
}

wait_idle() {  # idle, or (a lab already up) running jobs: each node answers and takes jobs
  local ready
  for _ in $(seq 120); do
    ready=$(sinfo -h -N -t idle,alloc,mix -o %N 2>/dev/null | sort -u | wc -l)
    if ((ready == ${#NODES[@]})); then say "sinfo: ${NODES[*]} $(sinfo -h -N -o %t | sort -u | tr '\n' ' ')"; return; fi
    scontrol update NodeName="$(IFS=,; echo "${NODES[*]}")" State=RESUME >/dev/null 2>&1 || true
    sleep 0.5
  done
  sinfo -N >&2 || true
  echo "slurm-lab: the nodes did not become idle; see $STATE/slurmctld.log and $STATE/slurmd-*.log" >&2
  exit 1
}

up() {
  local t0=$SECONDS
  step packages packages
  step config config
  step daemons daemons
  step idle wait_idle
  echo "slurm-lab: ready in $((SECONDS - t0))s; clients: export SLURM_CONF=$SLURM_CONF"
}

down() {
  if [[ -f $SLURM_CONF ]] && running "$STATE/slurmctld.pid"; then
    scancel --full --user="$(id -un)" 2>/dev/null || true  # no job outlives its cluster
  fi
  local node
  for node in "${NODES[@]}"; do stop_pidfile "slurmd $node" "$STATE/slurmd-$node.pid"; done
  stop_pidfile slurmctld "$STATE/slurmctld.pid"
  stop_pidfile munged "$STATE/munged.pid"
  echo "slurm-lab: down (kept $STATE: config and logs)"
}

case ${1:-up} in
  up) up ;;
  down) down ;;
  conf) echo "$SLURM_CONF" ;;
  *) echo "usage: lab/slurm.sh [up|down|conf]" >&2; exit 2 ;;
esac
