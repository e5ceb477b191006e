from django.urls import path

from accounting import views

urlpatterns = [
    path("usage/", views.usage, name="usage"),
    path("usage/tasks/<int:pk>/", views.task_usage, name="task-usage"),
    path("usage/reconciliation/", views.reconciliations, name="usage-reconciliations"),
    path("usage/reconciliation/run/", views.reconcile_now, name="usage-reconcile-now"),
]
