"""Scores GPUs, links and nodes for risk of failure ahead of time, and backtests on fleet traces."""
