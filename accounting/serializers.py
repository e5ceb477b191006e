"""Accounting's API shapes: a reconciliation as read, what asking for one started, and
allocations with their requests for more."""

from __future__ import annotations

from rest_framework import serializers

from accounting.models import Allocation, AllocationRequest, Reconciliation
from portal.models import Project


class ReconciliationSerializer(serializers.ModelSerializer):
    differences = serializers.IntegerField(read_only=True)

    class Meta:
        model = Reconciliation
        fields = [
            "id",
            "backend",
            "period_start",
            "period_end",
            "ran_at",
            "outcome",
            "tolerance",
            "jobs",
            "missing",
            "extra",
            "duplicate",
            "mismatched",
            "differences",
            "details",
            "error",
        ]


class ReconcileStartedSerializer(serializers.Serializer):
    started_at = serializers.DateTimeField(
        help_text="When the reconcile was asked for: its results are the reconciliations "
        "with ran_at at or after it."
    )
    results = serializers.CharField(help_text="Where to read them: GET this address.")


class AllocationRequestSerializer(serializers.ModelSerializer):
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    requester = serializers.CharField(source="requester.username", read_only=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, default=None)
    allocation: serializers.PrimaryKeyRelatedField[Allocation] = serializers.PrimaryKeyRelatedField(
        read_only=True
    )

    class Meta:
        model = AllocationRequest
        fields = [
            "id",
            "project",
            "requester",
            "gpu_hours",
            "core_hours",
            "ends",
            "justification",
            "state",
            "created_at",
            "decided_by",
            "decided_at",
            "comment",
            "allocation",
        ]
        read_only_fields = fields


class AllocationLineSerializer(serializers.Serializer):
    resource = serializers.CharField()
    unit = serializers.CharField()
    granted = serializers.IntegerField()
    used = serializers.FloatField(help_text="hours used from the first day to now (or the last)")
    remaining = serializers.FloatField()


class AllocationSerializer(serializers.Serializer):
    """An allocation as `allocation_report` reads it."""

    id = serializers.IntegerField()
    project = serializers.CharField()
    name = serializers.CharField()
    starts = serializers.DateField()
    ends = serializers.DateField(help_text="the last day it covers")
    state = serializers.ChoiceField(["upcoming", "current", "expired"])
    resources = AllocationLineSerializer(many=True)
