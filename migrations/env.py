"""Alembic environment: runs on the engine the store hands over (or the configured URL)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

config = context.config
engine = config.attributes.get("engine") or create_engine(config.get_main_option("sqlalchemy.url"))

with engine.connect() as connection:
    context.configure(connection=connection, render_as_batch=engine.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
