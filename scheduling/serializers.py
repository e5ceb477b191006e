from __future__ import annotations

from rest_framework import serializers

from portal.models import PriorityRequest
from scheduling import sealed
from scheduling.decisions.levels import LEVELS
from scheduling.models import Attempt, Task, TaskEvent, Workflow
from scheduling.selectors.waiting import explain


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
        ]

    def get_wait_reason(self, task: Task) -> str | None:
        return task.reason if task.state in ("pending", "waiting", "queued") else None

    def get_level(self, task: Task) -> str:
        return LEVELS[task.level]


_WHEN = serializers.DateTimeField()


def task_created_data(task: Task, *, queue: str, url: str) -> dict:
    """What `TaskSerializer` gives for a task just stored, built directly: DRF builds a
    ModelSerializer's fields anew for every instance, which was a third of the cost of
    accepting a task (docs/benchmarks.md). `queue` is the queue's name (the task row holds its
    id); tests/unit/scheduling/test_api_created.py holds the two equal."""
    waiting = task.state in ("pending", "waiting", "queued")
    return {
        "id": task.pk,
        "url": url,
        "name": task.name,
        "project": task.project.slug,
        "owner": task.owner.username,
        "type": task.type,
        "declared_type": task.declared_type,
        "classify_reason": task.classify_reason,
        "queue": queue,
        "routing_reason": task.routing_reason,
        "state": task.state,
        "cancelling": task.cancelling,
        "reason": task.reason,
        "wait_reason": task.reason if waiting else None,
        "level": LEVELS[task.level],
        "priority": task.priority,
        "attempts": task.attempts,
        "preemptions": task.preemptions,
        "retry_count": task.retry_count,
        "fail_action": task.fail_action,
        "backend": task.backend,
        "backend_id": task.backend_id,
        "exit_code": task.exit_code,
        "submitted_at": _WHEN.to_representation(task.submitted_at),
        "started_at": _WHEN.to_representation(task.started_at) if task.started_at else None,
        "ended_at": _WHEN.to_representation(task.ended_at) if task.ended_at else None,
    }


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
            "wait",
            "events",
            "attempt_list",
        ]

    wait = serializers.SerializerMethodField(
        help_text="Why it waits: kind, message, level, position in its queue, a pending "
        "priority request, estimated start (null once it runs)."
    )
    spec = serializers.SerializerMethodField(
        help_text="The validated descriptor; secret_env values are shown as ••••, to everyone."
    )

    def get_spec(self, task: Task) -> dict:
        return sealed.shown_spec(task.spec)

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
