"""Accounting in the admin console: rates (a new price from a date on), records and
reconciliations (read only), collectors; allocations (granted here or by approving a
request), and their requests (read only: decided in the allocation inbox)."""

from __future__ import annotations

from django.contrib import admin

from accounting.models import (
    Allocation,
    AllocationRequest,
    Collector,
    Rate,
    Reconciliation,
    UsageRecord,
)
from portal.admin_reason import VersionedAdmin


@admin.register(Rate)
class RateAdmin(VersionedAdmin):
    list_display = ["queue", "metric", "price", "currency", "valid_from", "valid_until", "note"]
    list_filter = ["metric", "queue"]

    def get_readonly_fields(self, request, obj=None):
        # A price already in force is history: only its end may be set (a new price then
        # starts where it ends).
        if obj is not None:
            return ["queue", "metric", "price", "currency", "valid_from"]
        return []


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnly):
    list_display = ["key", "metric", "quantity", "charge", "project", "user", "queue", "ended_at"]
    list_filter = ["metric", "source", "queue"]
    search_fields = ["key", "job_id"]
    date_hierarchy = "ended_at"


@admin.register(Reconciliation)
class ReconciliationAdmin(ReadOnly):
    list_display = [
        "ran_at",
        "backend",
        "outcome",
        "jobs",
        "missing",
        "extra",
        "duplicate",
        "mismatched",
    ]
    list_filter = ["outcome", "backend"]


@admin.register(Collector)
class CollectorAdmin(admin.ModelAdmin):
    list_display = ["name", "token_prefix", "active", "last_seen"]
    readonly_fields = ["token_prefix", "last_seen"]

    def has_add_permission(self, request) -> bool:
        return False  # `manage.py collector add NAME` shows the token once


@admin.register(Allocation)
class AllocationAdmin(VersionedAdmin):
    list_display = ["name", "project", "starts", "ends", "gpu_hours", "core_hours"]
    list_filter = ["project"]
    search_fields = ["name", "project__slug"]


@admin.register(AllocationRequest)
class AllocationRequestAdmin(ReadOnly):
    list_display = ["id", "project", "requester", "gpu_hours", "core_hours", "ends", "state"]
    list_filter = ["state"]
