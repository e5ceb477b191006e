from django.contrib import admin

from scheduling.models import (
    Attempt,
    ClassifierSettings,
    LevelRule,
    Node,
    Pool,
    Queue,
    RoutingRule,
    Task,
    TaskEvent,
)


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "backend"]
    inlines = [NodeInline]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "pool", "cpus", "memory_mib", "gpus", "gpu_model", "switch", "state"]
    list_filter = ["pool", "state"]
    search_fields = ["name"]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "pool",
        "policy",
        "allocation",
        "max_walltime_s",
        "requires_estimate",
        "preemptible",
        "cpu_oversubscription",
        "max_concurrency",
    ]
    filter_horizontal = ["admins"]
    # Not applied by anything yet (elastic scale-in comes with lending): not offered, so an
    # admin cannot set what would be stored and ignored.
    exclude = ["idle_scale_in_s"]


@admin.register(LevelRule)
class LevelRuleAdmin(admin.ModelAdmin):
    list_display = ["task_type", "queue", "start_level", "step", "every_s", "limit_level", "repeat"]
    list_filter = ["task_type", "queue"]


@admin.register(ClassifierSettings)
class ClassifierSettingsAdmin(admin.ModelAdmin):
    list_display = ["many_gpus", "long_estimate_s", "many_cpus", "short_s", "small_cpus"]

    def has_add_permission(self, request):
        return not ClassifierSettings.objects.exists()


@admin.register(RoutingRule)
class RoutingRuleAdmin(admin.ModelAdmin):
    list_display = ["order", "match_type", "min_gpus", "min_cpus", "queue", "enabled"]
    list_editable = ["enabled"]


class TaskEventInline(admin.TabularInline):
    model = TaskEvent
    extra = 0
    readonly_fields = ["at", "from_state", "to_state", "message"]
    can_delete = False


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    readonly_fields = [f.name for f in Attempt._meta.fields]


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "project", "owner", "type", "queue", "state", "submitted_at"]
    list_filter = ["state", "type", "queue", "backend"]
    search_fields = ["name", "backend_id"]
    # State changes go through the engine's transition service, never through a form.
    readonly_fields = [f.name for f in Task._meta.fields]
    inlines = [AttemptInline, TaskEventInline]

    def has_add_permission(self, request):
        return False
