"""Every query parameter of every endpoint, pages and API, given hostile values: never a 5xx;
a bad value is a 4xx (in the error shape on the API) or a page that says so.

The table below names what each URL's view reads. It is checked against the URLconf (a new
URL without an entry fails) and against the OpenAPI schema (a documented parameter the
table does not fuzz fails), so it cannot fall behind the code. One client per role and a
loop, not a test per value: the whole file runs in about 15 s here.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest
import yaml
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from portal.models import ConfigVersion
from scheduling.engine.capacity import open_lease
from scheduling.models import Canary, Pool, PriorityRequest, Queue, Task, Workflow
from simulation.models import SimulationRun
from tests.conftest import descriptor, submit

HOSTILE = [
    "nan",
    "inf",
    "-inf",
    "1e308",
    "-1",
    "9223372036854775808",  # one past a bigint
    "9" * 40,
    "٣",  # a digit to Python's int(), not to a database
    "🚀",
    "",
    "x" * 5000,
]
# DRF reads `format` before any view, and drf-spectacular `lang` before it builds the schema
# (a fifth of a second each time): the same check everywhere, so a few values suffice.
FEW = ["nan", "🚀", "x" * 5000]
# Path ids: the converters take digits only, so these are the hostile ones that reach a view.
HOSTILE_IDS = ["0", "9223372036854775808", "9" * 40]

PAGE_ = "page"  # Django's Paginator and DRF's page-number pagination
USAGE = (
    "from",
    "to",
    "group_by",
    "period",
    "project",
    "user",
    "queue",
    "pool",
    "type",
    "area",
    "metric",
)
AUDIT = ("action", "actor", "project", "since", PAGE_)

# URL name: the query parameters its view reads on GET. DRF's `format` (content
# negotiation) is read by every API view and is added below.
READS: dict[str, tuple[str, ...]] = {
    # API
    "api-task-list": ("state", "project", "queue", "type", "workflow", PAGE_),
    "api-task-batch": (),
    "api-task-preview": (),
    "api-task-detail": (),
    "api-task-cancel": (),
    "api-task-log": ("offset", "limit"),
    "api-task-usage": (),
    "api-workflow-list": (PAGE_,),
    "api-workflow-detail": (),
    "api-workflow-cancel": (),
    "api-descriptor-schema": (),
    "api-files": (),
    "api-files-area": (),
    "api-file": (),
    "api-images": ("type", "pool"),
    "api-sandboxes": ("state", "project"),
    "api-sandbox": (),
    "api-sandbox-exec": ("stream",),
    "api-sandbox-egress": (),
    "api-sandbox-file": (),
    "api-leases": ("state", PAGE_),
    "api-lease": (),
    "api-lease-end": (),
    "api-lease-schedules": (),
    "api-lease-schedule": (),
    "api-quotas": (),
    "api-members": (),
    "api-member": (),
    "api-canaries": (),
    "api-canary-promote": (),
    "api-canary-abandon": (),
    "api-queues": (),
    "api-queue": (),
    "api-node-state": (),
    "api-priority-requests": ("inbox", "state", PAGE_),
    "api-priority-request-approve": (),
    "api-priority-request-reject": (),
    "api-allocations": ("project", PAGE_),
    "api-allocation": (),
    "api-allocation-requests": ("inbox", "state", PAGE_),
    "api-allocation-request-approve": (),
    "api-allocation-request-reject": (),
    "api-usage": USAGE,
    "api-usage-samples": (),
    "api-reconciliations": (),
    "api-token": (),
    "api-token-current": (),
    "api-audit": AUDIT,
    "api-config-versions": ("model", "object_id", PAGE_),
    "api-config-rollback": (),
    "api-config-undo": (),
    "api-schema": ("lang",),
    "api-docs": (),
    # pages
    "login": ("next",),
    "logout": ("next",),
    "two-factor-code": ("next",),
    "two-factor": ("next",),
    "oidc_authentication_init": ("next",),
    "oidc_authentication_callback": ("code", "state"),
    "audit": AUDIT,
    "config-history": ("model", PAGE_),
    "config-version": (),
    "config-rollback": (),
    "config-undo": (),
    "dashboard": (),
    "dashboard-settings": (),
    "site-dashboard": (),
    "usage": USAGE,
    "task-usage": (),
    "usage-reconciliations": (),
    "usage-reconcile-now": (),
    "allocation-request": (),
    "allocation-requests": (),
    "allocation-request-decide": (),
    "task-list": (
        "project",
        "owner",
        "type",
        "state",
        "queue",
        "submitted_from",
        "submitted_to",
        "q",
        PAGE_,
    ),
    "task-submit": ("from", "template"),
    "task-detail": (),
    "task-cancel": (),
    "task-bulk-cancel": (),
    "workflow-list": ("state", PAGE_),
    "workflow-detail": (),
    "workflow-cancel": (),
    "workflow-changes": ("since",),
    "task-priority-request": (),
    "priority-requests": (PAGE_,),
    "priority-request-decide": (),
    "queue-list": (),
    "queue-edit": (),
    "project-list": (),
    "canary": (),
    "canary-decide": (),
    "project-detail": (),
    "project-members": (),
    "favicon": (),
    "home": (),
    "task-submit-preview": (),
    "usage-rates": (),
    "project-quota": (),
    "sandbox-list": ("project",),
    "sandbox-detail": (),
    "sandbox-end": (),
    "files": (),
    "files-area": (),
    "files-path": ("view",),
    "task-submit-folders": ("at", "use"),
    "capacity": (),
    "capacity-lend": (),
    "capacity-lease-end": (),
    "capacity-node": (),
    "capacity-schedule-new": (),
    "capacity-schedule": (),
    "simulation-list": (PAGE_,),
    "simulation-compare": ("run",),
    "simulation-detail": (),
    "simulation-progress": (),
    "metrics": (),  # Prometheus's scrape (config/metrics/scrape.py), loopback here
}
ANONYMOUS = {
    "login",
    "api-token",
    "api-descriptor-schema",
    "metrics",
}  # fuzzed without a session too


def _walk(patterns, prefix: str = "") -> Iterator[tuple[str, str]]:
    for p in patterns:
        if isinstance(p, URLResolver):
            if p.app_name == "admin":
                continue  # Django's own admin, platform admins only
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield p.name, prefix + str(p.pattern)


ROUTES = dict(_walk(get_resolver().url_patterns))


def test_every_url_has_an_entry_and_every_entry_a_url():
    assert set(ROUTES) - set(READS) == set(), "add the new URLs' query parameters to READS"
    assert set(READS) - set(ROUTES) == set(), "remove the entries of URLs that are gone"


def test_every_documented_query_parameter_is_fuzzed():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    missing = []
    for path, operations in schema["paths"].items():
        name = resolve(re.sub(r"\{[^}]+\}", "1", path)).url_name
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query" and parameter["name"] not in (
                    *READS[name],
                    "format",
                ):
                    missing.append(f"{method.upper()} {path}: {parameter['name']}")
    assert missing == []


@pytest.fixture
def ids(site) -> dict[str, object]:
    """One object of each kind a URL names, so every view runs past its lookup."""
    alice, admin = User.objects.get(username="alice"), User.objects.get(username="admin")
    api = APIClient()
    api.force_authenticate(alice)
    task = Task.objects.get(
        pk=submit(api, descriptor(queue="hpc", type="hpc-simulation")).json()["id"]
    )
    flow = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "wf",
        "project": "materials",
        "tasks": [{"name": "a", "command": ["true"]}],
    }
    made = api.post("/api/v1/workflows/", data=json.dumps(flow), content_type="application/json")
    assert made.status_code == 201, made.content
    lease = open_lease(
        pool=Pool.objects.get(name="inference-agent"),
        queue=Queue.objects.get(name="training"),
        count=1,
        duration_s=600,
    )
    request = PriorityRequest.objects.filter(task=task).first() or PriorityRequest.objects.create(
        requester=alice,
        project=task.project,
        queue=task.queue,
        task=task,
        level=2,
        reason="r",
        until=task.submitted_at.replace(year=task.submitted_at.year + 1),
    )
    run = SimulationRun.objects.create(
        workload="launch-mix", parameters={"policies": ["fifo"]}, created_by=admin
    )
    canary = Canary.objects.first()
    return {
        "task": task.pk,
        "workflow": Workflow.objects.get().pk,
        "lease": lease.pk,
        "request": request.pk,
        "run": run.pk,
        "version": ConfigVersion.objects.first().pk,
        "canary": canary.pk if canary else 1,
    }


def _kwargs(name: str, route: str, ids: dict) -> dict:
    by_name = {
        "lease": "lease",
        "lease-end": "lease",
        "canary": "canary",
        "request": "request",
        "priority": "request",
        "decide": "request",
        "simulation": "run",
        "version": "version",
        "rollback": "version",
        "workflow": "workflow",
    }
    kind = next((v for k, v in by_name.items() if k in name), "task")
    values = {
        "pk": ids[kind],
        "slug": "materials",
        "name": "hpc",
        "username": "alice",
        "state": "drained",
        "verdict": "approve",
        "area": "projects",
        "path": "materials",
        "sid": "sbx-0",
    }
    return {k: v for k, v in values.items() if f":{k}>" in route}


def _bad(response, api: bool) -> str | None:
    """What is wrong with the answer to a hostile value, or None."""
    if response.status_code >= 500:
        return f"{response.status_code}"
    if not api or response.status_code < 400 or response.status_code == 405:
        return None
    kind = response.get("Content-Type", "")
    if kind.startswith("text/html"):
        return None  # the API's docs page: a page
    try:
        # The OpenAPI document answers in its own YAML, the rest in JSON: the shape is one.
        body = yaml.safe_load(response.content) if "openapi" in kind else response.json()
    except ValueError:
        return f"{response.status_code} neither JSON nor the schema's YAML ({kind})"
    if not isinstance(body, dict) or set(body) != {"errors"} or not body["errors"]:
        return f"{response.status_code} not the error shape: {str(body)[:200]}"
    if any(set(e) != {"field", "message", "got"} for e in body["errors"]):
        return f"{response.status_code} not the error shape: {str(body)[:200]}"
    return None


def _clients() -> dict[str, Client]:
    clients = {"anonymous": Client()}
    for username in ("admin", "alice"):
        client = Client()
        client.force_login(User.objects.get(username=username))
        clients[username] = client
    return clients


def test_no_query_parameter_value_is_a_server_error(ids):
    clients = _clients()
    problems, requests, started = [], 0, time.monotonic()
    for name, route in sorted(ROUTES.items()):
        path = reverse(name, kwargs=_kwargs(name, route, ids))
        api = path.startswith("/api/")
        params = [(p, FEW if name == "api-schema" else HOSTILE) for p in READS[name]]
        if api:
            params.append(("format", FEW))
        # A platform admin reaches every view's whole code; a researcher's lists are filtered
        # by the same selectors on the API and the pages, so the API is fuzzed for both.
        roles = (
            "admin",
            *(("alice",) if api else ()),
            *(("anonymous",) if name in ANONYMOUS else ()),
        )
        for role in roles:
            client = clients[role]
            for param, values in params:
                for value in values:
                    response = client.get(path, {param: value})
                    requests += 1
                    if (wrong := _bad(response, api)) is not None:
                        problems.append(f"{role} GET {path}?{param}={value[:20]!r}: {wrong}")
            # An unknown parameter is ignored, never a crash.
            response = client.get(path, {"unknown": "nan"})
            requests += 1
            if (wrong := _bad(response, api)) is not None:
                problems.append(f"{role} GET {path}?unknown=nan: {wrong}")
    seconds = time.monotonic() - started
    assert problems == [], "\n".join(problems)
    assert requests > 1000, requests  # the table really was walked
    print(f"{requests} requests in {seconds:.1f} s")


def test_no_path_id_is_a_server_error(ids):
    client = _clients()["admin"]
    problems = []
    for name, route in sorted(ROUTES.items()):
        if ":pk>" not in route:
            continue
        for value in HOSTILE_IDS:
            kwargs = {**_kwargs(name, route, ids), "pk": value}
            path = reverse(name, kwargs=kwargs)
            for method in ("get", "post"):
                response = getattr(client, method)(path)
                if (wrong := _bad(response, path.startswith("/api/"))) is not None:
                    problems.append(f"{method.upper()} {path}: {wrong}")
    assert problems == []


def test_a_workflows_changes_refuse_a_since_no_clock_can_hold(ids):
    client = _clients()["alice"]
    path = f"/workflows/{ids['workflow']}/changes/"
    for value in ("nan", "inf", "-inf", "1e18", "1e308", "-1", "abc"):
        response = client.get(path, {"since": value})
        assert response.status_code == 400, (value, response.status_code)
        [error] = response.json()["errors"]
        assert error["field"] == "since" and error["got"] == value
    assert client.get(path, {"since": "0"}).status_code == 200
    assert client.get(path, {"since": f"{time.time():.6f}"}).status_code == 200
