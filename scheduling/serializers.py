from __future__ import annotations

from rest_framework import serializers

from scheduling.models import Attempt, Task, TaskEvent, Workflow


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
            "priority",
            "attempts",
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


class TaskDetailSerializer(TaskSerializer):
    events = TaskEventSerializer(many=True, read_only=True)
    attempt_list = AttemptSerializer(source="attempt_set", many=True, read_only=True)

    class Meta(TaskSerializer.Meta):
        fields = [
            *TaskSerializer.Meta.fields,
            "descriptor",
            "descriptor_format",
            "spec",
            "events",
            "attempt_list",
        ]


class WorkflowTaskSerializer(serializers.ModelSerializer):
    depends_on = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
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
        return WorkflowTaskSerializer(tasks, many=True, context=self.context).data
