"""Logs (structlog, secrets redacted) and Prometheus metrics."""
