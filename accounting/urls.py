from django.urls import path

from accounting import views, views_allocations, views_dashboard

urlpatterns = [
    path("dashboard/", views_dashboard.dashboard, name="dashboard"),
    path("dashboard/settings/", views_dashboard.dashboard_settings, name="dashboard-settings"),
    path("dashboard/site/", views_dashboard.site_dashboard, name="site-dashboard"),
    path("usage/", views.usage, name="usage"),
    path("usage/tasks/<int:pk>/", views.task_usage, name="task-usage"),
    path("usage/reconciliation/", views.reconciliations, name="usage-reconciliations"),
    path("usage/reconciliation/run/", views.reconcile_now, name="usage-reconcile-now"),
    path("usage/rates/", views.rates, name="usage-rates"),
    path(
        "projects/<slug:slug>/allocations/request/",
        views_allocations.allocation_request,
        name="allocation-request",
    ),
    path(
        "allocations/requests/", views_allocations.allocation_requests, name="allocation-requests"
    ),
    path(
        "allocations/requests/<int:pk>/<str:verdict>/",
        views_allocations.allocation_request_decide,
        name="allocation-request-decide",
    ),
]
