#!/usr/bin/env bash
# A one-node SLURM on this machine, to try `conelab sweep run --slurm` for real:
#
#   eval "$(scripts/slurm-local.sh start)"   # installs slurm-wlm and munge if missing (Debian),
#                                            # starts munged, slurmctld and slurmd; prints SLURM_CONF
#   conelab sweep run grid.toml --slurm --out /tmp/sweep
#   scripts/slurm-local.sh stop              # stops the three daemons by their pids
#
# Known pitfalls on a root container without systemd (cgroup v1): munged runs as the munge user
# from /run/munge; ProctrackType=proctrack/linuxproc and TaskPlugin=task/none; RealMemory comes
# from `slurmd -C` (an overstated value drains the node); no accounting database, so `sacct`
# does not answer. A requeued task waits SLURM's requeue delay (about two minutes) before it
# starts again: the credential lifetime, SLURM_LOCAL_CRED_EXPIRE seconds (default 120, SLURM's;
# .ci/run takes 10). Everything lives under $SLURM_LOCAL (default /tmp/conelab-slurm); each start
# clears the controller's saved state, so no job of an earlier start comes back.
set -euo pipefail
root=${SLURM_LOCAL:-/tmp/conelab-slurm}
conf=$root/slurm.conf

# Stops each daemon by the pid in its file, waiting (10 s at most) for it to be gone.
stop() {
    local file pid
    for file in "$root"/slurmd.pid "$root"/slurmctld.pid "$root"/munged.pid; do
        [ -f "$file" ] || continue
        pid=$(cat "$file")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        rm -f "$file"
    done
}

case "${1:-}" in
start)
    # munged must run as the munge user and slurmd as root: a root shell (or sudo) is needed.
    [ "$(id -u)" = 0 ] || { echo "scripts/slurm-local.sh start: run as root (sudo)" >&2; exit 1; }
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >&2
    fi
    stop
    mkdir -p "$root"/{state,spool,log} /run/munge
    chown munge:munge /run/munge
    su -s /bin/sh munge -c "/usr/sbin/munged --force"
    pgrep -u munge -n munged > "$root/munged.pid"
    host=$(hostname)
    memory=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
    cpus=$(slurmd -C | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' | head -1)
    cat > "$conf" <<CONF
ClusterName=conelab
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=${SLURM_LOCAL_CRED_EXPIRE:-120}
StateSaveLocation=$root/state
SlurmdSpoolDir=$root/spool
SlurmctldPidFile=$root/slurmctld.pid
SlurmdPidFile=$root/slurmd.pid
SlurmctldLogFile=$root/log/slurmctld.log
SlurmdLogFile=$root/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    slurmctld -c -f "$conf"
    slurmd -f "$conf"
    for _ in $(seq 1 30); do
        SLURM_CONF=$conf sinfo -h -o %t 2>/dev/null | grep -q idle && break
        sleep 1
    done
    SLURM_CONF=$conf sinfo -h -o %t | grep -q idle || { echo "the node did not come up: see $root/log" >&2; exit 1; }
    echo "export SLURM_CONF=$conf"
    ;;
stop)
    stop
    ;;
*)
    echo "usage: scripts/slurm-local.sh start|stop" >&2
    exit 2
    ;;
esac
