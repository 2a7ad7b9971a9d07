from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", admin.site.urls),
    # Pages that name no icon (the admin's) make browsers ask for /favicon.ico.
    path("favicon.ico", RedirectView.as_view(url=lazy(static, str)("favicon.svg"), permanent=True)),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/", include("experiments.api.urls")),
    path("", include("experiments.urls")),
]

handler400 = "specdash.views.bad_request"
handler403 = "specdash.views.permission_denied"
handler404 = "specdash.views.page_not_found"
handler500 = "specdash.views.server_error"
