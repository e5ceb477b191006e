"""A node check a test controls: it reads `<local root>/test-health.json`.

The file maps node names to `{"ok": false, "down": true, "reason": "..."}`; nodes it does not
name are healthy. Set as the local backend's probe with SWITCHYARD_LOCAL_HEALTH_PROBE.
"""

from __future__ import annotations

import json
from pathlib import Path

from scheduling.backends.base import NodeHealth


def file_probe(nodes: list[str], *, root: str) -> dict[str, NodeHealth]:
    path = Path(root) / "test-health.json"
    said = json.loads(path.read_text()) if path.exists() else {}
    return {
        n: NodeHealth(**said[n]) if n in said else NodeHealth(ok=True, metrics={"probe": 1})
        for n in nodes
    }
