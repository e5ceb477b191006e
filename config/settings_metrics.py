"""Settings of the Prometheus metrics (docs/operations.md, "Metrics").

`/metrics` answers the addresses of `SWITCHYARD_METRICS_ALLOW` (and this host's loopback
always), or a scraper that shows `SWITCHYARD_METRICS_TOKEN` as a bearer token; anyone else
gets a 403. `SWITCHYARD_METRICS=0` turns the metrics off: nothing is recorded and `/metrics`
is a 404.
"""

from __future__ import annotations

from pathlib import Path

from config.env import env_bool, env_networks, env_str
from config.paths import VAR_DIR

SWITCHYARD_METRICS = env_bool("SWITCHYARD_METRICS", default=True)
# Addresses or networks (CIDR) that may scrape, besides 127.0.0.1 and ::1.
SWITCHYARD_METRICS_ALLOW = env_networks("SWITCHYARD_METRICS_ALLOW")
# A scraper elsewhere sends `Authorization: Bearer <token>`; empty: no token is accepted.
SWITCHYARD_METRICS_TOKEN = env_str("SWITCHYARD_METRICS_TOKEN", "") or ""
# Where the processes a launcher starts (web, worker, beat) keep their samples, one folder
# per role and host, emptied when that role starts (prometheus_client's multiprocess mode).
SWITCHYARD_METRICS_DIR = Path(env_str("SWITCHYARD_METRICS_DIR", str(VAR_DIR / "metrics")))
