from django.contrib import admin

from portal.models import Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "pi"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]
