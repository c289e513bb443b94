"""Observability: a finished call as OpenTelemetry spans, and where they go."""
