#!/usr/bin/env bash
# The unprivileged Unix accounts jobs run as (docs/security.md). Idempotent. Used by the
# Makefile (make run, make test) and CI. Without root nothing can be created: jobs then run
# as the worker's own (non-root) user, and this says so.
#
#   job-accounts.sh [ACCOUNT...]    default: switchyard-job
set -euo pipefail
accounts=("$@")
[ ${#accounts[@]} -eq 0 ] && accounts=(switchyard-job)
if [ "$(id -u)" -ne 0 ]; then
  for name in "${accounts[@]}"; do
    id "$name" >/dev/null 2>&1 || echo "not root: jobs run as $(id -un), not $name" >&2
  done
  exit 0
fi
for name in "${accounts[@]}"; do
  if ! id "$name" >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin "$name"
    echo "created Unix account $name (uid $(id -u "$name"))"
  fi
done
