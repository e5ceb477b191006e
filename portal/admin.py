from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from portal import services
from portal.admin_reason import VersionedAdmin
from portal.models import ClusterAccount, Membership, Project


class MembershipInline(admin.TabularInline):
    """The project's members, read-only: they are added and removed on the project's members
    page (portal/services.py), which records the change in the audit log and takes a removed
    member's job account out of the project's Unix group at once (docs/storage.md)."""

    model = Membership
    extra = 0
    fields = ["user", "role"]
    readonly_fields = ["user", "role"]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Project)
class ProjectAdmin(VersionedAdmin):
    list_display = ["slug", "name", "pi", "share"]
    search_fields = ["slug", "name"]
    readonly_fields = ["members_page"]
    inlines = [MembershipInline]

    def save_model(self, request: HttpRequest, obj: Project, form: object, change: bool) -> None:
        super().save_model(request, obj, form, change)
        services.lead_joins(project=obj)

    @admin.display(description="Members")
    def members_page(self, project: Project) -> str:
        if project.pk is None:
            return "Add members on the project's members page once it is saved."
        url = reverse("project-members", args=[project.slug])
        return format_html('<a href="{}">Add or remove members</a>', url)


@admin.register(ClusterAccount)
class ClusterAccountAdmin(admin.ModelAdmin):
    list_display = ["user", "unix_username"]
    search_fields = ["user__username", "unix_username"]


class TwoFactorDeviceAdmin(admin.ModelAdmin):
    """A user's two-factor devices, without their secrets: a platform admin sees who has set
    up an app and deletes it for a user who lost theirs (they set up a new one at their next
    login). django-otp's own pages show the secret and its QR code; they are replaced here."""

    list_display = ["user", "name", "confirmed", "last_used_at"]
    list_filter = ["confirmed"]
    search_fields = ["user__username"]
    fields = readonly_fields = ("user", "name", "confirmed", "last_used_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


for _model in (TOTPDevice, StaticDevice):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)
    admin.site.register(_model, TwoFactorDeviceAdmin)
