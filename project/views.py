"""The example project's own views."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.crypto import constant_time_compare

from orchestration.metrics import metrics_view


def metrics(request: HttpRequest) -> HttpResponse:
    """``metrics_view`` for a Prometheus that sends ``Authorization: Bearer <METRICS_TOKEN>``,
    or for a signed-in staff user; anyone else is refused (queue names, workflow
    types and worker ids are not for the public)."""
    token = settings.METRICS_TOKEN
    sent = request.headers.get("Authorization", "")
    if token and constant_time_compare(sent, f"Bearer {token}"):
        return metrics_view(request)
    if request.user.is_active and request.user.is_staff:
        return metrics_view(request)
    response = HttpResponse(
        "Metrics need Authorization: Bearer <METRICS_TOKEN>, or a staff user's session.\n",
        status=401,
        content_type="text/plain; charset=utf-8",
    )
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response
