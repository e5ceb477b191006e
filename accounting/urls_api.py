from django.urls import path

from accounting import api

urlpatterns = [
    path("usage/", api.UsageReport.as_view(), name="api-usage"),
    path("usage/samples/", api.SampleIngest.as_view(), name="api-usage-samples"),
    path("usage/reconciliations/", api.ReconciliationList.as_view(), name="api-reconciliations"),
    path("tasks/<int:pk>/usage/", api.TaskUsage.as_view(), name="api-task-usage"),
]
