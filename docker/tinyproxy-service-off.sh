#!/usr/bin/env bash
# Debian's tinyproxy service (one proxy for the whole machine, on port 8888) is not what live
# sandboxes use: each session starts a tinyproxy of its own, as the job's account, with a
# configuration for its allow-list only (scheduling/backends/session/egress.py). So the
# package's service is disabled and, if it runs, stopped; install-packages.sh already keeps
# it from starting during the install.
#
# Not with `/etc/init.d/tinyproxy stop`: that script's stop is `start-stop-daemon --stop
# --exec /usr/bin/tinyproxy` without its pid file, which ends every tinyproxy on the machine,
# the live sessions' too. Only the service's own process (its pid file) is ended here.
set -euo pipefail
[ -x /usr/bin/tinyproxy ] || exit 0
[ "$(id -u)" -eq 0 ] || exit 0  # only root could have started it, or can change it
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  # systemd stops the processes of the service's own cgroup, nothing else.
  systemctl disable --now tinyproxy.service >/dev/null 2>&1 || true
  exit 0
fi
if command -v update-rc.d >/dev/null && [ -x /etc/init.d/tinyproxy ]; then
  update-rc.d tinyproxy disable >/dev/null 2>&1 || true
fi
pidfile=$(awk 'tolower($1) == "pidfile" {gsub(/"/, "", $2); print $2}' \
  /etc/tinyproxy/tinyproxy.conf 2>/dev/null || true)
pid=$(cat "${pidfile:-/run/tinyproxy/tinyproxy.pid}" 2>/dev/null || true)
if [ -n "$pid" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = /usr/bin/tinyproxy ]; then
  kill "$pid"
fi
