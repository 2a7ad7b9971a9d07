from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/", include("experiments.api.urls")),
    path("", include("experiments.urls")),
]

handler400 = "specdash.views.bad_request"
handler403 = "specdash.views.permission_denied"
handler404 = "specdash.views.page_not_found"
handler500 = "specdash.views.server_error"
