#!/usr/bin/env bash
# A one-node Slurm cluster on this machine (Debian slurm-wlm + munge, no systemd, no cgroups),
# for the Slurm tests and for trying the slurm/ scripts. Needs root (scripts/services.sh installs
# the packages). Everything lives in one state folder: its own munge socket and key, slurm.conf,
# spool, logs, and a jobcomp file with one line per finished job.
#
#   eval "$(bash scripts/slurm_local.sh start)"   # prints `export SLURM_CONF=...`; node idle in ~1 s
#   sbatch slurm/grpo.sh --config configs/grpo/cpu.yaml
#   bash scripts/slurm_local.sh stop
#
# Environment: RLCW_SLURM_DIR (state folder, default /tmp/rlcw-slurm), RLCW_MUNGE_DIR (munge's
# socket and key; default /tmp/rlcw-munge-<hash of the state folder>), SLURMCTLD_PORT (6817),
# SLURMD_PORT (6818): set distinct ports to run two clusters side by side.
set -euo pipefail
DIR=${RLCW_SLURM_DIR:-/tmp/rlcw-slurm}
CTLD_PORT=${SLURMCTLD_PORT:-6817}
D_PORT=${SLURMD_PORT:-6818}
# munged runs as the munge user, which must reach its folder: keep it out of private parents
# (e.g. pytest's 0700 temp folders), one per state folder.
MUNGE=${RLCW_MUNGE_DIR:-/tmp/rlcw-munge-$(printf %s "$DIR" | md5sum | cut -c1-10)}

die() { echo "slurm_local.sh: $*" >&2; exit 2; }

stop_pid() {  # stop_pid PIDFILE: TERM, wait up to 10 s, then KILL
  local file=$1 pid _
  [ -f "$file" ] || return 0
  pid=$(cat "$file" 2>/dev/null || true)
  rm -f "$file"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
}

write_conf() {
  local cpus mem
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys OMP_NUM_THREADS
  mem=$(awk '/MemAvailable/ {m=int($2/1024)-1024; print (m>512?m:512)}' /proc/meminfo)
  cat > "$DIR/slurm.conf" <<EOF
# written by scripts/slurm_local.sh: one node, no accounting, no cgroups
ClusterName=rlcw-local
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$D_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MailProg=/bin/true
ReturnToService=2
MinJobAge=300
SchedulerParameters=sched_interval=1
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  [ "$(id -u)" -eq 0 ] || die "needs root (munged and slurmd run as system users)"
  for bin in munged slurmctld slurmd sinfo; do
    command -v "$bin" >/dev/null 2>&1 || die "$bin not found: run scripts/services.sh (apt-get install slurm-wlm munge)"
  done
  mkdir -p "$DIR/state" "$DIR/spool" "$MUNGE"
  export SLURM_CONF=$DIR/slurm.conf
  if [ -f "$DIR/slurmctld.pid" ] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; then
    echo "export SLURM_CONF=$SLURM_CONF"  # already running
    return 0
  fi
  [ -f "$MUNGE/munge.key" ] || dd if=/dev/urandom of="$MUNGE/munge.key" bs=1024 count=1 status=none
  chown -R munge:munge "$MUNGE"
  chmod 700 "$MUNGE"
  chmod 400 "$MUNGE/munge.key"
  runuser -u munge -- munged --socket="$MUNGE/munge.socket" --key-file="$MUNGE/munge.key" \
    --pid-file="$MUNGE/munged.pid" --log-file="$MUNGE/munged.log" --seed-file="$MUNGE/munge.seed" --force
  write_conf
  slurmctld
  slurmd -N localhost
  local _
  for _ in $(seq 100); do
    if sinfo -h -o %t 2>/dev/null | grep -q idle; then
      echo "export SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 0.2
  done
  tail -n 20 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
  die "the node did not become idle in 20 s (logs above, state in $DIR)"
}

stop() {
  stop_pid "$DIR/slurmd.pid"
  stop_pid "$DIR/slurmctld.pid"
  stop_pid "$MUNGE/munged.pid"
  rm -rf "$MUNGE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$DIR/slurm.conf" ;;
  *) die "usage: slurm_local.sh start|stop|env" ;;
esac
