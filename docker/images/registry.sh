#!/usr/bin/env bash
# A container registry on this machine with images the project builds itself (docs/containers.md).
#
#   docker/images/registry.sh start     install what is missing, start the registry, build and push
#   docker/images/registry.sh stop      stop the registry this script started
#   docker/images/registry.sh status    the registry and its images; exit 0 healthy, 1 unhealthy, 3 stopped
#   docker/images/registry.sh restart   stop, then start
#   docker/images/registry.sh destroy   stop, delete the state (registry storage, build cache)
#
# Debian's docker-registry on 127.0.0.1, run as its own account, with its config, storage, log
# and pid file under one directory. Every image is built from Debian packages, nothing is
# downloaded from anywhere else: busybox-static for a tiny layer, mmdebstrap's extract of
# python3-minimal for a Python root. umoci assembles them, skopeo pushes them:
#
#   switchyard/base:1     busybox and its applets; /etc/os-release says switchyard-base
#   switchyard/python:3   Debian's python3 (minimal + standard library); os-release switchyard-python
#   demo/python:3         the same image under the demo catalogue's name (what `make run` offers)
#   demo/tiny:1, :2       the base plus a file that differs (/etc/demo-release), an Entrypoint,
#                         Cmd, Env and WorkingDir: a rollback from 2 to 1 shows
#
# Every image keeps a marker file only it has: /etc/switchyard/image names it.
# `start` is idempotent: a running registry is left alone, an image is built and pushed again
# only when its recipe (this script, the Python root) changed or the registry lost it; the
# Python root's tarball is kept, so a second start takes seconds. The last line `start` prints
# is the export clients need; `<state>/env` holds the same for `source`.
#
# Environment (all optional):
#   SWITCHYARD_REGISTRY_DIR    state directory                     [/var/tmp/switchyard-registry]
#   SWITCHYARD_REGISTRY_PORT   port on 127.0.0.1                   [15000]
#   SWITCHYARD_REGISTRY_SUITE  Debian suite of the Python root     [bookworm]
#   SWITCHYARD_REGISTRY_WAIT   seconds to wait for the registry    [30]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SELF="$ROOT/docker/images/registry.sh"
STATE=${SWITCHYARD_REGISTRY_DIR:-/var/tmp/switchyard-registry}
STATE=${STATE%/}
ME=registry.sh
WHY_ROOT="installs packages, runs the registry as its account"
# shellcheck source=docker/lib.sh
source "$ROOT/docker/lib.sh"
PORT=${SWITCHYARD_REGISTRY_PORT:-15000}
SUITE=${SWITCHYARD_REGISTRY_SUITE:-bookworm}
WAIT=${SWITCHYARD_REGISTRY_WAIT:-30}
ADDR=127.0.0.1:$PORT

ETC=$STATE/etc
LOG=$STATE/log
RUN=$STATE/run
DATA=$STATE/data
BUILD=$STATE/build
LAYOUT=$BUILD/oci
MARKER=$STATE/.switchyard-registry
PIDFILE=$RUN/registry.pid
# Fixed dates keep a rebuilt layer's and config's digests the same.
EPOCH=2024-01-01T00:00:00Z
PYTHON_PACKAGES=python3-minimal,libpython3.11-stdlib
PACKAGES=(docker-registry skopeo umoci mmdebstrap busybox-static)

