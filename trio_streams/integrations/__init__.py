"""Integrations with other systems: Prometheus, OpenTelemetry, AsyncAPI."""
