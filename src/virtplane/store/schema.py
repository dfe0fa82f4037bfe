"""Table definitions (SQLAlchemy Core). Changes to them go through an Alembic migration."""

from __future__ import annotations

from sqlalchemy import Column, DateTime, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

# Every resource kind lives in one table: the body is the resource as JSON, and the
# columns beside it are what the store itself must query or check atomically.
objects = Table(
    "objects",
    metadata,
    Column("kind", String(64), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("uid", String(36), nullable=False),
    Column("resource_version", Integer, nullable=False),
    Column("generation", Integer, nullable=False),
    Column("body", Text, nullable=False),
)

# The change feed: one row per write, its id is the store-wide revision that becomes
# the object's resource_version. Watchers read rows after the last revision they saw.
changes = Table(
    "changes",
    metadata,
    Column("revision", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(64), nullable=False),
    Column("name", String(255), nullable=False),
    Column("op", String(16), nullable=False),
)

# Append-only audit trail.
events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("time", DateTime(timezone=True), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("name", String(255), nullable=False),
    Column("type", String(16), nullable=False),
    Column("reason", String(128), nullable=False),
    Column("message", Text, nullable=False),
)
Index("ix_events_object", events.c.kind, events.c.name, events.c.id)

tokens = Table(
    "tokens",
    metadata,
    Column("token_sha256", String(64), primary_key=True),
    Column("name", String(255), nullable=False, unique=True),
    Column("role", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# Leader election for controllers when several replicas share a PostgreSQL store.
leases = Table(
    "leases",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

# Values an object holds alone (an address on a network, a MAC): the primary key makes
# two holders impossible, also between replicas; written in the holder's own transaction.
claims = Table(
    "claims",
    metadata,
    Column("scope", String(128), primary_key=True),
    Column("value", String(255), primary_key=True),
    Column("owner_kind", String(64), nullable=False),
    Column("owner_name", String(255), nullable=False),
    Column("owner_uid", String(36), nullable=False),
)
Index("ix_claims_owner", claims.c.owner_uid)
