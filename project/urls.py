from django.contrib import admin
from django.urls import path

from orchestration.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    # Prometheus metrics (with the [prometheus] extra); keep it where only your Prometheus reaches it.
    path("metrics/", metrics_view),
]
