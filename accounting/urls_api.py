from django.urls import path

from accounting import api, api_allocations

urlpatterns = [
    path("usage/", api.UsageReport.as_view(), name="api-usage"),
    path("usage/samples/", api.SampleIngest.as_view(), name="api-usage-samples"),
    path("usage/reconciliations/", api.ReconciliationList.as_view(), name="api-reconciliations"),
    path("tasks/<int:pk>/usage/", api.TaskUsage.as_view(), name="api-task-usage"),
    path("allocations/", api_allocations.AllocationList.as_view(), name="api-allocations"),
    path(
        "allocations/<int:pk>/",
        api_allocations.AllocationDetail.as_view(),
        name="api-allocation",
    ),
    path(
        "allocations/requests/",
        api_allocations.AllocationRequestList.as_view(),
        name="api-allocation-requests",
    ),
    path(
        "allocations/requests/<int:pk>/approve/",
        api_allocations.AllocationRequestDecide.as_view(approve=True),
        name="api-allocation-request-approve",
    ),
    path(
        "allocations/requests/<int:pk>/reject/",
        api_allocations.AllocationRequestDecide.as_view(approve=False),
        name="api-allocation-request-reject",
    ),
]
