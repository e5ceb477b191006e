"""Accounting's API shapes: a reconciliation as read, and what asking for one started."""

from __future__ import annotations

from rest_framework import serializers

from accounting.models import Reconciliation


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
