"""Where the portal keeps its files: the checkout, and the var folder (database, broker
messages, job folders, uploads), which the settings of every area place their files under."""

from __future__ import annotations

import os
from pathlib import Path

from config.env import env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("SWITCHYARD_VAR_DIR", str(BASE_DIR / "var")))

# What the portal writes (database, broker messages, logs) is private to its own user: jobs
# run as other accounts (docs/security.md). The var folder itself may be passed through, so
# that a job's account reaches its own work folder below it, but not listed.
os.umask(0o077)
VAR_DIR.mkdir(parents=True, exist_ok=True)
if VAR_DIR.stat().st_uid == os.geteuid():
    VAR_DIR.chmod(0o711)
