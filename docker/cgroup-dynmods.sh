#!/usr/bin/env bash
# Each local job gets a control group of its own (docs/security.md, "Limits"). Moving its first
# process there waits for an RCU grace period (some 5 ms), during which no process on the host
# may fork, unless a cgroup2 mount has `favordynmods`: the kernel's switch for hosts whose
# groups change often (global; forks and exits then cost a little more). At 50 job starts a
# second the difference is a p50 start of 88 ms or of 240-290 ms (docs/security.md). Sets it
# where root can; idempotent. Used by the Makefile (make run, make test) and CI.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || exit 0
# The first cgroup2 mount and its options: a remount sets every root flag from the options it
# is given and clears the others, so the host's own (nsdelegate, memory_recursiveprot, ...) go
# with it again.
read -r mount options < <(awk '$3 == "cgroup2" {print $2, $4; exit}' /proc/mounts) || true
[ -n "${mount:-}" ] || exit 0
has_flag() {
  awk -v m="$mount" '$2 == m && $3 == "cgroup2" && $4 ~ /(^|,)favordynmods(,|$)/ {found=1} END {exit !found}' /proc/mounts
}
has_flag && exit 0
# A remount inside a container's own cgroup namespace succeeds and changes nothing: read back.
if mount -o "remount,$options,favordynmods" "$mount" 2>/dev/null && has_flag; then
  echo "cgroup2 at $mount: favordynmods set (a job's start no longer waits for the kernel's RCU)"
else
  echo "cgroup2 at $mount: favordynmods could not be set; each local job's start waits some 5 ms more" >&2
fi
