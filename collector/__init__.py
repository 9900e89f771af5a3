"""Receives OTLP metrics and keeps them as time series (SQLite by default, PostgreSQL at scale)."""
