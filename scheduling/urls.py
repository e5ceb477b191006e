from django.urls import path

from scheduling import views

urlpatterns = [
    path("", views.task_list, name="task-list"),
    path("tasks/new/", views.task_submit, name="task-submit"),
    path("tasks/<int:pk>/", views.task_detail, name="task-detail"),
    path("tasks/<int:pk>/cancel/", views.task_cancel, name="task-cancel"),
    path("workflows/", views.workflow_list, name="workflow-list"),
    path("workflows/<int:pk>/", views.workflow_detail, name="workflow-detail"),
    path("workflows/<int:pk>/cancel/", views.workflow_cancel, name="workflow-cancel"),
]
