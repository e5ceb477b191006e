from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.staticfiles.storage import staticfiles_storage
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from config.metrics import scrape
from portal import api, sso, views
from portal import twofactor_views as two_factor
from portal.auth import TokenCurrent, TokenObtain

# A database outage is a 503 with Retry-After, on pages too (config/outage.py).
handler500 = "config.outage.server_error"
# An API path that names nothing answers JSON, in the API's error shape.
handler404 = "config.outage.not_found"


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever a page links (a JSON answer, a file): the
    portal's icon, where its static files are."""
    return HttpResponsePermanentRedirect(staticfiles_storage.url("favicon.svg"))


urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    # Prometheus scrapes here; loopback, SWITCHYARD_METRICS_ALLOW or a token (docs/operations.md).
    path("metrics", scrape.metrics, name="metrics"),
    path("login/", sso.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Two-factor: the login's code step and the account's page (docs/security.md).
    path("login/code/", two_factor.two_factor_code, name="two-factor-code"),
    path("account/two-factor/", two_factor.two_factor, name="two-factor"),
    # OpenID Connect single sign-on, when configured (the library reverses these names).
    path("oidc/authenticate/", sso.sign_in, name="oidc_authentication_init"),
    path("oidc/callback/", sso.callback, name="oidc_authentication_callback"),
    path("api/v1/", include("scheduling.urls_api")),
    path("api/v1/", include("accounting.urls_api")),
    path("api/v1/auth/token/", TokenObtain.as_view(), name="api-token"),
    path("api/v1/auth/token/current/", TokenCurrent.as_view(), name="api-token-current"),
    path("api/v1/audit/", api.AuditList.as_view(), name="api-audit"),
    path("api/v1/projects/<slug:slug>/members/", api.ProjectMembers.as_view(), name="api-members"),
    path(
        "api/v1/projects/<slug:slug>/members/<str:username>/",
        api.ProjectMember.as_view(),
        name="api-member",
    ),
    path("api/v1/config/versions/", api.ConfigVersionList.as_view(), name="api-config-versions"),
    path(
        "api/v1/config/versions/<int:pk>/rollback/",
        api.ConfigRollback.as_view(),
        name="api-config-rollback",
    ),
    path(
        "api/v1/config/versions/<int:pk>/undo/",
        api.ConfigUndo.as_view(),
        name="api-config-undo",
    ),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file of its own: the page
    # runs under the Content-Security-Policy, which allows no inline script.
    path(
        "api/v1/docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="api-schema", template_name="portal/api_docs.html"
        ),
        name="api-docs",
    ),
    path("audit/", views.audit_log, name="audit"),
    path("config/", views.config_history, name="config-history"),
    path("config/<int:pk>/", views.config_version, name="config-version"),
    path("config/<int:pk>/rollback/", views.config_rollback, name="config-rollback"),
    path("config/<int:pk>/undo/", views.config_undo, name="config-undo"),
    path("home/", views.home, name="home"),
    path("projects/", views.project_list, name="project-list"),
    path("projects/<slug:slug>/", views.project_detail, name="project-detail"),
    path("projects/<slug:slug>/members/", views.project_members, name="project-members"),
    path("", include("accounting.urls")),
    path("", include("scheduling.urls")),
    path("", include("simulation.urls")),
]
