#!/usr/bin/env bash
# The compose deployment's secrets (docker/compose.yaml), made once in docker/secrets/: a
# random secret key and database and Redis passwords, and a self-signed TLS certificate for
# the host name given (default localhost) unless tls.crt and tls.key are there already.
# Nothing is overwritten. The folder is never committed (.gitignore): keep a copy where the
# site keeps its secrets.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/secrets"
host="${1:-localhost}"
umask 077
mkdir -p "$dir"
chmod 700 "$dir"
for item in django_secret_key:50 db_password:32 redis_password:32; do
  file="$dir/${item%%:*}"
  [ -s "$file" ] || python3 -c 'import secrets, sys; print(secrets.token_urlsafe(int(sys.argv[1])))' \
    "${item##*:}" > "$file"
done
if [ ! -s "$dir/tls.crt" ] || [ ! -s "$dir/tls.key" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=$host" \
    -addext "subjectAltName=DNS:$host" -keyout "$dir/tls.key" -out "$dir/tls.crt" 2>/dev/null
  echo "a self-signed certificate for $host: replace $dir/tls.crt and tls.key with the site's"
fi
# Compose mounts each file as it is. PostgreSQL's image reads its password as its own user,
# not root: that one file is readable by all, inside a folder only its owner can enter.
chmod 600 "$dir"/*
chmod 644 "$dir/db_password"
echo "secrets in $dir"
