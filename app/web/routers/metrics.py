"""`GET /metrics`: this web process's metrics in Prometheus's text format (app/web/metrics.py
says what each one counts), for a Prometheus server to scrape. 404 unless the `metrics` setting
is on; with a token set, only for its holder (`Authorization: Bearer TOKEN`, which Prometheus's
scrape config sends as `authorization: {credentials: TOKEN}`)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.web.deps import MetricsDep, MetricsReaderOnly
from app.web.metrics import CONTENT_TYPE

__all__ = ["router"]

router = APIRouter(tags=["operations"])


# the metrics first: off, 404 whoever asks; on, the token is checked next
@router.get("/metrics", include_in_schema=False)
def metrics(metrics: MetricsDep, _: MetricsReaderOnly) -> Response:
    return Response(metrics.exposition(), media_type=CONTENT_TYPE,
                    headers={"Cache-Control": "no-store"})
