#!/usr/bin/env bash
# A single-node Slurm on this machine, for the `cluster` tests and for trying `snakemake --profile cluster` by hand:
# the same daemons (munged, slurmctld, slurmd) and client commands (sbatch, squeue, sacct, scancel) a cluster has.
#
#   scripts/cluster/local-slurm.sh start DIR    install slurm-wlm + munge if missing (apt-get), write DIR/slurm.conf,
#                                               start the daemons, wait until the node is idle; prints
#                                               `export SLURM_CONF=DIR/slurm.conf` (every client command needs it)
#   scripts/cluster/local-slurm.sh stop DIR     stop the daemons started for DIR (munged only if this script started it)
#
# Everything lives under DIR (state, spool, logs, pid files); nothing under /etc/slurm is touched, so a real
# Slurm configuration on the machine is left alone. One node (this machine's CPUs and memory), one partition
# `atlas`, no cgroups (containers rarely allow them). Needs root: slurmd starts job steps as the submitting user.
# Exit status 3 means "cannot run here" (not root, no apt-get and no Slurm, a daemon that would not start), with
# the reason on stderr, so callers can skip rather than fail.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[[ -n $cmd && -n $dir ]] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
conf=$dir/slurm.conf
cannot() { echo "local-slurm: cannot run here: $*" >&2; exit 3; }

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

install_if_missing() {
    local missing=()
    command -v slurmctld >/dev/null || command -v /usr/sbin/slurmctld >/dev/null || missing+=(slurm-wlm)
    command -v munged >/dev/null || [[ -x /usr/sbin/munged ]] || missing+=(munge)
    ((${#missing[@]} == 0)) && return 0
    command -v apt-get >/dev/null || cannot "no ${missing[*]} and no apt-get to install them"
    echo "local-slurm: installing ${missing[*]} (apt-get)" >&2
    # the package lists may be stale or absent (a fresh container): update once, then install
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >"$dir/apt.log" 2>&1 ||
        { apt-get update >>"$dir/apt.log" 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >>"$dir/apt.log" 2>&1; } ||
        cannot "apt-get install ${missing[*]} failed (no network?); see $dir/apt.log"
}

start_munge() {
    export PATH=$PATH:/usr/sbin
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return 0  # a munged already answers (the machine's own): use it
    fi
    [[ -f /etc/munge/munge.key ]] || {
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key 2>/dev/null || true
        chmod 400 /etc/munge/munge.key
    }
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
    if id munge >/dev/null 2>&1; then
        runuser -u munge -- munged --pid-file=/run/munge/munged.pid || cannot "munged would not start"
    else
        munged --force --pid-file=/run/munge/munged.pid || cannot "munged would not start"
    fi
    touch "$dir/munged.started-here"
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    cannot "munged started but does not answer"
}

write_conf() {
    local host cpus mem_mb
    host=$(hostname -s)
    # GNU nproc honours OMP_NUM_THREADS (a test worker sets 1 for its own threads); the node gets every usable CPU
    cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
    mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
    mkdir -p "$dir/state" "$dir/spool" "$dir/log"
    local tmp
    tmp=$(mktemp "$dir/.slurm.conf.XXXXXX")
    cat >"$tmp" <<CONF
# written by scripts/cluster/local-slurm.sh: one node ($host), one partition, no cgroups
ClusterName=atlaslocal
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/none
# the completion record of every job (its final state), the accounting a single node can keep without slurmdbd
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.log
# finished jobs stay visible to squeue/scontrol for an hour (Snakemake's status checks read them)
MinJobAge=3600
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=atlas Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
    mv "$tmp" "$conf"
}

# Snakemake's slurm-jobstep executor drops SLURM_* variables (SLURM_CONF among them) before its `srun` inside a
# job, so that srun would find no configuration. Without SLURM_CONF and /etc/slurm/slurm.conf, Slurm clients read
# slurmd's configless cache /run/slurm/conf/slurm.conf: point that at DIR/slurm.conf (never over another one).
run_conf=/run/slurm/conf/slurm.conf
link_conf() {
    [[ -e /etc/slurm/slurm.conf ]] && return 0  # a machine's own Slurm: jobs inside it use that
    if [[ -L $run_conf && -e $run_conf && $(readlink "$run_conf") != "$conf" ]]; then
        cannot "$run_conf already points at another local Slurm ($(readlink "$run_conf"))"
    fi
    mkdir -p "$(dirname "$run_conf")"
    ln -sfn "$conf" "$run_conf"
}

start() {
    [[ $(id -u) == 0 ]] || cannot "needs root (slurmd starts job steps as the submitting user)"
    install_if_missing
    export PATH=$PATH:/usr/sbin
    if [[ -f $dir/slurmctld.pid ]] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
        cannot "a local Slurm already runs from $dir (stop it first)"
    fi
    start_munge
    write_conf
    link_conf
    export SLURM_CONF=$conf
    slurmctld -c -f "$conf" || cannot "slurmctld would not start; see $dir/log/slurmctld.log"
    slurmd -f "$conf" || cannot "slurmd would not start; see $dir/log/slurmd.log"
    for _ in $(seq 150); do
        if [[ $(sinfo -h -N -o '%t' 2>/dev/null) == idle ]]; then
            echo "export SLURM_CONF=$conf"
            return 0
        fi
        sleep 0.2
    done
    cannot "the node never became idle: $(sinfo -h -N -o '%N %t %E' 2>&1); see $dir/log/"
}

stop_pid() {
    local pidfile=$1
    [[ -f $pidfile ]] || return 0
    local pid
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

stop() {
    stop_pid "$dir/slurmd.pid"
    stop_pid "$dir/slurmctld.pid"
    if [[ -L $run_conf && $(readlink "$run_conf") == "$conf" ]]; then
        rm -f "$run_conf"
    fi
    if [[ -f $dir/munged.started-here ]]; then
        stop_pid /run/munge/munged.pid
        rm -f "$dir/munged.started-here"
    fi
}

case $cmd in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
