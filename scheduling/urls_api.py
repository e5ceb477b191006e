from django.urls import path

from scheduling.api import canary as api_canary
from scheduling.api import capacity as api_capacity
from scheduling.api import files as api_files
from scheduling.api import images as api_images
from scheduling.api import lease_schedules as api_lease_schedules
from scheduling.api import policy as api_policy
from scheduling.api import queues as api_queues
from scheduling.api import quotas as api_quotas
from scheduling.api import sandboxes as api_sandboxes
from scheduling.api import task_preview as api_task_preview
from scheduling.api import tasks as api
from scheduling.api import workflows as api_workflows

urlpatterns = [
    path("tasks/", api.TaskListCreate.as_view(), name="api-task-list"),
    path("tasks/batch/", api.TaskBatch.as_view(), name="api-task-batch"),
    path("tasks/preview/", api_task_preview.TaskPreviewView.as_view(), name="api-task-preview"),
    path("tasks/<int:pk>/", api.TaskDetail.as_view(), name="api-task-detail"),
    path("tasks/<int:pk>/cancel/", api.TaskCancel.as_view(), name="api-task-cancel"),
    path("tasks/<int:pk>/log/", api.TaskLog.as_view(), name="api-task-log"),
    path("workflows/", api_workflows.WorkflowListCreate.as_view(), name="api-workflow-list"),
    path("workflows/<int:pk>/", api_workflows.WorkflowDetail.as_view(), name="api-workflow-detail"),
    path(
        "workflows/<int:pk>/cancel/",
        api_workflows.WorkflowCancel.as_view(),
        name="api-workflow-cancel",
    ),
    path("descriptor-schema/", api.descriptor_schema, name="api-descriptor-schema"),
    path("files/", api_files.FileRoot.as_view(), name="api-files"),
    path("files/<slug:area>/", api_files.FileArea.as_view(), name="api-files-area"),
    path("files/<slug:area>/<path:path>", api_files.FileDetail.as_view(), name="api-file"),
    path("images/", api_images.ImageList.as_view(), name="api-images"),
    path("sandboxes/", api_sandboxes.SandboxListCreate.as_view(), name="api-sandboxes"),
    path("sandboxes/<str:sid>/", api_sandboxes.SandboxDetail.as_view(), name="api-sandbox"),
    path("sandboxes/<str:sid>/exec/", api_sandboxes.SandboxExec.as_view(), name="api-sandbox-exec"),
    path(
        "sandboxes/<str:sid>/egress/",
        api_sandboxes.SandboxEgressList.as_view(),
        name="api-sandbox-egress",
    ),
    path(
        "sandboxes/<str:sid>/files/<path:path>",
        api_sandboxes.SandboxFile.as_view(),
        name="api-sandbox-file",
    ),
    path("leases/", api_capacity.LeaseList.as_view(), name="api-leases"),
    path("leases/<int:pk>/", api_capacity.LeaseDetail.as_view(), name="api-lease"),
    path("leases/<int:pk>/end/", api_capacity.LeaseEnd.as_view(), name="api-lease-end"),
    path(
        "lease-schedules/",
        api_lease_schedules.LeaseScheduleList.as_view(),
        name="api-lease-schedules",
    ),
    path(
        "lease-schedules/<int:pk>/",
        api_lease_schedules.LeaseScheduleDetail.as_view(),
        name="api-lease-schedule",
    ),
    path("projects/<slug:slug>/quotas/", api_quotas.ProjectQuotas.as_view(), name="api-quotas"),
    path("canaries/", api_canary.CanaryList.as_view(), name="api-canaries"),
    path(
        "canaries/<int:pk>/promote/",
        api_canary.CanaryDecide.as_view(promote=True),
        name="api-canary-promote",
    ),
    path(
        "canaries/<int:pk>/abandon/",
        api_canary.CanaryDecide.as_view(promote=False),
        name="api-canary-abandon",
    ),
    path("queues/", api_queues.QueueList.as_view(), name="api-queues"),
    path("queues/<slug:name>/", api_queues.QueueDetail.as_view(), name="api-queue"),
    path("nodes/<str:name>/<str:state>/", api_capacity.NodeState.as_view(), name="api-node-state"),
    path(
        "priority-requests/",
        api_policy.PriorityRequestList.as_view(),
        name="api-priority-requests",
    ),
    path(
        "priority-requests/<int:pk>/approve/",
        api_policy.PriorityRequestDecide.as_view(approve=True),
        name="api-priority-request-approve",
    ),
    path(
        "priority-requests/<int:pk>/reject/",
        api_policy.PriorityRequestDecide.as_view(approve=False),
        name="api-priority-request-reject",
    ),
]
