from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from portal.auth import TokenCurrent, TokenObtain

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("scheduling.urls_api")),
    path("api/v1/", include("accounting.urls_api")),
    path("api/v1/auth/token/", TokenObtain.as_view(), name="api-token"),
    path("api/v1/auth/token/current/", TokenCurrent.as_view(), name="api-token-current"),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("accounting.urls")),
    path("", include("scheduling.urls")),
]
