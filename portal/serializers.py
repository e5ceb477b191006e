"""What the portal's API answers with: audit rows and configuration versions."""

from __future__ import annotations

from rest_framework import serializers

from portal import history
from portal.models import AuditEvent, ConfigVersion


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = ["id", "at", "actor", "action", "target", "project", "queue", "detail", "address"]


class ConfigVersionSerializer(serializers.ModelSerializer):
    changes = serializers.SerializerMethodField()

    class Meta:
        model = ConfigVersion
        fields = [
            "id",
            "at",
            "author_name",
            "model",
            "object_id",
            "object_repr",
            "action",
            "reason",
            "restores",
            "before",
            "after",
            "changes",
        ]

    def get_changes(self, version: ConfigVersion) -> list[dict]:
        return [
            {"field": f, "before": old, "after": new}
            for f, old, new in history.diff(version.before, version.after)
        ]
