"""The access matrix's world and rows: every role × every object × every verb, on pages, API
and htmx fragments.

Each row names who may; everyone else must get a 404 (what they cannot see) or a 403 (what
they see but may not change), or the login page when anonymous; and where a row changes
something, the change must have happened exactly when the role was allowed. A leak is any
other answer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.models import ConfigVersion, Membership, Project
from scheduling.engine.capacity import open_lease
from scheduling.forms_admin import queue_initial
from scheduling.models import Node, NodeLease, Pool, PriorityRequest, Queue, Quota, Task
from scheduling.services.quotas import quota_set
from simulation.models import SimulationRun
from tests.conftest import descriptor, submit

ROLES = ("anonymous", "member", "lead", "other", "queue_admin", "finance", "platform_admin")
USERS = {
    "member": "rita",  # a member of materials, not its lead
    "lead": "alice",  # materials' lead
    "other": "bob",  # genomics' lead, nothing in materials
    "queue_admin": "quinn",  # admin of queue hpc only, here
    "finance": "finn",
    "platform_admin": "admin",
}
SEES_MATERIALS = {"member", "lead", "platform_admin"}
LEADS_MATERIALS = {"lead", "platform_admin"}
OPERATES_HPC = {"queue_admin", "platform_admin"}
ADMIN = {"platform_admin"}
EVERYONE = set(ROLES) - {"anonymous"}


@dataclass
class World:
    task_m: Task  # materials, queue hpc
    task_g: Task  # genomics, queue training
    node_hpc: Node
    node_gpu: Node
    request_hpc: list[PriorityRequest] = field(default_factory=list)
    request_other: list[PriorityRequest] = field(default_factory=list)
    version_hpc: ConfigVersion | None = None
    version_training: ConfigVersion | None = None
    simulation: SimulationRun | None = None
    replay_hpc: SimulationRun | None = None  # a history replay of queue hpc
    replay_site: SimulationRun | None = None  # a history replay of the whole site
    request_by_quinn: PriorityRequest | None = None  # asked by the hpc queue's own admin
    lease_hpc: NodeLease | None = None  # lent to queue hpc
    lease_other: NodeLease | None = None  # between pools quinn administers none of


def _task(user: User, project: str, kind: str, queue: str) -> Task:
    api = APIClient()
    api.force_authenticate(user)
    doc = descriptor(project=project, type=kind, queue=queue, walltime="1h")
    response = submit(api, doc)
    assert response.status_code == 201, response.content
    return Task.objects.get(pk=response.json()["id"])


def _request(task: Task, user: User) -> PriorityRequest:
    return PriorityRequest.objects.create(
        requester=user,
        project=task.project,
        queue=task.queue,
        level=2,
        reason="deadline",
        until=timezone.now() + timedelta(hours=2),
    )


def _lease(pool: str, queue: str) -> NodeLease:
    return open_lease(
        pool=Pool.objects.get(name=pool),
        queue=Queue.objects.select_related("pool").get(name=queue),
        count=1,
        duration_s=3600,
        reason="matrix",
    )


@pytest.fixture
def world(site) -> World:
    alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
    rita = User.objects.create_user("rita", password="x")
    Membership.objects.create(user=rita, project=Project.objects.get(slug="materials"))
    quinn = User.objects.get(username="quinn")
    quinn.administered_queues.set([Queue.objects.get(name="hpc")])
    quota_set(project="materials", queue="hpc", resource="cpus", limit=512)
    w = World(
        task_m=_task(alice, "materials", "hpc-simulation", "hpc"),
        task_g=_task(bob, "genomics", "agent", "inference-agent"),
        node_hpc=Node.objects.filter(pool__name="cpu-hpc").order_by("name").first(),
        node_gpu=Node.objects.filter(pool__name="gpu-train").order_by("name").first(),
    )
    w.simulation = SimulationRun.objects.create(
        workload="launch-mix", parameters={"policies": ["fifo"], "seed": 1}
    )
    w.replay_hpc = SimulationRun.objects.create(
        workload="history", parameters={"policies": ["fifo"], "days": 1, "queues": ["hpc"]}
    )
    w.replay_site = SimulationRun.objects.create(
        workload="history", parameters={"policies": ["fifo"], "days": 1}
    )
    w.lease_hpc = _lease("inference-agent", "hpc")
    w.lease_other = _lease("inference-agent", "training")
    w.request_by_quinn = _request(w.task_m, quinn)
    w.request_hpc = [_request(w.task_m, alice) for _ in range(2)]
    w.request_other = [_request(w.task_g, bob) for _ in range(2)]
    w.version_hpc = ConfigVersion.objects.filter(
        model="scheduling.queue", object_id=Queue.objects.get(name="hpc").pk
    ).first()
    w.version_training = ConfigVersion.objects.filter(
        model="scheduling.queue", object_id=Queue.objects.get(name="training").pk
    ).first()
    return w


def _clients(role: str) -> tuple[Client, APIClient]:
    page, api = Client(), APIClient()
    if role != "anonymous":
        user = User.objects.get(username=USERS[role])
        page.force_login(user)
        api.force_authenticate(user)
    return page, api


@dataclass
class Case:
    name: str
    allowed: set[str]
    method: str
    url: object  # str, or a function of the world
    data: object = None  # a dict, or a function of the world
    api: bool = False
    htmx: bool = False
    effect: object = None  # a function of the world: did the change happen?


def _queue_setting(name: str) -> object:
    return Queue.objects.get(name=name).max_concurrency


def _queue_page(queue: Queue, **typed: str) -> dict[str, object]:
    """The queue's page as a browser posts it, with `typed` over it (unticked boxes absent)."""
    data = {k: "" if v is None else v for k, v in queue_initial(queue).items() if v is not False}
    return {**data, **typed}


