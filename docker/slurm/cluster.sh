#!/usr/bin/env bash
# A whole Slurm cluster on this machine, generated from Switchyard's own model (docs/slurm.md).
#
#   docker/slurm/cluster.sh start     install what is missing, start what is not running
#   docker/slurm/cluster.sh stop      cancel jobs, stop every daemon this cluster started
#   docker/slurm/cluster.sh status    daemons and nodes; exit 0 healthy, 1 unhealthy, 3 stopped
#   docker/slurm/cluster.sh restart   stop, then start
#   docker/slurm/cluster.sh destroy   stop, drop the accounting database, delete the state
#
# munged, slurmdbd (on the local MariaDB), slurmctld and one `slurmd -N NAME` per node, all
# with their config, state, logs and pid files under one directory. `start` is idempotent: it
# finds running daemons by their pid files and starts only what is dead. The last line `start`
# prints is the export clients need; `<state>/env` holds the same for `source`.
#
# Environment (all optional):
#   SWITCHYARD_SLURM_DIR            state directory        [/var/tmp/switchyard-slurm]
#   SWITCHYARD_SLURM_CLUSTER        Slurm ClusterName      [switchyard]
#   SWITCHYARD_SLURM_NODES_PER_POOL nodes kept per pool, or "all"                       [2]
#   SWITCHYARD_SLURM_SITE           demo: seed_demo's site in a dedicated SQLite under the
#                                   state dir; db: the pools of the database the environment
#                                   configures (DATABASE_URL ...) with backend
#                                   $SWITCHYARD_SLURM_BACKEND [slurm]                    [demo]
#   SWITCHYARD_SLURM_CTLD_PORT / _DBD_PORT / _NODE_PORT_BASE          [16817 / 16819 / 17001]
#   SWITCHYARD_SLURM_DB_HOST / _DB_PORT / _DB_ADMIN  MariaDB and an account that may create
#                                   databases and users (password: MYSQL_PWD) [127.0.0.1/3306/root]
#   SWITCHYARD_SLURM_WAIT           seconds to wait for each daemon                      [60]
#   SWITCHYARD_PYTHON               the project's python                [<project>/.venv/bin/python]
#   SWITCHYARD_SLURM_IMAGE_ACCOUNT  the account that owns the nodes' image caches and pulls
#                                   into them (made if missing)                [switchyard-images]
#   SWITCHYARD_SLURM_IMAGE_PULL_TIMEOUT / _IMAGE_CACHE_MB  one pull's seconds; each node's
#                                   cache cap                                      [300 / 4096]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${SWITCHYARD_SLURM_DIR:-/var/tmp/switchyard-slurm}
STATE=${STATE%/}
ME=cluster.sh
WHY_ROOT="the daemons run as root, munged as munge"
# shellcheck source=docker/lib.sh
source "$ROOT/docker/lib.sh"
CLUSTER=${SWITCHYARD_SLURM_CLUSTER:-switchyard}
SCALE=${SWITCHYARD_SLURM_NODES_PER_POOL:-2}
SITE=${SWITCHYARD_SLURM_SITE:-demo}
BACKEND_ALIAS=${SWITCHYARD_SLURM_BACKEND:-slurm}
CTLD_PORT=${SWITCHYARD_SLURM_CTLD_PORT:-16817}
DBD_PORT=${SWITCHYARD_SLURM_DBD_PORT:-16819}
NODE_PORT_BASE=${SWITCHYARD_SLURM_NODE_PORT_BASE:-17001}
DB_HOST=${SWITCHYARD_SLURM_DB_HOST:-127.0.0.1}
DB_PORT=${SWITCHYARD_SLURM_DB_PORT:-3306}
DB_ADMIN=${SWITCHYARD_SLURM_DB_ADMIN:-root}
WAIT=${SWITCHYARD_SLURM_WAIT:-60}
PY=${SWITCHYARD_PYTHON:-$ROOT/.venv/bin/python}
IMAGE_ACCOUNT=${SWITCHYARD_SLURM_IMAGE_ACCOUNT:-switchyard-images}
PULL_TIMEOUT=${SWITCHYARD_SLURM_IMAGE_PULL_TIMEOUT:-300}
IMAGE_CACHE_MB=${SWITCHYARD_SLURM_IMAGE_CACHE_MB:-4096}

