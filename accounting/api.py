"""REST API v1 for usage: reports and exports, a task's usage, collectors' samples, and
reconciliations (docs/accounting.md)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import date

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounting import reports, selectors, services
from accounting.exports import csv_stream, xlsx_stream
from accounting.serializers import ReconcileStartedSerializer, ReconciliationSerializer
from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from scheduling.usage import task_get_for_user


class _Download(BaseRenderer):
    """Lets `?format=csv|xlsx` through content negotiation; the view streams the file."""

    charset = None

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return b""


class CSVRenderer(_Download):
    media_type = "text/csv"
    format = "csv"


class XLSXRenderer(_Download):
    media_type = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    format = "xlsx"


def download(q: reports.UsageQuery, user, fmt: str) -> StreamingHttpResponse:
    """The query as a streamed CSV or XLSX file named after its period and filters."""
    header, rows = table(q, user)
    currency = settings.SWITCHYARD_CURRENCY
    if fmt == "csv":
        body, kind = csv_stream(header, rows), CSVRenderer.media_type
    else:
        sheet = xlsx_stream(
            f"usage {currency}",
            header,
            rows,
            money=("charge",),
            quantities=("quantity",),
            totals=("charge",),
        )
        body, kind = sheet, XLSXRenderer.media_type
    response = StreamingHttpResponse(body, content_type=kind)
    response["Content-Disposition"] = f'attachment; filename="usage_{q.slug()}.{fmt}"'
    return response


def table(q: reports.UsageQuery, user) -> tuple[list[str], Iterable[tuple]]:
    if q.by_record:
        return list(reports.RECORD_COLUMNS), reports.records(user, q)
    columns = (["period"] if q.period != "all" else []) + list(q.group_by)
    columns = [c for c in columns if c != "metric"]
    header = [*columns, "metric", "unit", "quantity", "charge", "currency", "records"]

    def rows() -> Iterator[tuple]:
        currency = settings.SWITCHYARD_CURRENCY
        for row in reports.report(user, q):
            yield (
                *(_cell(c, row.get(c)) for c in columns),
                row["metric"],
                row["unit"],
                row["quantity"],
                row["charge"],
                currency,
                row["records"],
            )

    return header, rows()


def _cell(column: str, value):
    """A period is a date (its first day): a date cell in a spreadsheet, ISO in CSV."""
    if column == "period" and isinstance(value, str):
        return date.fromisoformat(value)
    return value


_PARAMS = [
    OpenApiParameter("from", str, description="first day, YYYY-MM-DD (default: the month's first)"),
    OpenApiParameter("to", str, description="last day, YYYY-MM-DD (default: today)"),
    OpenApiParameter(
        "group_by",
        str,
        description="up to two of project, user, queue, pool, "
        "type, area, metric (comma-separated); none; or record (every record)",
    ),
    OpenApiParameter("period", str, description="day, week, month or all"),
    OpenApiParameter("format", str, description="json (default), csv or xlsx"),
    *[OpenApiParameter(f, str, description=f"only this {f}") for f in reports.FILTERS],
]


class UsageReport(APIView):
    renderer_classes = [JSONRenderer, CSVRenderer, XLSXRenderer]

    @extend_schema(
        parameters=_PARAMS,
        responses={
            200: inline_serializer(
                "UsageReport",
                {
                    "query": serializers.DictField(),
                    "currency": serializers.CharField(),
                    "rows": serializers.ListField(child=serializers.DictField()),
                    "totals": serializers.ListField(child=serializers.DictField()),
                    "storage_by_area": serializers.ListField(child=serializers.DictField()),
                },
            )
        },
        description="Usage and charges, grouped and by period; finance sees every project, "
        "anyone else their own. `format=csv|xlsx` streams a file.",
    )
    def get(self, request: SignedInApiRequest) -> Response | StreamingHttpResponse:
        q = reports.parse_query(request.query_params)
        fmt = request.query_params.get("format", "json")
        if fmt in ("csv", "xlsx"):
            return download(q, request.user, fmt)
        if q.by_record:
            raise ApplicationError(
                "every record comes as a file: add format=csv or format=xlsx",
                field="format",
                got=fmt,
            )
        return Response(
            {
                "query": q.params(),
                "currency": settings.SWITCHYARD_CURRENCY,
                "rows": reports.as_json(reports.report(request.user, q)),
                "totals": reports.as_json(reports.totals(request.user, q)),
                "storage_by_area": reports.as_json(reports.storage_by_area(request.user, q)),
            }
        )


class TaskUsage(APIView):
    @extend_schema(
        responses={
            200: inline_serializer(
                "TaskUsage",
                {
                    "settled": serializers.ListField(child=serializers.DictField()),
                    "committed": serializers.ListField(child=serializers.DictField()),
                },
            )
        },
        description="A task's usage: billed records per attempt and metric (settled), and "
        "what its running attempt has used so far (committed).",
    )
    def get(self, request: SignedInApiRequest, pk: int) -> Response:
        task = task_get_for_user(request.user, pk)
        usage = services.task_usage(task)
        return Response({part: reports.as_json(rows) for part, rows in usage.items()})


# -- collectors -----------------------------------------------------------------------------


class CollectorAuthentication(BaseAuthentication):
    """`Authorization: Collector <token>`: good for the sample ingest and nothing else."""

    keyword = b"collector"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Authorization: Collector <token>")
        collector = services.collector_authenticate(parts[1])
        if collector is None:
            raise AuthenticationFailed("unknown or disabled collector token")
        return (None, collector)

    def authenticate_header(self, request):
        return "Collector"


class CollectorScheme(OpenApiAuthenticationExtension):
    target_class = CollectorAuthentication
    name = "collectorToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Collector <token>` (manage.py collector add NAME)",
        }


class IsCollector(BasePermission):
    def has_permission(self, request, view) -> bool:
        return isinstance(request.successful_authenticator, CollectorAuthentication)


class SampleIngest(APIView):
    authentication_classes = [CollectorAuthentication]
    permission_classes = [IsCollector]

    @extend_schema(
        request=inline_serializer(
            "Samples",
            {
                "samples": serializers.ListField(
                    child=serializers.DictField(),
                    help_text="{id, project, metric: storage|network, at (ISO time or "
                    "date), user?; storage: area?, and bytes with seconds (held that "
                    "long from `at`) or quantity in GB-days; network: quantity in GB}",
                )
            },
        ),
        responses={
            200: inline_serializer(
                "SamplesStored",
                {"recorded": serializers.IntegerField(), "already": serializers.IntegerField()},
            )
        },
        description="A collector's storage and network samples; idempotent by sample id.",
    )
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        return Response(
            services.samples_ingest(collector=request.auth, samples=data.get("samples"))
        )


# -- reconciliation -------------------------------------------------------------------------


class ReconciliationList(APIView):
    @extend_schema(responses={200: ReconciliationSerializer(many=True)})
    def get(self, request: SignedInApiRequest) -> Response:
        if not reports.sees_all(request.user):
            raise PermissionDenied("finance and platform admins see reconciliations")
        rows = selectors.reconciliations_recent(100)
        return Response(ReconciliationSerializer(rows, many=True).data)

    @extend_schema(
        request=None,
        responses={202: ReconcileStartedSerializer},
        description="Have a worker meter what is left and reconcile every backend now "
        "(platform admins). Answers at once (202); the results are the reconciliations GET "
        "lists with ran_at at or after `started_at`. One at a time: while one is queued or "
        "running, another POST answers 409 and starts nothing.",
    )
    def post(self, request: SignedInApiRequest) -> Response:
        if not roles.is_platform_admin(request.user):
            raise PermissionDenied("platform admins run reconciliations (finance reads them)")
        started = services.reconcile_now()
        if started.already:
            raise ApplicationError(
                f"a reconciliation asked at {started.since.isoformat()} is still queued or "
                "running; its results will be in GET /api/v1/usage/reconciliations/",
                status=409,
            )
        body = {"started_at": started.since, "results": "/api/v1/usage/reconciliations/"}
        return Response(ReconcileStartedSerializer(body).data, status=202)
