"""Locust load tests for Switchyard (see the README)."""
