"""What the live-sandbox tests share: creating one through the API, on the fake backend."""

from __future__ import annotations

import json

from rest_framework.test import APIClient


def create(client: APIClient, **fields):
    body = {"project": "materials", **fields}
    return client.post("/api/v1/sandboxes/", data=json.dumps(body), content_type="application/json")


def run(client: APIClient, sid: str, argv: list[str], **fields):
    body = {"command": argv, **fields}
    return client.post(
        f"/api/v1/sandboxes/{sid}/exec/", data=json.dumps(body), content_type="application/json"
    )
