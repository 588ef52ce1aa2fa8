"""What every app's Prometheus families share: no `_created` series, which no dashboard reads."""

from django_prometheus.middleware import PrometheusAfterMiddleware
from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

disable_created_metrics()

__all__ = ["Counter", "Gauge", "Histogram", "RouteMetricsMiddleware"]


class RouteMetricsMiddleware(PrometheusAfterMiddleware):
    """HTTP families labelled by route template, so no label grows with client ids."""

    def _get_view_name(self, request):
        match = getattr(request, "resolver_match", None)
        if match is None or match.route is None:
            return "<unnamed view>"
        return "/" + match.route
