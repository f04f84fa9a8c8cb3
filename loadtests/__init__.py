"""Locust load tests for Switchyard (see LOADTEST_README.md)."""
