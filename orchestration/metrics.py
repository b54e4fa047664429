"""``orchestration.metrics.metrics_view``: the Prometheus page at the path a
project's ``urls.py`` names, which the contract keeps; the page itself is made
with the rest of what the engine tells operators, in ``observability``."""

from .observability.metrics import metrics_view

__all__ = ["metrics_view"]
