from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth.models import User
from rest_framework import serializers

from portal import roles
from scheduling import sealed
from scheduling.decisions import lifecycle
from scheduling.decisions.levels import LEVELS
from scheduling.forms_admin import duration_text
from scheduling.models import (
    Attempt,
    LeaseSchedule,
    Node,
    NodeLease,
    Pool,
    PriorityRequest,
    Queue,
    Task,
    TaskEvent,
    Workflow,
)
from scheduling.presenters.runtimes import task_prediction
from scheduling.selectors.waiting import explain
from scheduling.services.queues import EDITABLE


class TaskEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = TaskEvent
        fields = ["at", "from_state", "to_state", "message"]


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = Attempt
        fields = [
            "number",
            "key",
            "backend_id",
            "state",
            "reason",
            "nodes",
            "exit_code",
            "submitted_at",
            "started_at",
            "ended_at",
            "pull_seconds",
            "pull_bytes",
        ]


class TaskSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug")
    owner = serializers.CharField(source="owner.username")
    queue = serializers.CharField(source="queue.name")
    wait_reason = serializers.SerializerMethodField()
    cancelling = serializers.BooleanField(read_only=True)
    level = serializers.SerializerMethodField()
    url = serializers.HyperlinkedIdentityField(view_name="api-task-detail")

    class Meta:
        model = Task
        fields = [
            "id",
            "url",
            "name",
            "project",
            "owner",
            "type",
            "declared_type",
            "classify_reason",
            "queue",
            "routing_reason",
            "state",
            "cancelling",
            "reason",
            "wait_reason",
            "level",
            "priority",
            "attempts",
            "preemptions",
            "retry_count",
            "fail_action",
            "backend",
            "backend_id",
            "exit_code",
            "submitted_at",
            "started_at",
            "ended_at",
            "predicted_runtime_s",
        ]

    def get_wait_reason(self, task: Task) -> str | None:
        return task.reason if task.state in lifecycle.WAITS else None

    def get_level(self, task: Task) -> str:
        return LEVELS[task.level]


def task_created_data(task: Task, *, queue: str, url: str) -> dict:
    """`TaskSerializer`'s output for a task just stored, from the serializer's own fields built
    once per process: DRF builds a ModelSerializer's fields anew for every instance, which was
    a third of the cost of accepting a task (docs/benchmarks.md). `queue` is the queue's name
    (the task row holds its id) and `url` the task's (built from the request)."""
    given = {"queue": queue, "url": url}
    data: dict[str, Any] = {}
    for name, field in _task_fields().items():
        if name in given:
            data[name] = given[name]
        else:  # as Serializer.to_representation does it
            value = field.get_attribute(task)
            data[name] = None if value is None else field.to_representation(value)
    return data


@functools.cache
def _task_fields() -> dict[str, serializers.Field]:
    """A TaskSerializer's bound fields; they keep no state of their own between tasks."""
    return dict(TaskSerializer().fields)


class TaskDetailSerializer(TaskSerializer):
    events = TaskEventSerializer(many=True, read_only=True)
    attempt_list = AttemptSerializer(source="attempt_set", many=True, read_only=True)

    class Meta(TaskSerializer.Meta):
        fields = [
            *TaskSerializer.Meta.fields,
            "descriptor",
            "descriptor_format",
            "spec",
            "level_reason",
            "borrowed",
            "wait",
            "prediction",
            "events",
            "attempt_list",
        ]
        extra_kwargs = {
            "borrowed": {
                "help_text": "What of other projects' unused quota it was admitted on "
                '("16 GPUs"); empty: none (docs/policy.md, quotas that lend).'
            }
        }

    wait = serializers.SerializerMethodField(
        help_text="Why it waits: kind, message, level, position in its queue, a pending "
        "priority request, estimated start and what it waits for (waits_for: a quota's "
        "holders and their walltimes' ends) (null once it runs)."
    )
    spec = serializers.SerializerMethodField(
        help_text="The validated descriptor; secret_env values are shown as ••••, to everyone."
    )
    prediction = serializers.SerializerMethodField(
        help_text="Its predicted runtime (s) from the last runs of the same work; once it "
        "ended, how long it ran (s), how far off (s, > 0: ran longer) and a sentence saying "
        "so. Null before it is queued. It plans; the walltime still ends the job."
    )

    def get_spec(self, task: Task) -> dict:
        return sealed.shown_spec(task.spec)

    def get_prediction(self, task: Task) -> dict | None:
        return task_prediction(task)

    def get_wait(self, task: Task) -> dict | None:
        explanation = explain(task)
        return explanation.as_dict() if explanation else None


