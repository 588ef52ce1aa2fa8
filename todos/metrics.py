"""The todo service's Prometheus families (docs/metrics.md lists them)."""

from core.metrics import Counter

TODO_REFUSED = Counter(
    "todos_requests_refused_database",
    "Todo requests answered 503 for the database: `busy` (TODO_MAX_CONCURRENT already "
    "waiting) or `unreachable` (no answer in time)",
    ["reason"],
)
