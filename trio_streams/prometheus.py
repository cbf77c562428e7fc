"""Prometheus metrics for an app: ``PrometheusMiddleware``.

The public face of :mod:`trio_streams.integrations.prometheus`, where the integration lives with
the others; applications import it from here. Needs the ``prometheus`` extra.
"""

from .integrations.prometheus import PrometheusMiddleware

__all__ = ["PrometheusMiddleware"]
