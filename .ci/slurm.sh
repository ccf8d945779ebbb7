#!/usr/bin/env bash
# Installs and starts the Slurm that the Slurm backend's tests run against
# (issue 18): Debian 12's Slurm 22.05 (slurmctld, slurmd, slurmrestd with JWT
# auth, munge), one node with 4 fake GPUs (gres.conf File= device nodes made
# with mknod under the test dir), no systemd and no cgroups
# (proctrack/linuxproc, task/none), everything under one directory with its own
# ports, pid files and logs, so it does not touch a system Slurm.
#
# Sourced by .ci/services.sh: it exports the variables below and stops what it
# started when the sourcing shell exits (chained before services.sh's own EXIT
# trap). Run alone:
#   bash .ci/slurm.sh --start   # start and leave running; prints the exports
#   bash .ci/slurm.sh --stop    # stop what --start started
#
# Tests (plugins/slurm, daemon/backend_slurm*_test.go) find the cluster through
#   GPUD_TEST_SLURMRESTD  http://127.0.0.1:PORT, slurmrestd (rest_auth/jwt)
#   GPUD_TEST_SLURM_CONF  its slurm.conf: `SLURM_CONF=... scontrol token
#                         username=$GPUD_TEST_SLURM_USER` mints a JWT, and
#                         sbatch/scancel/squeue reach the same cluster
#   GPUD_TEST_SLURM_USER  the unprivileged user jobs run as
#   GPUD_TEST_SLURM_DIR   the cluster's directory; output/ (mode 1777) is the
#                         shared directory jobs write their output into
# and skip without them, naming what is missing (they fail when CI is set).
slurm_dir=${GPUD_CI_SLURM_DIR:-/tmp/gpud-ci-slurm}
slurm_ctld_port=${GPUD_CI_SLURMCTLD_PORT:-16817}
slurm_d_port=${GPUD_CI_SLURMD_PORT:-16818}
slurm_rest_port=${GPUD_CI_SLURMRESTD_PORT:-16820}
slurm_user=gpudci      # jobs run as this user (the JWT's user name)
slurm_rest_user=gpudci-rest # slurmrestd drops to this user (below)

