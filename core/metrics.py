"""What every app's Prometheus families share: the metric classes, made with no `_created`
series (one more line per series that no dashboard here reads), and the HTTP families'
middleware labelled by route."""

from django_prometheus.middleware import PrometheusAfterMiddleware
from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

disable_created_metrics()

__all__ = ["Counter", "Gauge", "Histogram", "RouteMetricsMiddleware"]


class RouteMetricsMiddleware(PrometheusAfterMiddleware):
    """django-prometheus' HTTP families labelled by route template (`/jobs/<job_id>`)
    instead of view name: every Ninja route of the project is named by its function, which
    says less than its path, and an unmatched path stays `<unnamed view>`, so no label grows
    with the ids clients send."""

    def _get_view_name(self, request):
        match = getattr(request, "resolver_match", None)
        if match is None or match.route is None:
            return "<unnamed view>"
        return "/" + match.route
