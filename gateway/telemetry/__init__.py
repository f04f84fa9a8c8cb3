"""Telemetry: Prometheus metrics, OpenTelemetry traces (GenAI semantic conventions) and the access log."""
