#!/usr/bin/env bash
# Debian's prometheus service (one server for the machine, on port 9090, scraping what its
# /etc/prometheus/prometheus.yml names) is not what the tests use: the metrics test starts a
# Prometheus of its own on a free port with a generated configuration
# (tests/integration/test_prometheus.py). So the package's service is disabled, and stopped if
# systemd runs it; install-packages.sh already keeps it from starting during the install.
# Nothing else is stopped: a test's own Prometheus is none of the service's processes.
set -euo pipefail
[ -x /usr/bin/prometheus ] || exit 0
[ "$(id -u)" -eq 0 ] || exit 0  # only root could have started it, or can change it
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  # systemd stops the processes of the service's own cgroup, nothing else.
  systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  exit 0
fi
if [ -d /etc/systemd/system/multi-user.target.wants ]; then
  rm -f /etc/systemd/system/multi-user.target.wants/prometheus.service
fi
if command -v update-rc.d >/dev/null && [ -x /etc/init.d/prometheus ]; then
  update-rc.d prometheus disable >/dev/null 2>&1 || true
fi
