from django.urls import path

from simulation import views

urlpatterns = [
    path("simulations/", views.simulation_list, name="simulation-list"),
    path("simulations/compare/", views.simulation_compare, name="simulation-compare"),
    path("simulations/<int:pk>/", views.simulation_detail, name="simulation-detail"),
    path("simulations/<int:pk>/progress/", views.simulation_progress, name="simulation-progress"),
]