class WorkflowTaskSerializer(serializers.ModelSerializer):
    depends_on: serializers.PrimaryKeyRelatedField[Task] = serializers.PrimaryKeyRelatedField(
        many=True, read_only=True
    )
    queue = serializers.CharField(source="queue.name")
    url = serializers.HyperlinkedIdentityField(view_name="api-task-detail")

    class Meta:
        model = Task
        fields = [
            "id",
            "url",
            "name",
            "type",
            "queue",
            "state",
            "reason",
            "attempts",
            "fail_action",
            "depends_on",
            "started_at",
            "ended_at",
            "exit_code",
        ]


class WorkflowSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug")
    owner = serializers.CharField(source="owner.username")
    url = serializers.HyperlinkedIdentityField(view_name="api-workflow-detail")

    class Meta:
        model = Workflow
        fields = [
            "id",
            "url",
            "name",
            "project",
            "owner",
            "state",
            "reason",
            "submitted_at",
            "ended_at",
        ]


class WorkflowDetailSerializer(WorkflowSerializer):
    tasks = serializers.SerializerMethodField()

    class Meta(WorkflowSerializer.Meta):
        fields = [*WorkflowSerializer.Meta.fields, "descriptor", "descriptor_format", "tasks"]

    def get_tasks(self, workflow: Workflow) -> list[dict]:
        tasks = workflow.tasks.select_related("queue").prefetch_related("depends_on").order_by("id")
        # many=True builds a ListSerializer, whose data is a list.
        return WorkflowTaskSerializer(tasks, many=True, context=self.context).data  # type: ignore[return-value]


class PriorityRequestSerializer(serializers.ModelSerializer):
    requester = serializers.CharField(source="requester.username")
    project = serializers.CharField(source="project.slug")
    queue = serializers.CharField(source="queue.name")
    task = serializers.IntegerField(source="task_id", allow_null=True)
    level = serializers.SerializerMethodField()
    decided_by = serializers.SerializerMethodField()

    class Meta:
        model = PriorityRequest
        fields = [
            "id",
            "requester",
            "project",
            "queue",
            "task",
            "level",
            "reason",
            "until",
            "state",
            "created_at",
            "decided_by",
            "decided_at",
            "comment",
            "ended_at",
        ]

    def get_level(self, request: PriorityRequest) -> str:
        return LEVELS[request.level]

    def get_decided_by(self, request: PriorityRequest) -> str | None:
        return request.decided_by.get_username() if request.decided_by else None


class QueueSerializer(serializers.ModelSerializer):
    pool: serializers.SlugRelatedField[Pool] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    admins: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", many=True, read_only=True
    )
    editable = serializers.SerializerMethodField()

    class Meta:
        model = Queue
        fields = ["name", "pool", "admins", "editable", *EDITABLE]

    def get_editable(self, queue: Queue) -> bool:
        return roles.administers_queue(self.context["request"].user, queue.pk)


class LeaseSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    queue = serializers.CharField(source="queue.name")
    nodes: serializers.SlugRelatedField[Node] = serializers.SlugRelatedField(
        many=True, read_only=True, slug_field="name"
    )
    created_by = serializers.SerializerMethodField()

    class Meta:
        model = NodeLease
        fields = [
            "id",
            "pool",
            "queue",
            "nodes",
            "starts_at",
            "ends_at",
            "state",
            "created_by",
            "reason",
            "reclaimed_at",
            "requeued",
        ]

    def get_created_by(self, lease: NodeLease) -> str | None:
        return lease.created_by.get_username() if lease.created_by else None


class LeaseScheduleSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    queue = serializers.CharField(source="queue.name")
    start = serializers.TimeField(format="%H:%M", help_text="every day at, site time")
    duration = serializers.SerializerMethodField(help_text="how long each lease lasts: 6h, 1h30m")

    class Meta:
        model = LeaseSchedule
        fields = ["id", "pool", "queue", "count", "start", "duration", "duration_s", "enabled"]

    def get_duration(self, schedule: LeaseSchedule) -> str:
        return duration_text(schedule.duration_s)
