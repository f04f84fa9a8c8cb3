"""Locust load tests for Sortyard (see the README)."""
