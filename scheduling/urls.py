from django.urls import path

from scheduling.views import canary as views_canary
from scheduling.views import capacity as views_capacity
from scheduling.views import files as views_files
from scheduling.views import policy as views_policy
from scheduling.views import queues as views_queues
from scheduling.views import quotas as views_quotas
from scheduling.views import sandboxes as views_sandboxes
from scheduling.views import task_cancel as views_cancel
from scheduling.views import tasks as views
from scheduling.views import workflows as views_workflows

urlpatterns = [
    path("", views.task_list, name="task-list"),
    path("tasks/new/", views.task_submit, name="task-submit"),
    path("tasks/new/folders/", views.task_submit_folders, name="task-submit-folders"),
    path("tasks/new/preview/", views.task_submit_preview, name="task-submit-preview"),
    path("tasks/<int:pk>/", views.task_detail, name="task-detail"),
    path("tasks/<int:pk>/cancel/", views_cancel.task_cancel, name="task-cancel"),
    path("tasks/cancel/", views_cancel.task_bulk_cancel, name="task-bulk-cancel"),
    path("workflows/", views_workflows.workflow_list, name="workflow-list"),
    path("workflows/<int:pk>/", views_workflows.workflow_detail, name="workflow-detail"),
    path("workflows/<int:pk>/cancel/", views_workflows.workflow_cancel, name="workflow-cancel"),
    path("workflows/<int:pk>/changes/", views_workflows.workflow_changes, name="workflow-changes"),
    path(
        "tasks/<int:pk>/priority/",
        views_policy.task_priority_request,
        name="task-priority-request",
    ),
    path("priority-requests/", views_policy.priority_requests, name="priority-requests"),
    path(
        "priority-requests/<int:pk>/<str:verdict>/",
        views_policy.priority_request_decide,
        name="priority-request-decide",
    ),
    path("queues/", views_policy.queue_list, name="queue-list"),
    path("queues/<slug:name>/edit/", views_queues.queue_edit, name="queue-edit"),
    path("config/canary/", views_canary.canary_page, name="canary"),
    path(
        "config/canary/<int:pk>/<str:verdict>/",
        views_canary.canary_decide,
        name="canary-decide",
    ),
    path("projects/<slug:slug>/quotas/", views_quotas.project_quota, name="project-quota"),
    path("sandboxes/", views_sandboxes.sandbox_list, name="sandbox-list"),
    path("sandboxes/<str:sid>/", views_sandboxes.sandbox_detail, name="sandbox-detail"),
    path("sandboxes/<str:sid>/end/", views_sandboxes.sandbox_end, name="sandbox-end"),
    path("files/", views_files.files_home, name="files"),
    path("files/<slug:area>/", views_files.files_browse, name="files-area"),
    path("files/<slug:area>/<path:path>", views_files.files_browse, name="files-path"),
    path("capacity/", views_capacity.capacity, name="capacity"),
    path("capacity/lend/", views_capacity.lend, name="capacity-lend"),
    path("capacity/schedules/", views_capacity.lease_schedule, name="capacity-schedule-new"),
    path("capacity/schedules/<int:pk>/", views_capacity.lease_schedule, name="capacity-schedule"),
    path("capacity/leases/<int:pk>/end/", views_capacity.lease_end, name="capacity-lease-end"),
    path(
        "capacity/nodes/<int:pk>/<str:state>/",
        views_capacity.node_state,
        name="capacity-node",
    ),
]
