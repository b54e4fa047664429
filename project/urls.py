from django.contrib import admin
from django.urls import path

from project.views import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    # Prometheus metrics (with the [prometheus] extra), for a bearer token (METRICS_TOKEN) or a staff user.
    path("metrics/", metrics),
]
