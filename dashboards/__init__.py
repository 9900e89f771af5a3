"""Grafana dashboards as code, and their provisioning."""