ETC=$STATE/etc
LOG=$STATE/log
RUN=$STATE/run
MUNGE_DIR=$STATE/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
MARKER=$STATE/.switchyard-slurm
export SLURM_CONF=$ETC/slurm.conf
export PATH=$PATH:/usr/sbin:/sbin
# One database (and MariaDB user) per state directory and cluster name.
DB_NAME=sy_slurm_$(printf '%s|%s' "$STATE" "$CLUSTER" | sha1sum | cut -c1-10)

check_settings() {
  [[ $STATE == /* && $STATE != / && $STATE =~ ^[A-Za-z0-9._/+-]+$ ]] ||
    fail "SWITCHYARD_SLURM_DIR must be an absolute path of letters, digits, '._+-/' (got '$STATE')"
  [[ $CLUSTER =~ ^[a-z0-9][a-z0-9_-]{0,39}$ ]] ||
    fail "SWITCHYARD_SLURM_CLUSTER must be lowercase letters, digits, '_' or '-' (got '$CLUSTER')"
  [[ $SCALE == all || $SCALE =~ ^[1-9][0-9]*$ ]] ||
    fail "SWITCHYARD_SLURM_NODES_PER_POOL must be a positive integer or 'all' (got '$SCALE')"
  [[ $SITE == demo || $SITE == db ]] || fail "SWITCHYARD_SLURM_SITE must be demo or db (got '$SITE')"
  [[ $IMAGE_ACCOUNT =~ ^[a-z_][a-z0-9_-]{0,31}$ ]] ||
    fail "SWITCHYARD_SLURM_IMAGE_ACCOUNT must be a Unix account name (got '$IMAGE_ACCOUNT')"
  [[ $PULL_TIMEOUT =~ ^[1-9][0-9]*$ && $IMAGE_CACHE_MB =~ ^[1-9][0-9]*$ ]] ||
    fail "SWITCHYARD_SLURM_IMAGE_PULL_TIMEOUT and _IMAGE_CACHE_MB must be positive integers"
}

# --- packages --------------------------------------------------------------------------------

ensure_packages() {
  local missing=()
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null ||
    missing+=(slurm-wlm)
  command -v slurmdbd >/dev/null || missing+=(slurmdbd)
  command -v munged >/dev/null && command -v mungekey >/dev/null || missing+=(munge)
  command -v mariadb >/dev/null || command -v mysql >/dev/null || missing+=(mariadb-client)
  # slurmd loads mpi/pmix's library when it starts: `srun --mpi=pmix` (MPI across nodes).
  ldconfig -p 2>/dev/null | grep 'libpmix\.so\.2 ' >/dev/null || missing+=(libpmix2)
  # The nodes' Prolog pulls and unpacks a job's image; busybox sets its limits inside it.
  command -v skopeo >/dev/null || missing+=(skopeo)
  command -v umoci >/dev/null || missing+=(umoci)
  [ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || missing+=(busybox-static)
  [ ${#missing[@]} -eq 0 ] && return
  say "installing: ${missing[*]}"
  # Keep the packages from starting their system services (we run our own daemons).
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [ ! -e $policy ]; then
    printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy && own_policy=1
  fi
  local rc=0
  {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}"; }
  } >"/tmp/switchyard-slurm-apt.$$.log" 2>&1 || rc=$?
  [ $own_policy -eq 1 ] && rm -f $policy
  [ $rc -eq 0 ] || fail "apt-get install ${missing[*]} failed" "/tmp/switchyard-slurm-apt.$$.log"
  rm -f "/tmp/switchyard-slurm-apt.$$.log"
}

# resolve_commands [soft]: absolute paths of the commands used; soft: no failure if missing.
resolve_commands() {
  local c
  for c in slurmctld slurmd slurmdbd munged mungekey munge unmunge sacctmgr scontrol sinfo \
    squeue scancel; do
    command -v "$c" >/dev/null || [ "${1:-}" = soft ] ||
      fail "$c not found (is slurm-wlm / slurmdbd / munge installed?)"
  done
  SLURMCTLD=$(command -v slurmctld || true) SLURMD=$(command -v slurmd || true)
  SLURMDBD=$(command -v slurmdbd || true) MUNGED=$(command -v munged || true)
  SACCTMGR=$(command -v sacctmgr || true) SCONTROL=$(command -v scontrol || true)
  SINFO=$(command -v sinfo || true) SQUEUE=$(command -v squeue || true)
  SCANCEL=$(command -v scancel || true) MYSQL=$(command -v mariadb || command -v mysql || true)
}

# --- processes -------------------------------------------------------------------------------

# stop_pids SECONDS PID...: TERM, wait, then KILL what is left.
stop_pids() {
  local seconds=$1 pid left i
  shift
  [ $# -eq 0 ] && return
  kill -CONT "$@" 2>/dev/null || true # a frozen (SIGSTOPped) daemon must see the TERM
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 0; i < seconds * 10; i++)); do
    left=0
    for pid in "$@"; do [ -d "/proc/$pid" ] && left=1; done
    [ $left -eq 0 ] && return
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
}

# Job steps of this cluster outlive slurmd: find them by the SLURM_CONF they run with.
cluster_steps() {
  local dir pid
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [ "$(cat "$dir/comm" 2>/dev/null)" = slurmstepd ] || continue
    tr '\0' '\n' <"$dir/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF" && echo "$pid"
  done
  return 0
}

descendants() {
  local parents=" $* " found=1 pid ppid result=()
  local table
  table=$(ps -e -o pid=,ppid=)
  while [ $found -eq 1 ]; do
    found=0
    while read -r pid ppid; do
      if [[ $parents == *" $ppid "* && $parents != *" $pid "* ]]; then
        parents+="$pid "
        result+=("$pid")
        found=1
      fi
    done <<<"$table"
  done
  printf '%s\n' "${result[@]}"
}

# --- munge -----------------------------------------------------------------------------------

start_munge() {
  local pid
  if pid=$(pid_of munged "$MUNGE_DIR/munged.pid"); then
    say "munged     running (pid $pid)"
    return
  fi
  install -d -o munge -g munge -m 0755 "$MUNGE_DIR"
  if [ ! -s "$MUNGE_DIR/munge.key" ]; then
    mungekey --create --keyfile="$MUNGE_DIR/munge.key" --force >/dev/null
  fi
  chown munge:munge "$MUNGE_DIR/munge.key"
  chmod 0400 "$MUNGE_DIR/munge.key"
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock" "$MUNGE_DIR/munged.pid"
  touch "$LOG/munged.log" && chown munge:munge "$LOG/munged.log"
  runuser -u munge -- "$MUNGED" --socket="$MUNGE_SOCKET" --key-file="$MUNGE_DIR/munge.key" \
    --log-file="$LOG/munged.log" --pid-file="$MUNGE_DIR/munged.pid" \
    --seed-file="$MUNGE_DIR/munged.seed" </dev/null >>"$LOG/munged.out" 2>&1 9>&- ||
    fail "munged did not start" "$LOG/munged.log" "$LOG/munged.out"
  local i
  for ((i = 0; i < WAIT * 10; i++)); do
    munge -S "$MUNGE_SOCKET" -n 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 && break
    sleep 0.1
  done
  pid=$(pid_of munged "$MUNGE_DIR/munged.pid") || fail "munged is not running" "$LOG/munged.log"
  say "munged     started (pid $pid)"
}

# --- accounting database and slurmdbd --------------------------------------------------------

db_admin() {
  [ -n "$MYSQL" ] || fail "no mariadb/mysql client"
  "$MYSQL" --protocol=TCP -h"$DB_HOST" -P"$DB_PORT" -u"$DB_ADMIN" --batch --skip-column-names
}

setup_database() {
  local fresh=0 pass sql host
  if [ ! -s "$ETC/dbpass" ]; then
    fresh=1
    (umask 077 && head -c 32 /dev/urandom | base64 | tr -dc A-Za-z0-9 | head -c 32 >"$ETC/dbpass")
  fi
  pass=$(cat "$ETC/dbpass")
  sql=""
  # A new state directory starts a new accounting history: job ids restart at 1.
  [ $fresh -eq 1 ] && sql+="DROP DATABASE IF EXISTS \`$DB_NAME\`;"
  sql+="CREATE DATABASE IF NOT EXISTS \`$DB_NAME\`;"
  for host in 127.0.0.1 localhost; do
    sql+="CREATE USER IF NOT EXISTS '$DB_NAME'@'$host' IDENTIFIED BY '$pass';"
    sql+="ALTER USER '$DB_NAME'@'$host' IDENTIFIED BY '$pass';"
    sql+="GRANT ALL PRIVILEGES ON \`$DB_NAME\`.* TO '$DB_NAME'@'$host';"
  done
  db_admin <<<"$sql" >"$LOG/mariadb-setup.log" 2>&1 ||
    fail "cannot set up database $DB_NAME on MariaDB $DB_HOST:$DB_PORT as $DB_ADMIN" \
      "$LOG/mariadb-setup.log"
  (
    umask 077
    cat >"$ETC/slurmdbd.conf" <<EOF
# Written by docker/slurm/cluster.sh (holds the database password: mode 600).
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=$DB_HOST
StoragePort=$DB_PORT
StorageUser=$DB_NAME
StoragePass=$pass
StorageLoc=$DB_NAME
EOF
  )
  chmod 600 "$ETC/slurmdbd.conf"
}

dbd_answers() { timeout 10 "$SACCTMGR" -n -P list cluster format=cluster 2>/dev/null; }

start_slurmdbd() {
  local pid i
  if pid=$(pid_of slurmdbd "$RUN/slurmdbd.pid"); then
    say "slurmdbd   running (pid $pid)"
  else
    port_busy "$DBD_PORT" && fail "port $DBD_PORT (slurmdbd) is taken by another process"
    setup_database
    "$SLURMDBD" </dev/null >>"$LOG/slurmdbd.out" 2>&1 9>&- ||
      fail "slurmdbd did not start" "$LOG/slurmdbd.log" "$LOG/slurmdbd.out"
    for ((i = 0; i < WAIT * 5; i++)); do
      dbd_answers >/dev/null && break
      pid_of slurmdbd "$RUN/slurmdbd.pid" >/dev/null || [ $i -lt 25 ] ||
        fail "slurmdbd exited" "$LOG/slurmdbd.log"
      sleep 0.2
    done
    pid=$(pid_of slurmdbd "$RUN/slurmdbd.pid") || fail "slurmdbd is not running" "$LOG/slurmdbd.log"
    say "slurmdbd   started (pid $pid)"
  fi
  local clusters
  clusters=$(dbd_answers) || fail "slurmdbd does not answer on port $DBD_PORT" "$LOG/slurmdbd.log"
  if ! grep -qxF "$CLUSTER" <<<"$clusters"; then
    "$SACCTMGR" -i add cluster "$CLUSTER" >"$LOG/sacctmgr.log" 2>&1 ||
      fail "sacctmgr add cluster $CLUSTER failed" "$LOG/sacctmgr.log" "$LOG/slurmdbd.log"
    say "accounting cluster $CLUSTER added"
  fi
}

# --- configuration from Switchyard's model ---------------------------------------------------

# generate_config: write the config from the model into etc.next; if it differs from the
# config the daemons run with, stop them (a running cluster keeps the old one otherwise)
# and put the new one in place.
generate_config() {
  local next=$STATE/etc.next
  rm -rf "$next"
  mkdir -p "$next"
  [ -x "$PY" ] || PY=$(command -v python3)
  local args=(--out "$next" --cluster "$CLUSTER" --state-dir "$STATE" --hostname "$HOST"
    --ctld-port "$CTLD_PORT" --dbd-port "$DBD_PORT" --node-port-base "$NODE_PORT_BASE"
    --image-pull-timeout "$PULL_TIMEOUT")
  [ "$SCALE" = all ] || args+=(--max-nodes-per-pool "$SCALE")
  if [ "$SITE" = demo ]; then
    # The default site, in a database of its own that then describes exactly this cluster.
    # Its settings need a secret key of their own (docs/security.md).
    mkdir -p "$STATE/portal"
    [ -s "$STATE/portal/secret-key" ] ||
      (umask 077 && python3 -c 'import secrets; print(secrets.token_urlsafe(50))' \
        >"$STATE/portal/secret-key")
    (cd "$ROOT" && env -u DATABASE_URL SWITCHYARD_VAR_DIR="$STATE/portal" \
      "$PY" - "${args[@]}" --prune-db <<'EOF'
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.migrations.loader import MigrationLoader  # noqa: E402

# The site's database is derived from this checkout: one migrated by another checkout (a
# migration this code does not have) is started again rather than half-understood.
loader = MigrationLoader(connection)
if set(loader.applied_migrations) - set(loader.disk_migrations):
    name = connection.settings_dict["NAME"]
    connection.close()
    os.remove(name)
    print(f"started {name} again: another checkout had migrated it", file=sys.stderr)
call_command("migrate", verbosity=0, interactive=False)
call_command("seed_demo", backend="slurm", quiet=True)
call_command("slurm_config", *sys.argv[1:])
EOF
    ) >"$LOG/config.log" 2>&1 || fail "generating the Slurm config failed" "$LOG/config.log"
  else
    (cd "$ROOT" && "$PY" manage.py slurm_config "${args[@]}" --backend "$BACKEND_ALIAS") \
      >"$LOG/config.log" 2>&1 || fail "generating the Slurm config failed" "$LOG/config.log"
  fi
  if ! config_differs "$next"; then
    rm -rf "$next"
    say "config     unchanged"
    return
  fi
  if [ -s "$SLURM_CONF" ]; then
    say "config     changed: restarting the daemons"
    stop_daemons
  fi
  local f
  [ -e "$next/topology.conf" ] || rm -f "$ETC/topology.conf"
  for f in "$next"/*; do mv -f "$f" "$ETC/"; done
  rm -rf "$next"
  say "config     $(tail -n 1 "$LOG/config.log" | sed "s|$next|$ETC|")"
}

config_differs() {
  local next=$1 f
  for f in "$next"/*; do
    cmp -s "$f" "$ETC/$(basename "$f")" || return 0
  done
  [ -e "$ETC/topology.conf" ] && [ ! -e "$next/topology.conf" ] && return 0
  return 1
}

# The fake GPUs and control devices (`path major minor` in devices.txt): character devices
# no driver answers, each with numbers of its own, so a job's sandbox can be checked to hold
# exactly its GPUs' (docs/slurm.md). Readable by every job account, as real ones are.
make_devices() {
  local path major minor
  while read -r path major minor; do
    [ -n "$path" ] || continue
    [ -c "$path" ] && [ "$(stat -c %t:%T "$path")" = "$(printf '%x:%x' "$major" "$minor")" ] &&
      continue
    mkdir -p "$(dirname "$path")"
    chmod 0755 "$(dirname "$path")"
    rm -f "$path"
    mknod -m 0666 "$path" c "$major" "$minor" || fail "cannot create the fake device $path (mknod)"
  done <"$ETC/devices.txt"
}

# The nodes' image caches and the Prolog and Epilog that fill them (docs/containers.md,
# "Slurm notes"): one cache per slurmd, $STATE/images/<node>, owned by the cache's account,
# which does every pull (never root, never a job's account); the wrappers slurm.conf names,
# which run this checkout's slurmnode/prolog.py with the system's python3 and Slurm's
# variables only.
setup_images() {
  if ! id -u "$IMAGE_ACCOUNT" >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir "$STATE/images" --shell /usr/sbin/nologin \
      "$IMAGE_ACCOUNT" || fail "cannot create the image cache account $IMAGE_ACCOUNT"
    say "account    $IMAGE_ACCOUNT created (owns the nodes' image caches)"
  fi
  install -d -o root -g root -m 0755 "$STATE/images"
  local name port
  while read -r name port; do
    [ -n "$name" ] || continue
    install -d -o "$IMAGE_ACCOUNT" -g "$(id -g "$IMAGE_ACCOUNT")" -m 0755 "$STATE/images/$name"
  done <"$ETC/nodes.txt"
  local python=/usr/bin/python3 kind
  [ -x $python ] || python=$(command -v python3)
  for kind in prolog epilog; do
    {
      echo '#!/bin/sh'
      echo "# Written by docker/slurm/cluster.sh: the $kind of every node (slurm.conf)."
      echo '# Exit 1 (slurmd drains the node) only when the node cannot pull at all (3).'
      echo '/usr/bin/env -i PATH=/usr/bin:/bin LANG=C.UTF-8 SLURM_CONF="$SLURM_CONF" \'
      echo '  SLURM_JOB_ID="$SLURM_JOB_ID" SLURM_JOB_UID="$SLURM_JOB_UID" SLURM_JOB_GID="$SLURM_JOB_GID" \'
      echo '  SLURM_JOB_WORK_DIR="$SLURM_JOB_WORK_DIR" SLURMD_NODENAME="$SLURMD_NODENAME" \'
      printf '  %q -I -c %q %q \\\n' "$python" \
        'import sys; sys.path.insert(0, sys.argv.pop(1)); from scheduling.backends.slurmnode import prolog; sys.exit(prolog.main())' \
        "$ROOT"
      printf '  --code %q --python %q --account %q --timeout %q --cap-mb %q' \
        "$ROOT" "$python" "$IMAGE_ACCOUNT" "$PULL_TIMEOUT" "$IMAGE_CACHE_MB"
      echo ' --cache "'"$STATE"'/images/$SLURMD_NODENAME"'"$([ $kind = epilog ] && echo ' --epilog')"
      echo '[ $? -eq 3 ] && exit 1'
      echo 'exit 0'
    } >"$ETC/switchyard-$kind.tmp"
    chmod 0755 "$ETC/switchyard-$kind.tmp"
    mv -f "$ETC/switchyard-$kind.tmp" "$ETC/switchyard-$kind"
  done
}

# --- slurmctld and slurmd --------------------------------------------------------------------

ctld_up() { timeout 10 "$SCONTROL" ping 2>/dev/null | grep -q 'is UP'; }

start_slurmctld() {
  local pid i
  if pid=$(pid_of slurmctld "$RUN/slurmctld.pid"); then
    say "slurmctld  running (pid $pid)"
    return
  fi
  port_busy "$CTLD_PORT" && fail "port $CTLD_PORT (slurmctld) is taken by another process"
  "$SLURMCTLD" </dev/null >>"$LOG/slurmctld.out" 2>&1 9>&- ||
    fail "slurmctld did not start" "$LOG/slurmctld.log" "$LOG/slurmctld.out"
  for ((i = 0; i < WAIT * 5; i++)); do
    ctld_up && break
    pid_of slurmctld "$RUN/slurmctld.pid" >/dev/null || [ $i -lt 25 ] ||
      fail "slurmctld exited" "$LOG/slurmctld.log" "$LOG/slurmctld.out"
    sleep 0.2
  done
  ctld_up || fail "slurmctld does not answer on port $CTLD_PORT" "$LOG/slurmctld.log"
  pid=$(pid_of slurmctld "$RUN/slurmctld.pid") || fail "slurmctld is not running" "$LOG/slurmctld.log"
  say "slurmctld  started (pid $pid)"
}

STARTED_NODES=" "
start_slurmds() {
  local name port running=0 started=0
  while read -r name port; do
    [ -n "$name" ] || continue
    if pid_of slurmd "$RUN/slurmd-$name.pid" >/dev/null; then
      running=$((running + 1))
      continue
    fi
    port_busy "$port" && fail "port $port (slurmd $name) is taken by another process"
    mkdir -p "$STATE/spool/$name"
    "$SLURMD" -N "$name" </dev/null >>"$LOG/slurmd-$name.out" 2>&1 9>&- ||
      fail "slurmd -N $name did not start" "$LOG/slurmd-$name.log" "$LOG/slurmd-$name.out"
    STARTED_NODES+="$name "
    started=$((started + 1))
  done <"$ETC/nodes.txt"
  say "slurmd     $started started, $running running"
}

# Wait until every node has registered; resume the ones we (re)started if they came up
# INVAL, DRAIN or DOWN. A drain an administrator set on a running node is left alone.
USABLE='^(idle|mix|alloc|comp|resv|plnd|drain|drng|maint)$'
wait_nodes() {
  local i name state pending listed resumed=" " bad=""
  for ((i = 0; i < WAIT * 5; i++)); do
    pending=0 listed=0 bad=""
    while read -r name state; do
      [ -n "$name" ] || continue
      listed=1
      if [[ $STARTED_NODES == *" $name "* && $resumed != *" $name "* && $state != *'*' &&
        $state =~ ^(inval|drain|drng|down|fail) ]]; then
        timeout 10 "$SCONTROL" update nodename="$name" state=resume >/dev/null 2>&1 || true
        resumed+="$name "
        pending=1
      elif ! [[ $state =~ $USABLE ]]; then
        pending=1
        bad+=" $name:$state"
      fi
    done < <(timeout 10 "$SINFO" -h -N -o '%N %t' 2>/dev/null | sort -u)
    if [ $pending -eq 0 ] && [ $listed -eq 1 ]; then
      [ "$resumed" = " " ] || say "resumed   $resumed"
      return
    fi
    sleep 0.2
  done
  timeout 10 "$SINFO" -N -o '%N %t %E' >&2 || true
  local logs=("$LOG/slurmctld.log") node
  for node in $bad; do logs+=("$LOG/slurmd-${node%%:*}.log"); done
  fail "nodes not ready after ${WAIT}s:$bad" "${logs[@]}"
}

write_env() {
  {
    echo "# The localhost Slurm cluster (docker/slurm/cluster.sh). Source this file."
    echo "export SLURM_CONF=$SLURM_CONF"
    echo "export SWITCHYARD_SLURM_CLUSTER=$CLUSTER"
    echo "export SWITCHYARD_SLURM_DIR=$STATE"
    if [ "$SITE" = demo ]; then
      echo "# The portal database that describes exactly this cluster (seed_demo's site, scaled):"
      echo "export SWITCHYARD_SLURM_PORTAL_DATABASE_URL=sqlite:///$STATE/portal/switchyard.sqlite3"
    fi
  } >"$STATE/env.tmp"
  mv "$STATE/env.tmp" "$STATE/env"
}

# --- commands --------------------------------------------------------------------------------

cmd_start() {
  need_root "$WHY_ROOT"
  local t0=$SECONDS
  ensure_packages
  resolve_commands
  lock
  touch "$MARKER"
  mkdir -p "$ETC" "$LOG" "$RUN" "$STATE/ctld" "$STATE/spool" "$STATE/dev" "$STATE/portal"
  chmod 755 "$STATE"
  HOST=$(hostname -s)
  generate_config
  setup_images
  start_munge
  start_slurmdbd
  make_devices
  start_slurmctld
  start_slurmds
  wait_nodes
  write_env
  timeout 10 "$SINFO" || true
  say "ready in $((SECONDS - t0))s; clients need (or: source $STATE/env):"
  say "export SLURM_CONF=$SLURM_CONF"
}

cmd_stop() {
  need_root "$WHY_ROOT"
  if [ ! -d "$STATE" ]; then
    say "nothing to stop ($STATE does not exist)"
    return
  fi
  lock
  resolve_commands soft
  stop_daemons
  say "stopped"
}

# stop_daemons: cancel the jobs, stop every daemon and kill leftover job steps.
stop_daemons() {
  local pid pids=() i
  # Cancel the jobs first, so no job process outlives the cluster.
  if pid_of slurmctld "$RUN/slurmctld.pid" >/dev/null && [ -n "${SQUEUE:-}" ]; then
    local jobs
    jobs=$(timeout 10 "$SQUEUE" -h -o '%A' 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
      # shellcheck disable=SC2086
      timeout 10 "$SCANCEL" $jobs 2>/dev/null || true
      for ((i = 0; i < 100; i++)); do
        [ -z "$(timeout 5 "$SQUEUE" -h -o '%A' 2>/dev/null)" ] && break
        sleep 0.2
      done
      say "cancelled  jobs $jobs"
    fi
  fi
  local f
  for f in "$RUN"/slurmd-*.pid; do
    [ -e "$f" ] || continue
    pid=$(pid_of slurmd "$f") && pids+=("$pid")
  done
  stop_pids 15 "${pids[@]}"
  [ ${#pids[@]} -gt 0 ] && say "slurmd     stopped ${#pids[@]}"
  if pid=$(pid_of slurmctld "$RUN/slurmctld.pid"); then
    stop_pids 30 "$pid" && say "slurmctld  stopped"
  fi
  if pid=$(pid_of slurmdbd "$RUN/slurmdbd.pid"); then
    stop_pids 30 "$pid" && say "slurmdbd   stopped"
  fi
  local steps
  mapfile -t steps < <(cluster_steps)
  if [ ${#steps[@]} -gt 0 ]; then
    local tree
    mapfile -t tree < <(descendants "${steps[@]}")
    kill -KILL "${tree[@]}" "${steps[@]}" 2>/dev/null || true
    say "killed     ${#steps[@]} leftover job step(s)"
  fi
  if pid=$(pid_of munged "$MUNGE_DIR/munged.pid"); then
    stop_pids 10 "$pid" && say "munged     stopped"
  fi
  rm -f "$RUN"/*.pid
}

cmd_status() {
  if [ ! -f "$MARKER" ] || [ ! -s "$SLURM_CONF" ]; then
    say "not started ($STATE)"
    return 3
  fi
  local rc=0 alive=0 pid name port
  if pid=$(pid_of munged "$MUNGE_DIR/munged.pid"); then
    say "munged     up   (pid $pid)"
    alive=$((alive + 1))
  else
    say "munged     DOWN"
    rc=1
  fi
  if pid=$(pid_of slurmdbd "$RUN/slurmdbd.pid"); then
    say "slurmdbd   up   (pid $pid)"
    alive=$((alive + 1))
  else
    say "slurmdbd   DOWN"
    rc=1
  fi
  if pid=$(pid_of slurmctld "$RUN/slurmctld.pid"); then
    say "slurmctld  up   (pid $pid)"
    alive=$((alive + 1))
  else
    say "slurmctld  DOWN"
    rc=1
  fi
  while read -r name port; do
    [ -n "$name" ] || continue
    if pid=$(pid_of slurmd "$RUN/slurmd-$name.pid"); then
      say "slurmd     up   (pid $pid) $name port $port"
      alive=$((alive + 1))
    else
      say "slurmd     DOWN $name port $port"
      rc=1
    fi
  done <"$ETC/nodes.txt"
  if [ $alive -eq 0 ]; then
    say "stopped"
    return 3
  fi
  local out
  if out=$(timeout 10 sinfo -N -o '%N %.15P %.7t %.13C %.10G %E' 2>&1); then
    say "$out"
    if awk -v usable="$USABLE" 'NR > 1 && $3 !~ usable {bad=1} END {exit !bad}' <<<"$out"; then
      say "some nodes are not usable"
      rc=1
    fi
  else
    say "sinfo failed: $out"
    rc=1
  fi
  say "export SLURM_CONF=$SLURM_CONF"
  return $rc
}

cmd_destroy() {
  need_root "$WHY_ROOT"
  [ -d "$STATE" ] || {
    say "nothing to destroy ($STATE does not exist)"
    return
  }
  [ -f "$MARKER" ] || fail "$STATE has no $MARKER: not deleting a directory this script did not make"
  cmd_stop
  resolve_commands soft
  local sql="DROP DATABASE IF EXISTS \`$DB_NAME\`;"
  sql+="DROP USER IF EXISTS '$DB_NAME'@'127.0.0.1'; DROP USER IF EXISTS '$DB_NAME'@'localhost';"
  if [ -n "$MYSQL" ]; then
    db_admin <<<"$sql" || say "could not drop database $DB_NAME (continuing)"
  fi
  exec 9>&-
  rm -rf "$STATE"
  say "destroyed $STATE and database $DB_NAME"
}

check_settings
case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  restart)
    cmd_stop
    cmd_start
    ;;
  destroy) cmd_destroy ;;
  *)
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
