# Helpers shared by the project's service scripts (docker/slurm/cluster.sh,
# docker/images/registry.sh). Source it after setting ME (the script's name, for messages)
# and STATE (the script's state directory, for its lock).

say() { printf '%s\n' "$*"; }

# fail MESSAGE [LOG...]: print the message and the last lines of each log, exit 1.
fail() {
  local message=$1
  shift
  printf '%s: %s\n' "$ME" "$message" >&2
  local f
  for f in "$@"; do
    if [ -f "$f" ]; then
      printf -- '--- last lines of %s\n' "$f" >&2
      tail -n 25 "$f" >&2
    fi
  done
  exit 1
}

# need_root WHY: fail unless running as root.
need_root() {
  [ "$(id -u)" -eq 0 ] || fail "must run as root ($1)"
}

# pid_of COMM PIDFILE: the pid if the file names a live process with that command name.
pid_of() {
  local comm=$1 file=$2 pid
  [ -f "$file" ] || return 1
  pid=$(tr -dc 0-9 <"$file")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] || return 1
  printf '%s\n' "$pid"
}

# port_busy PORT: something listens on the TCP port.
port_busy() {
  command -v ss >/dev/null || return 1
  [ -n "$(ss -Hltn "( sport = :$1 )" 2>/dev/null)" ]
}

# lock: hold the state directory's lock until the script exits (one start or stop at a time).
lock() {
  mkdir -p "$STATE"
  exec 9>"$STATE/.lock"
  flock -w 600 9 || fail "another $ME holds $STATE/.lock"
}
