"""REST API v1 for workflows: DAGs of tasks. Thin, like scheduling/api/tasks.py."""

from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListCreateAPIView, RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.http import SignedInApiRequest
from portal.parsing import DESCRIPTOR_PARSERS, descriptor_request, read_descriptor
from scheduling import services
from scheduling.selectors import workflow_get_for_user, workflow_list_for_user
from scheduling.serializers import WorkflowDetailSerializer, WorkflowSerializer


class WorkflowListCreate(ListCreateAPIView):
    serializer_class = WorkflowSerializer
    parser_classes = DESCRIPTOR_PARSERS

    def get_queryset(self):
        return workflow_list_for_user(self.request.user).order_by("-id")

    @extend_schema(
        request=descriptor_request("WorkflowUpload"),
        responses={201: WorkflowDetailSerializer},
        description="Submit a `kind: Workflow` descriptor: a DAG of tasks.",
    )
    def post(self, request: Request, *args, **kwargs) -> Response:
        body, fmt = read_descriptor(request)
        # The default permission, IsAuthenticated, lets only a signed-in user in.
        user = cast(User, request.user)
        workflow = services.workflow_submit(user=user, text=body, fmt=fmt)
        data = WorkflowDetailSerializer(workflow, context={"request": request}).data
        return Response(data, status=status.HTTP_201_CREATED)


class WorkflowDetail(RetrieveAPIView):
    serializer_class = WorkflowDetailSerializer

    def get_object(self):
        return workflow_get_for_user(self.request.user, self.kwargs["pk"])


class WorkflowCancel(APIView):
    @extend_schema(request=None, responses={200: WorkflowSerializer})
    def post(self, request: SignedInApiRequest, pk: int) -> Response:
        workflow = workflow_get_for_user(request.user, pk)
        workflow = services.workflow_cancel(user=request.user, workflow=workflow)
        return Response(WorkflowSerializer(workflow, context={"request": request}).data)
