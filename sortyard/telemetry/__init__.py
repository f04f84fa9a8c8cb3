"""OpenTelemetry pieces the gateway and the engine server share, so one trace reads the same in both."""