check_settings() {
  [[ $STATE == /* && $STATE != / && $STATE =~ ^[A-Za-z0-9._/+-]+$ ]] ||
    fail "SWITCHYARD_REGISTRY_DIR must be an absolute path of letters, digits, '._+-/' (got '$STATE')"
  [[ $PORT =~ ^[1-9][0-9]{0,4}$ ]] && [ "$PORT" -le 65535 ] ||
    fail "SWITCHYARD_REGISTRY_PORT must be a port number (got '$PORT')"
  [[ $SUITE =~ ^[a-z]+$ ]] || fail "SWITCHYARD_REGISTRY_SUITE must be a Debian suite name (got '$SUITE')"
}

# The Makefile's installer: apt-get update at most twice a day, services kept from starting.
ensure_packages() {
  local out
  out=$(bash "$ROOT/docker/install-packages.sh" "${PACKAGES[@]}" 2>&1) ||
    fail "installing ${PACKAGES[*]} failed: $out"
  [ -z "$out" ] || say "packages   $out"
}

# --- the registry ----------------------------------------------------------------------------

answers() { curl -fsS -m 5 -o /dev/null "http://$ADDR/v2/" 2>/dev/null; }

write_config() {
  cat >"$ETC/config.yml.next" <<EOF
# Written by docker/images/registry.sh: no authentication, on 127.0.0.1 only.
version: 0.1
log:
  level: info
  fields:
    service: switchyard-registry
storage:
  filesystem:
    rootdirectory: $DATA
  delete:
    enabled: true
http:
  addr: $ADDR
  headers:
    X-Content-Type-Options: [nosniff]
EOF
  if cmp -s "$ETC/config.yml.next" "$ETC/config.yml"; then
    rm -f "$ETC/config.yml.next"
    return 1
  fi
  mv -f "$ETC/config.yml.next" "$ETC/config.yml"
}

start_registry() {
  local pid changed=0 i
  write_config && changed=1
  if pid=$(pid_of docker-registry "$PIDFILE"); then
    if [ $changed -eq 0 ]; then
      say "registry   running (pid $pid) on $ADDR"
      return
    fi
    say "registry   config changed: restarting"
    stop_registry
  fi
  port_busy "$PORT" && fail "port $PORT is taken by another process (SWITCHYARD_REGISTRY_PORT)"
  local user=root
  id docker-registry >/dev/null 2>&1 && user=docker-registry
  chown -R "$user" "$DATA"
  : >>"$LOG/registry.log"
  chown "$user" "$LOG/registry.log"
  # setpriv execs (runuser would stay as the parent): the pid is the registry's own.
  setsid setpriv --reuid="$user" --regid="$user" --init-groups docker-registry serve "$ETC/config.yml" \
    </dev/null >>"$LOG/registry.log" 2>&1 9>&- &
  echo $! >"$PIDFILE"
  for ((i = 0; i < WAIT * 10; i++)); do
    answers && break
    pid_of docker-registry "$PIDFILE" >/dev/null || fail "the registry exited" "$LOG/registry.log"
    sleep 0.1
  done
  answers || fail "the registry does not answer on $ADDR after ${WAIT}s" "$LOG/registry.log"
  pid=$(pid_of docker-registry "$PIDFILE") || fail "the registry is not running" "$LOG/registry.log"
  say "registry   started (pid $pid) on $ADDR as $user"
}

stop_registry() {
  local pid i
  pid=$(pid_of docker-registry "$PIDFILE") || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    [ -d "/proc/$pid" ] || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
  say "registry   stopped (pid $pid)"
}

# --- images ----------------------------------------------------------------------------------

# layer_tar DIR OUT: a tarball of DIR's content whose bytes depend on nothing but the content.
layer_tar() {
  tar --create --file "$2" --directory "$1" --sort=name --mtime=@0 --owner=0 --group=0 \
    --numeric-owner --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime .
}

# os_release DIR ID NAME VERSION: the image's /etc/os-release and its marker file.
os_release() {
  mkdir -p "$1/etc/switchyard"
  cat >"$1/etc/os-release" <<EOF
PRETTY_NAME="$3 $4 (built by Switchyard)"
NAME="$3"
ID=$2
VERSION_ID="$4"
HOME_URL="https://github.com/switchyard"
EOF
  printf '%s\n' "$2:$4" >"$1/etc/switchyard/image"
}

build_base_layer() {
  local dir=$BUILD/base.d applet
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/proc" "$dir/dev" "$dir/sys" "$dir/tmp" "$dir/root" "$dir/etc"
  chmod 1777 "$dir/tmp"
  cp /bin/busybox "$dir/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "$dir/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/etc/group"
  os_release "$dir" switchyard-base "Switchyard base" 1
  layer_tar "$dir" "$BUILD/base.tar"
  rm -rf "$dir"
}

build_tiny_layer() {
  local version=$1 dir=$BUILD/tiny-$1.d
  rm -rf "$dir"
  mkdir -p "$dir/srv/demo" "$dir/usr/local/bin"
  os_release "$dir" demo-tiny "Switchyard demo tiny" "$version"
  printf '%s\n' "$version" >"$dir/etc/demo-release"
  cat >"$dir/usr/local/bin/demo-entrypoint" <<'EOF'
#!/bin/sh
# demo/tiny's Entrypoint: says which version runs, then runs the command (its Cmd by default).
echo "demo/tiny $DEMO_VERSION entrypoint in $(pwd)"
exec "$@"
EOF
  chmod 755 "$dir/usr/local/bin/demo-entrypoint"
  layer_tar "$dir" "$BUILD/tiny-$version.tar"
  rm -rf "$dir"
}

# The Python root: Debian's packages extracted (no maintainer scripts run, nothing else in it),
# built once and kept. Built again from a mirror that has since updated a package, it differs,
# and so does the image's digest.
build_python_root() {
  local tar=$BUILD/python-root-$SUITE.tar
  if [ -s "$tar" ]; then
    say "python     root cached ($(du -h "$tar" | cut -f1), $tar)"
    return
  fi
  local t0=$SECONDS
  # SOURCE_DATE_EPOCH makes the same packages give the same bytes (and so the same digest).
  SOURCE_DATE_EPOCH=$(date -d "$EPOCH" +%s) mmdebstrap --variant=extract --include="$PYTHON_PACKAGES" --skip=output/dev \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --format=tar "$SUITE" "$tar.tmp" >"$LOG/mmdebstrap.log" 2>&1 ||
    fail "mmdebstrap $SUITE $PYTHON_PACKAGES failed" "$LOG/mmdebstrap.log"
  mv -f "$tar.tmp" "$tar"
  say "python     root built in $((SECONDS - t0))s ($(du -h "$tar" | cut -f1), $tar)"
}

build_python_layer() {
  local dir=$BUILD/python.d
  rm -rf "$dir"
  mkdir -p "$dir/proc" "$dir/dev" "$dir/sys" "$dir/tmp" "$dir/root" "$dir/work"
  chmod 1777 "$dir/tmp"
  mkdir -p "$dir/etc"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$dir/etc/passwd"
  os_release "$dir" switchyard-python "Switchyard Python" 3
  layer_tar "$dir" "$BUILD/python-top.tar"
  rm -rf "$dir"
}

# assemble TAG LAYER... -- CONFIG-FLAG...: a fresh image in the build layout from the layers.
assemble() {
  local tag=$1 flags=()
  shift
  umoci new --image "$LAYOUT:$tag" >>"$LOG/umoci.log" 2>&1 ||
    fail "umoci new $tag failed" "$LOG/umoci.log"
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    umoci raw add-layer --image "$LAYOUT:$tag" --history.created "$EPOCH" \
      --history.created_by "docker/images/registry.sh: $(basename "$1")" "$1" \
      >>"$LOG/umoci.log" 2>&1 || fail "umoci raw add-layer $1 failed" "$LOG/umoci.log"
    shift
  done
  [ $# -gt 0 ] && shift
  flags=("$@")
  umoci config --image "$LAYOUT:$tag" --created "$EPOCH" --history.created "$EPOCH" \
    --author switchyard "${flags[@]}" >>"$LOG/umoci.log" 2>&1 ||
    fail "umoci config $tag failed" "$LOG/umoci.log"
}

# The recipe of every image: this script and the Python root. A change rebuilds them all.
recipe() {
  { sha256sum "$SELF" | cut -c1-64; cat "$BUILD/python-root-$SUITE.tar.sha256" 2>/dev/null; } |
    sha256sum | cut -c1-64
}

# remote_digest REF: the digest the registry has for REF (empty when it has none).
remote_digest() {
  skopeo inspect --tls-verify=false --raw "docker://$ADDR/$1" 2>/dev/null | sha256sum | cut -c1-64 |
    grep -v '^e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855$' || true
}

# stale REF: true unless the registry has what this recipe last pushed as REF.
stale() {
  local ref=$1 stamp=$BUILD/pushed-${1//[\/:]/_} want have
  want=$(recipe)
  have=$(remote_digest "$ref")
  if [ -n "$have" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want $have" ]; then
    say "image      $ADDR/$ref up to date (sha256:$have)"
    return 1
  fi
  return 0
}

push() {
  local tag=$1 ref=$2 stamp=$BUILD/pushed-${2//[\/:]/_} digest
  skopeo copy --quiet --dest-tls-verify=false "oci:$LAYOUT:$tag" "docker://$ADDR/$ref" \
    >"$LOG/skopeo.log" 2>&1 || fail "skopeo copy $tag to $ADDR/$ref failed" "$LOG/skopeo.log" \
    "$LOG/registry.log"
  digest=$(remote_digest "$ref")
  [ -n "$digest" ] || fail "the registry does not list $ref after the push" "$LOG/registry.log"
  printf '%s %s\n' "$(recipe)" "$digest" >"$stamp"
  say "image      $ADDR/$ref pushed (sha256:$digest)"
}

build_images() {
  local todo=()
  mkdir -p "$BUILD"
  build_python_root
  [ -s "$BUILD/python-root-$SUITE.tar.sha256" ] ||
    sha256sum "$BUILD/python-root-$SUITE.tar" | cut -c1-64 >"$BUILD/python-root-$SUITE.tar.sha256"
  stale switchyard/base:1 && todo+=(base)
  stale switchyard/python:3 && todo+=(python)
  stale demo/python:3 && todo+=(demo-python)
  stale demo/tiny:1 && todo+=(tiny-1)
  stale demo/tiny:2 && todo+=(tiny-2)
  [ ${#todo[@]} -eq 0 ] && return
  local t0=$SECONDS
  rm -rf "$LAYOUT"
  : >"$LOG/umoci.log"
  umoci init --layout "$LAYOUT" >>"$LOG/umoci.log" 2>&1 || fail "umoci init failed" "$LOG/umoci.log"
  build_base_layer
  local tag
  for tag in "${todo[@]}"; do
    case $tag in
      base)
        assemble base "$BUILD/base.tar" -- --config.env PATH=/bin --config.cmd /bin/sh \
          --config.workingdir /
        push base switchyard/base:1
        ;;
      python)
        build_python_layer
        assemble python "$BUILD/python-root-$SUITE.tar" "$BUILD/python-top.tar" -- \
          --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.env PYTHONDONTWRITEBYTECODE=1 \
          --config.env LANG=C.UTF-8 --config.cmd python3 --config.workingdir /work
        push python switchyard/python:3
        ;;
      demo-python)
        # The Python image under the demo name: the same layers and config, so the same digest.
        [ -s "$BUILD/python-top.tar" ] || build_python_layer
        assemble demo-python "$BUILD/python-root-$SUITE.tar" "$BUILD/python-top.tar" -- \
          --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.env PYTHONDONTWRITEBYTECODE=1 \
          --config.env LANG=C.UTF-8 --config.cmd python3 --config.workingdir /work
        push demo-python demo/python:3
        ;;
      tiny-*)
        local v=${tag#tiny-}
        build_tiny_layer "$v"
        assemble "$tag" "$BUILD/base.tar" "$BUILD/tiny-$v.tar" -- \
          --config.env PATH=/usr/local/bin:/bin --config.env "DEMO_VERSION=$v" \
          --config.entrypoint /usr/local/bin/demo-entrypoint \
          --config.cmd cat --config.cmd /etc/demo-release --config.workingdir /srv/demo \
          --config.label "org.opencontainers.image.version=$v"
        push "$tag" "demo/tiny:$v"
        ;;
    esac
  done
  rm -f "$BUILD"/*.tar.tmp "$BUILD/base.tar" "$BUILD"/tiny-*.tar "$BUILD/python-top.tar"
  say "images     ${#todo[@]} built and pushed in $((SECONDS - t0))s"
}

write_env() {
  {
    echo "# The localhost registry (docker/images/registry.sh). Source this file."
    echo "export SWITCHYARD_TEST_REGISTRY=$ADDR"
    echo "export SWITCHYARD_REGISTRY_DIR=$STATE"
  } >"$STATE/env.tmp"
  mv "$STATE/env.tmp" "$STATE/env"
}

# --- commands --------------------------------------------------------------------------------

cmd_start() {
  need_root "$WHY_ROOT"
  local t0=$SECONDS
  ensure_packages
  lock
  touch "$MARKER"
  mkdir -p "$ETC" "$LOG" "$RUN" "$DATA" "$BUILD"
  chmod 755 "$STATE"
  start_registry
  build_images
  write_env
  say "ready in $((SECONDS - t0))s; clients need (or: source $STATE/env):"
  say "export SWITCHYARD_TEST_REGISTRY=$ADDR"
}

cmd_stop() {
  need_root "$WHY_ROOT"
  if [ ! -d "$STATE" ]; then
    say "nothing to stop ($STATE does not exist)"
    return
  fi
  lock
  pid_of docker-registry "$PIDFILE" >/dev/null || say "registry   not running"
  stop_registry
}

cmd_status() {
  if [ ! -f "$MARKER" ] || [ ! -s "$ETC/config.yml" ]; then
    say "not started ($STATE)"
    return 3
  fi
  local pid rc=0 ref digest
  if ! pid=$(pid_of docker-registry "$PIDFILE"); then
    say "registry   DOWN"
    say "stopped"
    return 3
  fi
  if answers; then
    say "registry   up   (pid $pid) on $ADDR"
  else
    say "registry   NOT ANSWERING (pid $pid) on $ADDR"
    return 1
  fi
  for ref in switchyard/base:1 switchyard/python:3 demo/python:3 demo/tiny:1 demo/tiny:2; do
    digest=$(remote_digest "$ref")
    if [ -n "$digest" ]; then
      say "image      $ADDR/$ref sha256:$digest"
    else
      say "image      $ADDR/$ref MISSING"
      rc=1
    fi
  done
  say "export SWITCHYARD_TEST_REGISTRY=$ADDR"
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
  exec 9>&-
  rm -rf "$STATE"
  say "destroyed $STATE"
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
