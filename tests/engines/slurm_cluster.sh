#!/usr/bin/env bash
# A throwaway one-host Slurm cluster for tests/engines/test_slurm.py.
#
#   tests/engines/slurm_cluster.sh install        # Debian's slurm-wlm + munge, skipped when srun exists
#   tests/engines/slurm_cluster.sh start [DIR]    # munged, slurmctld, slurmd; waits for the nodes to be idle
#   tests/engines/slurm_cluster.sh stop  [DIR]    # stops what start started (safe to repeat)
#   tests/engines/slurm_cluster.sh status [DIR]
#
# Everything lives in DIR (default $GOCL_SLURM_DIR, else /tmp/gocl-slurm):
# slurm.conf, a munge key and socket of its own, the daemons' state, logs and
# pid files; /etc/slurm and the system's munged are not touched. After start,
# `source DIR/env` (SLURM_CONF=DIR/slurm.conf) points srun, sinfo, sbatch at it.
#
# One node, this host under its real name, with CPUS (default 4) CPUs declared
# whatever the machine has (SlurmdParameters=config_overrides), so srun -n 4
# fits a 2-core machine. GOCL_SLURM_NODES=2 adds a second node, <host>-2:
# another slurmd on this host (NodeHostname=<host>, its own port), so that
# srun -N 2 gives real multi-node variables (SLURM_STEP_NODELIST=vm,vm-2,
# SLURM_STEP_TASKS_PER_NODE=2(x2)). No cgroups (proctrack/linuxproc,
# task/none), no accounting, no slurmdbd. The daemons run as root (slurmd
# must, to start jobs as their user), so start and stop need root.
set -euo pipefail