slurm_install() {
  local need=()
  for p in slurmctld slurmd slurmrestd; do [ -x /usr/sbin/$p ] || need+=($p); done
  command -v sinfo >/dev/null || need+=(slurm-client)
  [ -x /usr/sbin/munged ] || need+=(munge)
  # auth/jwt (AuthAltTypes) is its own package; slurmrestd's rest_auth/jwt needs it.
  [ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so ] || ls /usr/lib/*/slurm-wlm/auth_jwt.so >/dev/null 2>&1 || need+=(slurm-wlm-jwt-plugin)
  if [ ${#need[@]} -gt 0 ]; then
    echo "ci: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    # The packages enable system services; this script starts its own daemons.
    systemctl disable --now slurmctld slurmd slurmrestd munge >/dev/null 2>&1 || true
  fi
  for u in "$slurm_user" "$slurm_rest_user"; do
    getent passwd "$u" >/dev/null || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$u"
  done
}

slurm_write_config() {
  local d=$slurm_dir node mem
  rm -rf "$d"
  mkdir -p "$d"/{etc,state,spool,log,run,dev,munge}
  install -d -m 1777 "$d/output"
  chmod 755 "$d" "$d/etc" "$d/log" "$d/run" "$d/dev"
  node=$(hostname -s)
  # What slurmd sees (CPUs, memory), less some memory for everything else.
  mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  mem=$((mem * 3 / 4))
  # Four fake GPUs (gres type h100, which offers name H100): character devices with NVIDIA's major number. slurmd only
  # checks that the files exist (task/none: no cgroup device constraint).
  # Where the container may not make device nodes (no CAP_MKNOD), empty files
  # stand in: slurmd only stats them.
  for i in 0 1 2 3; do
    mknod -m 666 "$d/dev/nvidia$i" c 195 "$i" 2>/dev/null || : >"$d/dev/nvidia$i"
  done
  # The JWT key (HS256) slurmctld signs and checks tokens with.
  head -c 32 /dev/urandom >"$d/etc/jwt_hs256.key"
  chmod 600 "$d/etc/jwt_hs256.key"
  cat >"$d/etc/slurm.conf" <<EOF
ClusterName=gpudci
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$slurm_ctld_port
SlurmdPort=$slurm_d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/munge.socket
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$d/etc/jwt_hs256.key
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
# No systemd or cgroup delegation in CI containers.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
MinJobAge=300
# A job that asks for no memory gets this much per CPU, not the whole node.
DefMemPerCPU=512
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem Gres=gpu:h100:4 State=UNKNOWN
PartitionName=gpu Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  echo "NodeName=$node Name=gpu Type=h100 File=$d/dev/nvidia[0-3]" >"$d/etc/gres.conf"
  chmod 644 "$d/etc/slurm.conf" "$d/etc/gres.conf"
  chown munge:munge "$d/munge"
  chmod 755 "$d/munge"
}

# slurm_stop stops what slurm_start started, newest first, by its pid files.
slurm_stop() {
  local d=$slurm_dir f pid
  for f in slurmrestd slurmd slurmctld munged; do
    [ -f "$d/run/$f.pid" ] || continue
    pid=$(cat "$d/run/$f.pid")
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
      timeout 30 tail --pid="$pid" -f /dev/null
    fi
    rm -f "$d/run/$f.pid"
  done
}

slurm_start() (
  set -euo pipefail
  local d=$slurm_dir
  slurm_install
  slurm_stop
  slurm_write_config
  export SLURM_CONF=$d/etc/slurm.conf
  # munged runs as its own user on its own socket (the system one may run too).
  runuser -u munge -- /usr/sbin/munged --socket="$d/munge/munge.socket" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" \
    --seed-file="$d/munge/munged.seed" --key-file=/etc/munge/munge.key
  cp "$d/munge/munged.pid" "$d/run/munged.pid"
  /usr/sbin/slurmctld -i
  /usr/sbin/slurmd -N "$(hostname -s)"
  # slurmrestd refuses to run as root or SlurmUser ("slurmrestd should not be
  # run as the root user"): the supported way is -u/-g, which makes it drop to
  # an unprivileged user and group before it serves a request (slurmrestd(8)).
  # It authenticates each request by its JWT (SLURM_JWT=daemon selects
  # auth/jwt towards slurmctld); it listens on loopback only.
  # Only the Slurm API (openapi/v0.0.38; 22.05 also serves v0.0.36 and v0.0.37):
  # the dbv0.0.x plugins need slurmdbd, which this cluster does not run.
  SLURM_JWT=daemon nohup /usr/sbin/slurmrestd -a rest_auth/jwt -s openapi/v0.0.38 \
    -u "$(id -u "$slurm_rest_user")" -g "$(id -g "$slurm_rest_user")" \
    "127.0.0.1:$slurm_rest_port" >"$d/log/slurmrestd.log" 2>&1 &
  echo $! >"$d/run/slurmrestd.pid"
  local ok=
  for _ in $(seq 1 60); do
    if [ "$(sinfo -h -N -o %t 2>/dev/null)" = idle ] &&
      curl -s -o /dev/null "http://127.0.0.1:$slurm_rest_port/openapi" 2>/dev/null; then
      ok=1
      break
    fi
    sleep 1
  done
  if [ -z "$ok" ]; then
    echo "ci: Slurm's node is not idle or slurmrestd does not answer within 60s:" >&2
    sinfo -N -l >&2 || true
    tail -n 20 "$d"/log/*.log "$d/munge/munged.log" >&2 || true
    exit 1
  fi
  echo "ci: slurm $(sinfo -V | cut -d' ' -f2) ready: $(sinfo -h -N -o '%N %t %G'), slurmrestd on 127.0.0.1:$slurm_rest_port"
)

slurm_exports() {
  export GPUD_TEST_SLURMRESTD=http://127.0.0.1:$slurm_rest_port
  export GPUD_TEST_SLURM_CONF=$slurm_dir/etc/slurm.conf
  export GPUD_TEST_SLURM_USER=$slurm_user
  export GPUD_TEST_SLURM_DIR=$slurm_dir
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
  --start)
    slurm_start || exit 1
    slurm_exports
    echo "export GPUD_TEST_SLURMRESTD=$GPUD_TEST_SLURMRESTD GPUD_TEST_SLURM_CONF=$GPUD_TEST_SLURM_CONF GPUD_TEST_SLURM_USER=$GPUD_TEST_SLURM_USER GPUD_TEST_SLURM_DIR=$GPUD_TEST_SLURM_DIR"
    ;;
  --stop) slurm_stop ;;
  *)
    echo "usage: bash .ci/slurm.sh --start|--stop (or source it from .ci/services.sh)" >&2
    exit 2
    ;;
  esac
else
  # Stop Slurm when the sourcing shell exits, then run the EXIT trap that was
  # there before (services.sh's dockerd stop). Set before the start, so a
  # start that fails halfway stops the daemons it did start.
  eval "slurm_prev_trap=($(trap -p EXIT))"
  trap "slurm_stop; ${slurm_prev_trap[2]:-}" EXIT
  slurm_start || { echo "ci: starting Slurm failed" >&2; return 1; }
  slurm_exports
fi
