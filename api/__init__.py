"""The Foreshock service: ingest, queries, risk, alerts and checkpoint/drain decisions."""
