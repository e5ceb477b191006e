from django.contrib import admin

from portal.models import ClusterAccount, Membership, PriorityRequest, Project, Quota


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "pi", "share"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline, QuotaInline]


@admin.register(ClusterAccount)
class ClusterAccountAdmin(admin.ModelAdmin):
    list_display = ["user", "unix_username"]
    search_fields = ["user__username", "unix_username"]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["project", "queue", "user", "resource", "limit", "over_quota", "updated_at"]
    list_filter = ["queue", "resource", "over_quota"]
    list_editable = ["limit", "over_quota"]
    search_fields = ["project__slug", "user__username"]


@admin.register(PriorityRequest)
class PriorityRequestAdmin(admin.ModelAdmin):
    list_display = ["id", "requester", "project", "queue", "task", "level", "state", "until"]
    list_filter = ["state", "queue"]
    # Decisions go through the inbox (they notify and re-level), never through this form.
    readonly_fields = [f.name for f in PriorityRequest._meta.fields]

    def has_add_permission(self, request):
        return False
