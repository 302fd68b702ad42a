#!/usr/bin/env bash
# A real single-node Slurm (Debian 12 packages, Slurm 22.05) on localhost, for tests.
#
#   slurm.sh install   apt-get the packages (no-op when already installed)
#   slurm.sh start     write config + state under the state dir, start the daemons,
#                      wait until usable; prints `export SLURM_CONF=...` on stdout
#   slurm.sh stop      cancel our jobs, stop exactly the recorded daemon pids
#   slurm.sh status    per-daemon liveness + sinfo; exit 0 only if fully up
#   slurm.sh env       prints `export SLURM_CONF=...`
#
# Everything (config, keys, logs, spool, MariaDB datadir, pid files) lives in the state
# dir: $FIBEXP_SLURM_DIR, else <repo>/outputs/slurm. Runs as root; no systemd needed.
# Ports: $FIBEXP_SLURM_PORT_BASE (default 16810): +0 mariadb, +1 slurmctld, +2 slurmd,
# +3 slurmdbd. Progress and errors go to stderr; stdout carries only the export line.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
STATE=$(realpath -m "${FIBEXP_SLURM_DIR:-$REPO/outputs/slurm}")

PORT_BASE=${FIBEXP_SLURM_PORT_BASE:-16810}
MARIADB_PORT=$((PORT_BASE + 0))
SLURMCTLD_PORT=$((PORT_BASE + 1))
SLURMD_PORT=$((PORT_BASE + 2))
SLURMDBD_PORT=$((PORT_BASE + 3))

CLUSTER=${FIBEXP_SLURM_CLUSTER:-fibexp}
PARTITION=debug
NODE=$(hostname -s)
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd) # start order; stop is the reverse

ETC=$STATE/etc
RUN=$STATE/run
LOG=$STATE/log
MUNGE_DIR=$STATE/munge
MUNGE_SOCK=$MUNGE_DIR/munge.socket.2
DB_DIR=$STATE/mariadb
DB_SOCK=$DB_DIR/mariadbd.sock
SLURM_CONF_PATH=$ETC/slurm.conf
DBD_CONF=$ETC/slurmdbd.conf
START_TIMEOUT=${FIBEXP_SLURM_START_TIMEOUT:-60} # seconds, per wait step

