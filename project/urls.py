from django.contrib import admin
from django.urls import path

from orchestration.health import health_view
from project.views import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    # Prometheus metrics (with the [prometheus] extra), for a bearer token (METRICS_TOKEN) or a staff user.
    path("metrics/", metrics),
    # The database and migrations checks, for a load balancer or a probe: it says only which passed.
    path("health/", health_view),
]
