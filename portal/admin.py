from django.contrib import admin

from portal.models import ClusterAccount, Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "pi", "share"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]


@admin.register(ClusterAccount)
class ClusterAccountAdmin(admin.ModelAdmin):
    list_display = ["user", "unix_username"]
    search_fields = ["user__username", "unix_username"]
