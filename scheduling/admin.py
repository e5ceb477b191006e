from django.contrib import admin

from portal.admin import ProjectAdmin as OrganisationProjectAdmin
from portal.admin_reason import VersionedAdmin
from portal.models import Project
from scheduling.models import (
    Alert,
    Attempt,
    CatalogueImage,
    ClassifierSettings,
    ImageRegistry,
    LeaseSchedule,
    LevelRule,
    Node,
    NodeLease,
    Pool,
    PoolBorrowing,
    PriorityRequest,
    Queue,
    Quota,
    RoutingRule,
    StorageArea,
    Task,
    TaskEvent,
)
from scheduling.services.capacity import nodes_set_state


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    readonly_fields = ["state", "health"]  # changed by the node actions, which reach backends


class BorrowingInline(admin.TabularInline):
    """Backfill across pools: which pools' idle cores this pool's CPU jobs may use
    (docs/policy.md, "Backfill across pools"); off until switched on."""

    model = PoolBorrowing
    fk_name = "borrower"
    extra = 0
    verbose_name = "may use the idle cores of"
    verbose_name_plural = "backfill across pools (this pool's CPU jobs on another's idle cores)"


@admin.register(Pool)
class PoolAdmin(VersionedAdmin):
    list_display = ["name", "kind", "backend", "max_image_bytes"]
    inlines = [NodeInline, BorrowingInline]


@admin.register(PoolBorrowing)
class PoolBorrowingAdmin(VersionedAdmin):
    list_display = ["borrower", "lender", "enabled", "cpus_per_free_gpu"]
    list_filter = ["enabled"]


@admin.register(Node)
class NodeAdmin(VersionedAdmin):
    list_display = ["name", "pool", "cpus", "memory_mib", "gpus", "gpu_model", "switch", "state"]
    list_filter = ["pool", "state"]
    search_fields = ["name"]
    # State changes reach the backend through these actions (a worker carries them out).
    readonly_fields = ["state", "health"]
    actions = ["drain", "mark_down", "resume"]

    def _set(self, request, queryset, state: str, verb: str) -> None:
        changed = nodes_set_state(
            nodes=list(queryset),
            state=state,
            reason=f"{verb} in the admin console",
            by=request.user.get_username(),
        )
        self.message_user(request, f"{changed} node(s) {verb}; their backends follow.")

    @admin.action(description="Drain: no new work (running work finishes)")
    def drain(self, request, queryset):
        self._set(request, queryset, Node.State.DRAINED, "drained")

    @admin.action(description="Mark down: its running work fails and is retried elsewhere")
    def mark_down(self, request, queryset):
        self._set(request, queryset, Node.State.DOWN, "marked down")

    @admin.action(description="Resume: back in service")
    def resume(self, request, queryset):
        self._set(request, queryset, Node.State.UP, "resumed")


@admin.register(Queue)
class QueueAdmin(VersionedAdmin):
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


@admin.register(LevelRule)
class LevelRuleAdmin(VersionedAdmin):
    list_display = ["task_type", "queue", "start_level", "step", "every_s", "limit_level", "repeat"]
    list_filter = ["task_type", "queue"]


@admin.register(ClassifierSettings)
class ClassifierSettingsAdmin(VersionedAdmin):
    list_display = ["many_gpus", "long_estimate_s", "many_cpus", "short_s", "small_cpus"]

    def has_add_permission(self, request):
        return not ClassifierSettings.objects.exists()


@admin.register(RoutingRule)
class RoutingRuleAdmin(VersionedAdmin):
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


@admin.register(StorageArea)
class StorageAreaAdmin(VersionedAdmin):
    # Versioned in the configuration history as pools and queues are (docs/storage.md).
    list_display = ["name", "path", "owner", "read_only", "quota_bytes", "retention_days"]
    filter_horizontal = ["pools"]


@admin.register(ImageRegistry)
class ImageRegistryAdmin(VersionedAdmin):
    # The image catalogue, versioned like pools and storage areas (docs/containers.md).
    list_display = ["host", "any_image", "note"]


@admin.register(CatalogueImage)
class CatalogueImageAdmin(VersionedAdmin):
    list_display = ["__str__", "family", "task_types", "default_for", "state", "retire_on"]
    list_filter = ["family", "state", "registry"]
    search_fields = ["repository"]
    filter_horizontal = ["pools"]


@admin.register(LeaseSchedule)
class LeaseScheduleAdmin(VersionedAdmin):
    list_display = ["pool", "queue", "count", "start", "duration_s", "enabled"]
    list_editable = ["enabled"]


@admin.register(NodeLease)
class NodeLeaseAdmin(admin.ModelAdmin):
    list_display = ["id", "pool", "queue", "starts_at", "ends_at", "state", "reclaimed_at"]
    list_filter = ["state", "pool", "queue"]
    # Leases are opened from the Capacity page or the API (nodes are picked idle there).
    readonly_fields = [f.name for f in NodeLease._meta.fields] + ["nodes"]

    def has_add_permission(self, request):
        return False


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["at", "kind", "subject", "node", "task"]
    list_filter = ["kind"]
    readonly_fields = [f.name for f in Alert._meta.fields]

    def has_add_permission(self, request):
        return False


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


# A project's admin page shows its quotas too; the organisation's admin knows nothing of
# queues, so the scheduling app (loaded after it) extends it, as one extends the User admin.
admin.site.unregister(Project)


@admin.register(Project)
class ProjectAdmin(OrganisationProjectAdmin):
    inlines = [*OrganisationProjectAdmin.inlines, QuotaInline]


@admin.register(Quota)
class QuotaAdmin(VersionedAdmin):
    list_display = [
        "project",
        "queue",
        "user",
        "resource",
        "limit",
        "borrowing_limit",
        "lending_limit",
        "over_quota",
        "updated_at",
    ]
    list_filter = ["queue", "resource", "over_quota"]
    list_editable = ["limit", "borrowing_limit", "lending_limit", "over_quota"]
    search_fields = ["project__slug", "user__username"]


@admin.register(PriorityRequest)
class PriorityRequestAdmin(admin.ModelAdmin):
    list_display = ["id", "requester", "project", "queue", "task", "level", "state", "until"]
    list_filter = ["state", "queue"]
    # Decisions go through the inbox (they notify and re-level), never through this form.
    readonly_fields = [f.name for f in PriorityRequest._meta.fields]

    def has_add_permission(self, request):
        return False
