"""REST API v1 for the image catalogue: what the signed-in user may name in a task's `image`
(docs/containers.md, "Catalogue"). Platform admins change the catalogue in the admin console.

Thin, like scheduling/api/tasks.py.
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from scheduling.selectors import site_view
from scheduling.selectors.images import images_for_user, pools_by_type
from scheduling.services.images import backend_runs_images
from scheduling.spec import TASK_TYPES

_FAMILIES = ["hpc-toolchain", "ai-training", "ai-inference", "agent-runtime", "sandbox-base"]
_IMAGES = inline_serializer(
    "ImageCatalogue",
    fields={
        "registries": inline_serializer(
            "ImageRegistry",
            many=True,
            fields={
                "host": serializers.CharField(),
                "any_image": serializers.BooleanField(
                    help_text="any image of this registry may run, listed or not"
                ),
            },
        ),
        "images": inline_serializer(
            "CatalogueImage",
            many=True,
            fields={
                "name": serializers.CharField(help_text="registry/repository, no tag"),
                "registry": serializers.CharField(),
                "repository": serializers.CharField(),
                "tags": serializers.ListField(child=serializers.CharField()),
                "any_tag": serializers.BooleanField(help_text="no tags listed: any tag"),
                "family": serializers.ChoiceField(_FAMILIES),
                "task_types": serializers.ListField(child=serializers.CharField()),
                "pools": serializers.ListField(child=serializers.CharField()),
                "uses": serializers.ListField(
                    child=serializers.DictField(), help_text="[{type, pools}]: where it may run"
                ),
                "default_for": serializers.ListField(
                    child=serializers.CharField(),
                    help_text="task types that run it when they name no image",
                ),
                "state": serializers.ChoiceField(["active", "deprecated"]),
                "deprecated": serializers.BooleanField(),
                "retire_on": serializers.DateField(allow_null=True),
                "note": serializers.CharField(),
            },
        ),
        "size_limits": serializers.DictField(
            child=serializers.IntegerField(allow_null=True),
            help_text="pool → the largest image, in compressed layer bytes (null: no limit)",
        ),
    },
)


class ImageList(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("type", OpenApiTypes.STR, enum=list(TASK_TYPES)),
            OpenApiParameter("pool", OpenApiTypes.STR),
        ],
        responses={200: _IMAGES},
        description="The images you may name in a task's `image`, each with the task types "
        "and pools that may run it; retired images are left out, deprecated ones marked.",
    )
    def get(self, request: SignedInApiRequest) -> Response:
        site = site_view()
        task_type = request.query_params.get("type")
        if task_type is not None and task_type not in TASK_TYPES:
            raise ApplicationError(
                f"must be one of {', '.join(TASK_TYPES)}", field="type", got=task_type[:80]
            )
        pool = request.query_params.get("pool")
        pools = {q.pool for q in site.queues.values()}
        if pool is not None and pool not in pools:
            raise ApplicationError(
                f"must be a pool of this site: {', '.join(sorted(pools))}",
                field="pool",
                got=pool[:80],
            )
        found = images_for_user(
            request.user,
            catalogue=site.images,
            pools_by_type=pools_by_type(
                site.queues.values(), site.queue_backends, TASK_TYPES, backend_runs_images
            ),
            today=timezone.localdate(),
            task_type=task_type,
            pool=pool,
        )
        return Response(found)
