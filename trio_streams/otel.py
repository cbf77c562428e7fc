"""OpenTelemetry tracing for an app: ``TracingMiddleware``.

The public face of :mod:`trio_streams.integrations.otel`, where the integration lives with the
others; applications import it from here. Needs the ``otel`` extra.
"""

from .integrations.otel import TracingMiddleware

__all__ = ["TracingMiddleware"]