CASES = [
    # tasks: see (members, the queue's admins, platform admins); change (members, admins)
    Case("task page", SEES_MATERIALS | OPERATES_HPC, "get", lambda w: f"/tasks/{w.task_m.pk}/"),
    Case(
        "task fragment",
        SEES_MATERIALS | OPERATES_HPC,
        "get",
        lambda w: f"/tasks/{w.task_m.pk}/",
        htmx=True,
    ),
    Case(
        "task api",
        SEES_MATERIALS | OPERATES_HPC,
        "get",
        lambda w: f"/api/v1/tasks/{w.task_m.pk}/",
        api=True,
    ),
    Case(
        "task log api",
        SEES_MATERIALS | OPERATES_HPC,
        "get",
        lambda w: f"/api/v1/tasks/{w.task_m.pk}/log/",
        api=True,
    ),
    Case(
        "task usage fragment",
        SEES_MATERIALS | OPERATES_HPC,
        "get",
        lambda w: f"/usage/tasks/{w.task_m.pk}/",
        htmx=True,
    ),
    Case(
        "task usage api",
        SEES_MATERIALS | OPERATES_HPC,
        "get",
        lambda w: f"/api/v1/tasks/{w.task_m.pk}/usage/",
        api=True,
    ),
    Case(
        "other project's task",
        {"other", "platform_admin"},
        "get",
        lambda w: f"/api/v1/tasks/{w.task_g.pk}/",
        api=True,
    ),
    Case(
        "ask priority for a task",
        SEES_MATERIALS,
        "post",
        "/api/v1/priority-requests/",
        data=lambda w: {"task": w.task_m.pk, "level": "medium", "reason": "r", "until": "1h"},
        api=True,
        effect=lambda w: PriorityRequest.objects.filter(task=w.task_m).exists(),
    ),
    Case(
        "cancel task (api)",
        SEES_MATERIALS,
        "post",
        lambda w: f"/api/v1/tasks/{w.task_m.pk}/cancel/",
        api=True,
        effect=lambda w: (
            Task.objects.get(pk=w.task_m.pk).state == "cancelled"
            or Task.objects.get(pk=w.task_m.pk).cancelling
        ),
    ),
    Case(
        "cancel other project's task (page)",
        {"other", "platform_admin"},
        "post",
        lambda w: f"/tasks/{w.task_g.pk}/cancel/",
        effect=lambda w: (
            Task.objects.get(pk=w.task_g.pk).state == "cancelled"
            or Task.objects.get(pk=w.task_g.pk).cancelling
        ),
    ),
    # queues: their admins edit them
    Case("queue edit page", OPERATES_HPC, "get", "/queues/hpc/edit/"),
    Case("queue edit other queue", ADMIN, "get", "/queues/training/edit/"),
    Case(
        "queue change (api)",
        OPERATES_HPC,
        "patch",
        "/api/v1/queues/hpc/",
        data={"max_concurrency": 77, "reason": "test"},
        api=True,
        effect=lambda w: _queue_setting("hpc") == 77,
    ),
    Case(
        "queue change other (page)",
        ADMIN,
        "post",
        "/queues/training/edit/",
        data=lambda w: {
            "reason": "test",
            **_queue_page(Queue.objects.get(name="training"), max_concurrency="78"),
        },
        effect=lambda w: _queue_setting("training") == 78,
    ),
    # nodes: a queue admin drains and resumes their pool's
    Case("capacity page", OPERATES_HPC, "get", "/capacity/"),
    Case(
        "drain own pool's node (page)",
        OPERATES_HPC,
        "post",
        lambda w: f"/capacity/nodes/{w.node_hpc.pk}/drained/",
        data={"confirm": "yes"},
        effect=lambda w: Node.objects.get(pk=w.node_hpc.pk).state == "drained",
    ),
    Case(
        "drain another pool's node (api)",
        ADMIN,
        "post",
        lambda w: f"/api/v1/nodes/{w.node_gpu.name}/drained/",
        data={"reason": "t"},
        api=True,
        effect=lambda w: Node.objects.get(pk=w.node_gpu.pk).state == "drained",
    ),
    Case(
        "lend nodes",
        ADMIN,
        "post",
        "/api/v1/leases/",
        data={"pool": "gpu-train", "queue": "hpc", "count": 1, "until": "1h"},
        api=True,
    ),
    # leases: whoever the Capacity page shows them to (the lists are checked below)
    Case(
        "a lease into own queue (api)",
        OPERATES_HPC,
        "get",
        lambda w: f"/api/v1/leases/{w.lease_hpc.pk}/",
        api=True,
    ),
    Case(
        "a lease between others' pools (api)",
        ADMIN,
        "get",
        lambda w: f"/api/v1/leases/{w.lease_other.pk}/",
        api=True,
    ),
    Case(
        "end a lease (api)",
        ADMIN,
        "post",
        lambda w: f"/api/v1/leases/{w.lease_hpc.pk}/end/",
        api=True,
        effect=lambda w: NodeLease.objects.get(pk=w.lease_hpc.pk).ends_at <= timezone.now(),
    ),
    # priority requests: the queue's admins decide
    Case(
        "approve own queue's request (api)",
        OPERATES_HPC,
        "post",
        lambda w: f"/api/v1/priority-requests/{w.request_hpc[0].pk}/approve/",
        data={},
        api=True,
        effect=lambda w: PriorityRequest.objects.get(pk=w.request_hpc[0].pk).state == "approved",
    ),
    Case(
        "reject own queue's request (page)",
        OPERATES_HPC,
        "post",
        lambda w: f"/priority-requests/{w.request_hpc[1].pk}/reject/",
        effect=lambda w: PriorityRequest.objects.get(pk=w.request_hpc[1].pk).state == "rejected",
    ),
    Case(
        "approve a request one asked for oneself",
        ADMIN,
        "post",
        lambda w: f"/api/v1/priority-requests/{w.request_by_quinn.pk}/approve/",
        data={},
        api=True,
        effect=lambda w: PriorityRequest.objects.get(pk=w.request_by_quinn.pk).state == "approved",
    ),
    Case(
        "approve another queue's request",
        ADMIN,
        "post",
        lambda w: f"/api/v1/priority-requests/{w.request_other[0].pk}/approve/",
        data={},
        api=True,
        effect=lambda w: PriorityRequest.objects.get(pk=w.request_other[0].pk).state == "approved",
    ),
    # projects: members and finance see (its usage spans them all); the lead manages them
    Case("project page", SEES_MATERIALS | {"finance"}, "get", "/projects/materials/"),
    Case(
        "project members (api)",
        SEES_MATERIALS | {"finance"},
        "get",
        "/api/v1/projects/materials/members/",
        api=True,
    ),
    Case(
        "project quotas (api)",
        SEES_MATERIALS | {"finance"},
        "get",
        "/api/v1/projects/materials/quotas/",
        api=True,
    ),
    Case(
        "add a member (page)",
        LEADS_MATERIALS,
        "post",
        "/projects/materials/members/",
        data={"username": "bob"},
        effect=lambda w: Membership.objects.filter(
            user__username="bob", project__slug="materials"
        ).exists(),
    ),
    Case(
        "member's quota within the grant (api)",
        LEADS_MATERIALS,
        "put",
        "/api/v1/projects/materials/quotas/",
        data={"queue": "hpc", "resource": "cpus", "limit": 64, "user": "rita", "reason": "t"},
        api=True,
        effect=lambda w: Quota.objects.filter(user__username="rita", limit=64).exists(),
    ),
    Case(
        "project's own quota (api)",
        ADMIN,
        "put",
        "/api/v1/projects/materials/quotas/",
        data={"queue": "hpc", "resource": "cpus", "limit": 1024, "reason": "t"},
        api=True,
        effect=lambda w: Quota.objects.filter(
            project__slug="materials", user=None, resource="cpus", limit=1024
        ).exists(),
    ),
    # usage: finance and admins read everything; running a reconciliation is an admin's
    Case("reconciliation page", {"finance", "platform_admin"}, "get", "/usage/reconciliation/"),
    Case(
        "reconciliations (api)",
        {"finance", "platform_admin"},
        "get",
        "/api/v1/usage/reconciliations/",
        api=True,
    ),
    Case("run a reconciliation", ADMIN, "post", "/api/v1/usage/reconciliations/", api=True),
    # configuration history: queue admins read their queues'; platform admins roll back
    Case("history page", OPERATES_HPC, "get", "/config/"),
    Case("own queue's version", OPERATES_HPC, "get", lambda w: f"/config/{w.version_hpc.pk}/"),
    Case(
        "another queue's version page", ADMIN, "get", lambda w: f"/config/{w.version_training.pk}/"
    ),
    Case(
        "roll back (api)",
        ADMIN,
        "post",
        lambda w: f"/api/v1/config/versions/{w.version_hpc.pk}/rollback/",
        data={"reason": "t"},
        api=True,
    ),
    Case(
        "undo a change (page)",
        ADMIN,
        "post",
        lambda w: f"/config/{w.version_hpc.pk}/undo/",
        data={"reason": "t"},
    ),
    Case("canary page", ADMIN, "get", "/config/canary/"),
    Case("canaries (api)", ADMIN, "get", "/api/v1/canaries/", api=True),
    # what-if simulations: operators (queue admins, platform admins) see and start them
    Case("simulations page", OPERATES_HPC, "get", "/simulations/"),
    Case(
        "start a simulation",
        OPERATES_HPC,
        "post",
        "/simulations/",
        data={"workload": "launch-mix", "policies": "fifo"},
        effect=lambda w: SimulationRun.objects.count() == 4,
    ),
    Case("simulation page", OPERATES_HPC, "get", lambda w: f"/simulations/{w.simulation.pk}/"),
    Case(
        "simulation progress fragment",
        OPERATES_HPC,
        "get",
        lambda w: f"/simulations/{w.simulation.pk}/progress/",
        htmx=True,
    ),
    Case(
        "simulations compared",
        OPERATES_HPC,
        "get",
        lambda w: f"/simulations/compare/?run={w.simulation.pk}&run={w.simulation.pk}",
    ),
    Case(
        "a replay of own queue", OPERATES_HPC, "get", lambda w: f"/simulations/{w.replay_hpc.pk}/"
    ),
    Case("a replay of the whole site", ADMIN, "get", lambda w: f"/simulations/{w.replay_site.pk}/"),
    Case(
        "a replay of the whole site compared",
        ADMIN,
        "get",
        lambda w: f"/simulations/compare/?run={w.simulation.pk}&run={w.replay_site.pk}",
    ),
    # the pages everyone has (their contents are checked below)
    # dashboards: everyone their own; operators the site's (their queues')
    Case("dashboard", EVERYONE, "get", "/dashboard/"),
    Case("dashboard fragment", EVERYONE, "get", "/dashboard/", htmx=True),
    Case("site dashboard", OPERATES_HPC, "get", "/dashboard/site/"),
    Case("site dashboard fragment", OPERATES_HPC, "get", "/dashboard/site/", htmx=True),
    Case(
        "submit again from a task",
        SEES_MATERIALS | OPERATES_HPC,
        "get",
        lambda w: f"/tasks/new/?from={w.task_m.pk}",
    ),
    Case("audit page", EVERYONE, "get", "/audit/"),
    Case("audit api", EVERYONE, "get", "/api/v1/audit/", api=True),
    Case("usage page", EVERYONE, "get", "/usage/"),
    Case("admin console", ADMIN, "get", "/admin/"),
]


def _call(case: Case, role: str, w: World):
    page, api = _clients(role)
    url = case.url(w) if callable(case.url) else case.url
    client = api if case.api else page
    data = case.data(w) if callable(case.data) else case.data
    kwargs = {}
    if case.htmx:
        kwargs["HTTP_HX_REQUEST"] = "true"
    if case.method == "get":
        return client.get(url, **kwargs)
    if case.api:
        return getattr(client, case.method)(
            url, data=json.dumps(data or {}), content_type="application/json"
        )
    return client.post(url, data=data or {}, **kwargs)


def _denied(response, case: Case, role: str) -> bool:
    if role == "anonymous":
        if case.api:
            return response.status_code in (401, 403)
        return response.status_code == 302 and "login" in response["Location"]
    if case.url == "/admin/":
        return response.status_code == 302 and "/admin/login/" in response["Location"]
    return response.status_code in (403, 404)