cmd=${1:-}
DIR=${2:-${GOCL_SLURM_DIR:-/tmp/gocl-slurm}}
CPUS=${GOCL_SLURM_CPUS:-4}
NODES=${GOCL_SLURM_NODES:-1}
CTLD_PORT=${GOCL_SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${GOCL_SLURM_SLURMD_PORT:-6818}  # node i listens on SLURMD_PORT + i
WAIT=${GOCL_SLURM_WAIT:-60}
HOST=$(hostname -s)

die() { echo "slurm_cluster.sh: $*" >&2; exit 1; }

case "$DIR" in /*) ;; *) DIR=$(pwd)/$DIR ;; esac
[ "$DIR" != / ] || die "the state directory cannot be /"

install() {
    if command -v srun >/dev/null && command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v munged >/dev/null; then
        return 0
    fi
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends slurm-wlm munge
}

# The nodes: those a started cluster wrote down (so stop stops them whatever
# GOCL_SLURM_NODES says now), else this host, then <host>-2 ...
node_names() {
    local i
    if [ -s "$DIR/nodes" ]; then
        cat "$DIR/nodes"
        return
    fi
    echo "$HOST"
    for i in $(seq 2 "$NODES"); do echo "$HOST-$i"; done
}

# The pid in pidfile $1 if that process is alive and runs the program $2.
live_pid() {
    local f=$1 prog=$2 pid
    [ -s "$f" ] || return 1
    pid=$(cat "$f")
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$prog" || return 1
    echo "$pid"
}

stop_one() {  # pidfile program
    local pid i
    pid=$(live_pid "$1" "$2") || { rm -f "$1"; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        [ -d "/proc/$pid" ] || break
        sleep 0.1
    done
    if [ -d "/proc/$pid" ]; then
        echo "slurm_cluster.sh: $2 ($pid) did not stop on SIGTERM: SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$1"
}

stop() {
    local n
    [ -d "$DIR" ] || return 0
    if [ -f "$DIR/slurm.conf" ] && live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null; then
        # jobs left by a failed test: their steps end with them
        SLURM_CONF="$DIR/slurm.conf" timeout 10 scancel --quiet --full --user="$(id -un)" 2>/dev/null || true
    fi
    for n in $(node_names); do stop_one "$DIR/slurmd-$n.pid" slurmd; done
    stop_one "$DIR/slurmctld.pid" slurmctld
    stop_one "$DIR/munged.pid" munged
}

write_conf() {
    local n i=0
    cat >"$DIR/slurm.conf" <<EOF
# Written by tests/engines/slurm_cluster.sh: a throwaway one-host cluster.
ClusterName=gocltest
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/slurmd-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups: linuxproc tracks a step's processes through /proc
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobContainerType=job_container/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# the nodes' CPUs are what this file says, not what the machine has
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=60
EOF
    for n in $(node_names); do
        echo "NodeName=$n NodeHostname=$HOST Port=$((SLURMD_PORT + i)) CPUs=$CPUS State=UNKNOWN" >>"$DIR/slurm.conf"
        i=$((i + 1))
    done
    echo "PartitionName=gocl Nodes=$(node_names | paste -sd,) Default=YES MaxTime=INFINITE State=UP" \
        >>"$DIR/slurm.conf"
}

idle_nodes() { sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l; }

start() {
    local n want states="" i t0=$SECONDS
    [ "$(id -u)" = 0 ] || die "start needs root (slurmd starts jobs as their user)"
    command -v slurmctld >/dev/null || die "no slurmctld: run '$0 install' first"
    stop
    rm -f "$DIR/nodes"
    mkdir -p "$DIR/munge" "$DIR/ctld" "$DIR/log"
    chmod 711 "$DIR/munge"  # clients reach the socket; the key stays 0600
    if [ ! -s "$DIR/munge/munge.key" ]; then
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    fi
    chmod 600 "$DIR/munge/munge.key"
    write_conf
    node_names >"$DIR/nodes.new"
    mv "$DIR/nodes.new" "$DIR/nodes"
    printf 'export SLURM_CONF=%s/slurm.conf\n' "$DIR" >"$DIR/env"
    export SLURM_CONF="$DIR/slurm.conf"

    # munged as root needs --force
    munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" \
        || die "munged did not start: $(tail -n 5 "$DIR/log/munged.log" 2>/dev/null)"
    slurmctld -c -f "$SLURM_CONF" || die "slurmctld did not start: $(tail -n 20 "$DIR/log/slurmctld.log")"
    for n in $(node_names); do
        mkdir -p "$DIR/slurmd-$n"
        slurmd -f "$SLURM_CONF" -N "$n" || die "slurmd -N $n did not start: $(tail -n 20 "$DIR/log/slurmd-$n.log")"
    done

    want=$(node_names | wc -l)
    for i in $(seq 1 $((WAIT * 2))); do
        [ "$(idle_nodes)" = "$want" ] && break
        sleep 0.5
    done
    states=$(sinfo -h -N -o '%N=%T' 2>/dev/null | sort -u | paste -sd' ' || true)
    if [ "$(idle_nodes)" = "$want" ]; then
        echo "slurm_cluster.sh: $want node(s) idle after $((SECONDS - t0))s ($states; SLURM_CONF=$SLURM_CONF)"
    else
        echo "slurm_cluster.sh: not every node is idle after ${WAIT}s: ${states:-sinfo answered nothing}" >&2
        tail -n 20 "$DIR"/log/*.log >&2 || true
        stop
        exit 1
    fi
}

status() {
    local p n
    for p in munged slurmctld; do
        if live_pid "$DIR/$p.pid" "$p" >/dev/null; then echo "$p: running"; else echo "$p: stopped"; fi
    done
    for n in $(node_names); do
        if live_pid "$DIR/slurmd-$n.pid" slurmd >/dev/null; then echo "slurmd $n: running"; else echo "slurmd $n: stopped"; fi
    done
    if [ -f "$DIR/slurm.conf" ]; then SLURM_CONF="$DIR/slurm.conf" sinfo -N 2>/dev/null || true; fi
}

case "$cmd" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 install|start|stop|status [DIR]" ;;
esac