say() { echo "slurm.sh: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- pid bookkeeping
pidfile() { echo "$RUN/$1.pid"; }

# Pid of a daemon of ours if it is alive. The executable is checked too, so a stale pid
# file whose pid was reused by some other process is never treated as ours.
live_pid() {
    local f pid exe
    f=$(pidfile "$1")
    [[ -s $f ]] || return 1
    pid=$(tr -dc 0-9 <"$f")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
    [[ ${exe% (deleted)} == "$(readlink -f "/usr/sbin/$1")" ]] || return 1
    echo "$pid"
}

# wait_for SECONDS DAEMON CMD...: poll CMD until it succeeds. Gives up at the deadline,
# or early when DAEMON (if not "-") has died, so a crash fails fast rather than after
# the whole timeout. Daemons write their pid file within a moment of starting.
wait_for() {
    local secs=$1 daemon=$2
    shift 2
    local start=$SECONDS deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        if [[ $daemon != - ]] && ((SECONDS - start >= 3)) && ! live_pid "$daemon" >/dev/null; then
            say "$daemon died while starting"
            return 1
        fi
        sleep 0.2
    done
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Refuse to start a daemon on a port someone else already listens on.
check_port_free() {
    if port_busy "$1"; then
        die "port $1 ($2) is already in use by another process; set FIBEXP_SLURM_PORT_BASE"
    fi
}

# Clients need the config path; also bound every client call so a dead controller
# cannot hang us for long.
sl() { SLURM_CONF=$SLURM_CONF_PATH timeout 20 "$@"; }

fail_with_log() { # fail_with_log LOGFILE MESSAGE
    say "ERROR: $2"
    [[ -f $1 ]] && { say "last lines of $1:"; tail -n 25 "$1" >&2; }
    exit 1
}

# ---------------------------------------------------------------- install
cmd_install() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == "install ok installed" ]] ||
            missing+=("$p")
    done
    if ((${#missing[@]} == 0)); then
        say "packages already installed"
        return 0
    fi
    command -v apt-get >/dev/null || die "apt-get not found; install ${missing[*]} yourself"
    [[ $(id -u) == 0 ]] || die "must run as root to install packages"
    # Without a policy-rc.d, the packages' maintainer scripts would start the system
    # munge/mariadb/slurm services; ours run privately, so block that for the install.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # A fresh image may have empty package lists: update once and retry.
    # Another install (the UI test's chromium, on the other pytest worker) may hold dpkg's lock: wait for it.
    local apt=(apt-get -o DPkg::Lock::Timeout=200)
    if ! "${apt[@]}" install -y --no-install-recommends "${PACKAGES[@]}" >&2; then
        "${apt[@]}" update >&2 && "${apt[@]}" install -y --no-install-recommends "${PACKAGES[@]}" >&2 ||
            die "apt-get install failed"
    fi
}

# ---------------------------------------------------------------- config
write_configs() {
    local ncpu cpus mem_kb mem_mb
    # Advertise more CPUs than cores so several small jobs can run at once (tests are
    # mostly sleeping/IO); slurmd accepts it thanks to SlurmdParameters=config_overrides.
    ncpu=$(nproc)
    cpus=${FIBEXP_SLURM_CPUS:-$((2 * ncpu > 8 ? 2 * ncpu : 8))}
    # RealMemory from what is free now, so --mem requests that cannot be met are
    # rejected at submit time (EnforcePartLimits) instead of pending forever.
    mem_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    mem_mb=$((mem_kb * 9 / 10 / 1024))
    ((mem_mb >= 1024)) || mem_mb=1024

    # Written every start (cheap, and picks up a changed port base or CPU count).
    cat >"$SLURM_CONF_PATH" <<EOF
# Generated by tests/cluster/slurm.sh; rewritten on every start.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=$SLURMD_PORT
# Root is the job user in tests; the daemons run as root too.
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Our private munged. cred_expire also sets how long a requeued job waits (120 s default).
AuthInfo=socket=$MUNGE_SOCK,cred_expire=10
StateSaveLocation=$STATE/spool/slurmctld
SlurmdSpoolDir=$STATE/spool/slurmd
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups/systemd here: track processes by parentage, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
# Memory is a consumable resource (so --mem is a limit that OverMemoryKill enforces); a job
# that asks for none gets DefMemPerCPU per CPU instead of the whole node.
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=1024
MpiDefault=none
# slurmctld refuses to start if the default mail program is missing.
MailProg=/bin/true
# A node that went down (e.g. our own stop) comes back by itself when slurmd registers.
ReturnToService=2
# Reject impossible requests at submit time instead of leaving them pending forever.
EnforcePartLimits=ALL
# Trust the CPUs/RealMemory written here rather than what the hardware reports.
SlurmdParameters=config_overrides
# Short grace between SIGTERM and SIGKILL for cancelled/timed-out jobs.
KillWait=5
# Rescan pending jobs often (default 60 s): a requeued job becomes eligible after
# cred_expire and should not then wait for the next periodic pass.
SchedulerParameters=sched_interval=2,bf_interval=2
# Accounting through slurmdbd: sacct works, and submitit can see CANCELLED/FAILED.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$SLURMDBD_PORT
AccountingStoragePass=$MUNGE_SOCK
# Sample each job's memory every second and kill a job past its --mem (no cgroups here), so an
# out-of-memory cell ends OUT_OF_MEMORY as it would on a real cluster.
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
JobCompType=jobcomp/none
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=UNLIMITED State=UP
EOF

    # slurmdbd finds slurmdbd.conf next to SLURM_CONF; it refuses it unless mode 600.
    (
        umask 077
        cat >"$DBD_CONF" <<EOF
# Generated by tests/cluster/slurm.sh; rewritten on every start.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$SLURMDBD_PORT
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MARIADB_PORT
StorageUser=slurm
StoragePass=$(cat "$ETC/db.pass")
StorageLoc=slurm_acct_db
EOF
    )
    chmod 600 "$DBD_CONF"
}

# ---------------------------------------------------------------- daemons
start_munged() {
    live_pid munged >/dev/null && return 0
    # munged insists on a private dir owned by its user, and a key only it can read.
    install -d -m 0755 -o munge -g munge "$MUNGE_DIR"
    if [[ ! -s $MUNGE_DIR/munge.key ]]; then
        dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1024 count=1 status=none
    fi
    chown munge:munge "$MUNGE_DIR/munge.key"
    chmod 0400 "$MUNGE_DIR/munge.key"
    rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
    touch "$LOG/munged.log" "$RUN/munged.pid"
    chown munge:munge "$LOG/munged.log" "$RUN/munged.pid"
    # setpriv execs (no extra fork); munged daemonizes and writes its own pid file.
    setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged \
        --socket="$MUNGE_SOCK" --key-file="$MUNGE_DIR/munge.key" \
        --pid-file="$RUN/munged.pid" --log-file="$LOG/munged.log" \
        --seed-file="$MUNGE_DIR/munged.seed" 9>&- </dev/null >>"$LOG/munged.log" 2>&1 ||
        fail_with_log "$LOG/munged.log" "munged did not start"
    wait_for "$START_TIMEOUT" munged bash -c "munge -n -S '$MUNGE_SOCK' | unmunge -S '$MUNGE_SOCK'" ||
        fail_with_log "$LOG/munged.log" "munged does not answer on $MUNGE_SOCK"
}

db_sql() { mariadb --no-defaults --socket="$DB_SOCK" -u root -e "$1"; }

start_mariadbd() {
    if ! live_pid mariadbd >/dev/null; then
        install -d -m 0755 -o mysql -g mysql "$DB_DIR" "$DB_DIR/data" "$DB_DIR/tmp"
        if [[ ! -d $DB_DIR/data/mysql ]]; then
            say "initialising MariaDB datadir"
            # Root logs in through the unix socket as OS root: no password to manage.
            mariadb-install-db --no-defaults --user=mysql --datadir="$DB_DIR/data" \
                --auth-root-authentication-method=socket --skip-test-db \
                >>"$LOG/mariadbd.log" 2>&1 ||
                fail_with_log "$LOG/mariadbd.log" "mariadb-install-db failed"
        fi
        rm -f "$DB_SOCK"
        touch "$LOG/mariadbd.log" && chown mysql:mysql "$LOG/mariadbd.log"
        # --no-defaults: ignore /etc/mysql (the system instance's datadir/socket/port).
        # mariadbd does not daemonize: give it its own session (a Ctrl-C aimed at the
        # caller must not reach it) and detach it from our stdio, so a caller capturing
        # our output (pytest) does not wait on it.
        setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DB_DIR/data" \
            --socket="$DB_SOCK" --port="$MARIADB_PORT" --bind-address=127.0.0.1 \
            --pid-file="$DB_DIR/mariadbd.pid" --log-error="$LOG/mariadbd.log" \
            --tmpdir="$DB_DIR/tmp" --skip-name-resolve --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 \
            9>&- </dev/null >>"$LOG/mariadbd.log" 2>&1 &
        # Record $! now (mariadbd runs as mysql and cannot write into $RUN), then the
        # pid mariadbd itself reports once it answers, in case setsid had to fork.
        echo $! >"$RUN/mariadbd.pid"
        wait_for "$START_TIMEOUT" mariadbd mariadb-admin --no-defaults --socket="$DB_SOCK" -u root ping ||
            fail_with_log "$LOG/mariadbd.log" "mariadbd does not answer on $DB_SOCK"
        cp "$DB_DIR/mariadbd.pid" "$RUN/mariadbd.pid"
    fi
    # Idempotent: the accounting db and a TCP user for slurmdbd (it cannot use a socket).
    local pass
    pass=$(cat "$ETC/db.pass")
    db_sql "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
        ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
        ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pass';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" ||
        die "could not create the slurm accounting database"
}

start_slurmdbd() {
    if ! live_pid slurmdbd >/dev/null; then
        # slurmdbd has no -f: it reads slurmdbd.conf from SLURM_CONF's directory.
        SLURM_CONF=$SLURM_CONF_PATH /usr/sbin/slurmdbd 9>&- </dev/null >>"$LOG/slurmdbd.log" 2>&1 ||
            fail_with_log "$LOG/slurmdbd.log" "slurmdbd did not start"
        # First start creates the tables, which takes a few seconds.
        wait_for "$START_TIMEOUT" slurmdbd port_busy "$SLURMDBD_PORT" ||
            fail_with_log "$LOG/slurmdbd.log" "slurmdbd does not listen on $SLURMDBD_PORT"
    fi
    # Register the cluster before slurmctld first talks to the db.
    local have
    have=$(sl sacctmgr -n -P list cluster format=cluster 2>/dev/null || true)
    if ! grep -qx "$CLUSTER" <<<"$have"; then
        sl sacctmgr -i add cluster "$CLUSTER" >&2 ||
            fail_with_log "$LOG/slurmdbd.log" "sacctmgr add cluster $CLUSTER failed"
    fi
}

start_slurmctld() {
    live_pid slurmctld >/dev/null && return 0
    # No -c: a warm start recovers the saved job state (job ids keep increasing).
    /usr/sbin/slurmctld -f "$SLURM_CONF_PATH" 9>&- </dev/null >>"$LOG/slurmctld.log" 2>&1 ||
        fail_with_log "$LOG/slurmctld.log" "slurmctld did not start"
    wait_for "$START_TIMEOUT" slurmctld sl scontrol ping ||
        fail_with_log "$LOG/slurmctld.log" "slurmctld does not answer"
}

start_slurmd() {
    live_pid slurmd >/dev/null && return 0
    /usr/sbin/slurmd -f "$SLURM_CONF_PATH" -N "$NODE" 9>&- </dev/null >>"$LOG/slurmd.log" 2>&1 ||
        fail_with_log "$LOG/slurmd.log" "slurmd did not start"
}

node_state() { sl sinfo -h -N -n "$NODE" -o %t 2>/dev/null | head -n1; }

node_usable() { [[ $(node_state) =~ ^(idle|mix|alloc|comp)$ ]]; }

all_alive() {
    local d
    for d in "${DAEMONS[@]}"; do live_pid "$d" >/dev/null || return 1; done
}

cmd_start() {
    [[ $(id -u) == 0 ]] || die "must run as root (daemons run as root, jobs as root)"
    local p
    for p in munged mariadbd slurmdbd slurmctld slurmd; do
        [[ -x /usr/sbin/$p ]] || die "/usr/sbin/$p missing: run '$0 install' first"
    done
    mkdir -p "$STATE"
    # One start/stop at a time (e.g. two test sessions starting together). Every daemon
    # is started with 9>&-: one that inherited this fd would hold the lock forever.
    exec 9>"$STATE/.lock"
    flock -w 120 9 || die "timed out waiting for the lock on $STATE/.lock"

    if all_alive && sl sinfo >/dev/null 2>&1; then
        say "already running (state dir $STATE)"
        echo "export SLURM_CONF=$SLURM_CONF_PATH"
        return 0
    fi

    local t0=$SECONDS
    # Dirs other users must traverse (munge, mysql) need 0755 on every level.
    chmod 0755 "$STATE"
    install -d -m 0755 "$ETC" "$RUN" "$LOG" "$STATE/spool/slurmctld" "$STATE/spool/slurmd"
    # unix socket paths are limited to 107 bytes.
    ((${#MUNGE_SOCK} < 100 && ${#DB_SOCK} < 100)) ||
        die "state dir path too long for unix sockets: $STATE (set FIBEXP_SLURM_DIR)"
    if [[ ! -s $ETC/db.pass ]]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$ETC/db.pass")
    fi
    # Fail before starting anything if another process holds one of our ports.
    live_pid mariadbd >/dev/null || check_port_free "$MARIADB_PORT" mariadb
    live_pid slurmdbd >/dev/null || check_port_free "$SLURMDBD_PORT" slurmdbd
    live_pid slurmctld >/dev/null || check_port_free "$SLURMCTLD_PORT" slurmctld
    live_pid slurmd >/dev/null || check_port_free "$SLURMD_PORT" slurmd
    write_configs

    start_munged
    start_mariadbd
    start_slurmdbd
    start_slurmctld
    start_slurmd

    # The node registers a few seconds after slurmd starts. A drain/down state saved
    # by an earlier run survives restarts, so resume it once if we see it.
    local resumed=0 deadline=$((SECONDS + START_TIMEOUT)) st
    until node_usable; do
        st=$(node_state)
        if [[ $resumed == 0 && $st =~ (drain|drng|down)$ ]]; then
            say "node is '$st' from an earlier run; resuming it"
            sl scontrol update nodename="$NODE" state=resume >&2 || true
            resumed=1
        fi
        live_pid slurmd >/dev/null || fail_with_log "$LOG/slurmd.log" "slurmd died while starting"
        ((SECONDS < deadline)) ||
            fail_with_log "$LOG/slurmd.log" "node $NODE not idle after ${START_TIMEOUT}s (state '$st')"
        sleep 0.2
    done
    wait_for "$START_TIMEOUT" slurmdbd sl sacct -n -X -S now-1minutes ||
        fail_with_log "$LOG/slurmdbd.log" "sacct does not answer (slurmdbd/mariadb)"
    say "slurm up in $((SECONDS - t0))s (state dir $STATE)"
    echo "export SLURM_CONF=$SLURM_CONF_PATH"
}

# ---------------------------------------------------------------- stop
# stop_daemons NAME...: TERM the recorded pids together, KILL any still alive after a
# bounded wait. Only pids from our pid files (checked by live_pid) are ever signalled.
stop_daemons() {
    local name pid pids=() deadline
    for name in "$@"; do
        if pid=$(live_pid "$name"); then
            say "stopping $name (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    deadline=$((SECONDS + 20))
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            say "pid $pid ignored SIGTERM for 20 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    for name in "$@"; do rm -f "$(pidfile "$name")"; done
}

cmd_stop() {
    [[ -d $STATE ]] || { say "nothing to stop ($STATE does not exist)"; return 0; }
    exec 9>"$STATE/.lock"
    flock -w 120 9 || die "timed out waiting for the lock on $STATE/.lock"
    # Job steps run under slurmstepd, which outlives slurmd: cancel our jobs first, so
    # stopping the cluster does not leave job processes behind.
    if live_pid slurmctld >/dev/null && live_pid slurmd >/dev/null; then
        local jobs
        jobs=$(sl squeue -h -o %A 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            say "cancelling jobs: $(echo $jobs)"
            # shellcheck disable=SC2086
            sl scancel $jobs >&2 || true
            wait_for 30 - bash -c "[[ -z \$(SLURM_CONF='$SLURM_CONF_PATH' timeout 20 squeue -h -t R,CG,S -o %A) ]]" ||
                say "warning: some jobs still running after 30 s"
        fi
    fi
    # Reverse start order, in three waves (each takes 2-3 s to exit): slurmctld flushes
    # its last records to slurmdbd, which needs mariadbd and munged until it has exited.
    stop_daemons slurmd slurmctld
    stop_daemons slurmdbd
    stop_daemons mariadbd munged
}

# ---------------------------------------------------------------- status / env
cmd_status() {
    local d pid ok=0
    for d in "${DAEMONS[@]}"; do
        if pid=$(live_pid "$d"); then
            echo "$d: running (pid $pid)"
        else
            echo "$d: not running"
            ok=3
        fi
    done
    if [[ -f $SLURM_CONF_PATH ]] && live_pid slurmctld >/dev/null; then
        sl sinfo || ok=3
    fi
    echo "export SLURM_CONF=$SLURM_CONF_PATH"
    return $ok
}

cmd_env() { echo "export SLURM_CONF=$SLURM_CONF_PATH"; }

case ${1:-} in
install) cmd_install ;;
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) cmd_env ;;
*)
    echo "usage: $0 {install|start|stop|status|env}" >&2
    exit 2
    ;;
esac
