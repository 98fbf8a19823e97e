"""The store's embedding model as the index records it, and whole models' vector tables.

As on SQLite (``index.sqlite.model_record``): ``store_model`` has one row, a copy of
``embedding.yaml``; ``record`` keeps the first model recorded unless told to replace it, so of
two servers recording their model at once, one wins and both read it back.
"""

from __future__ import annotations

import json

from coffer_mcp.index.postgres.connection import Connection
from coffer_mcp.store import StoreModel

__all__ = ["drop_model", "record", "recorded", "vector_models"]

_DETAILS = ("provider", "model", "model_path", "base_url", "api_key_env", "recorded_at")


def recorded(conn: Connection) -> StoreModel | None:
    """The model the index records, or None."""
    row = conn.execute("SELECT identity, dimensions, details FROM store_model").fetchone()
    if row is None:
        return None
    details = json.loads(row["details"] or "{}")
    return StoreModel.from_mapping({**details, "identity": row["identity"], "dimensions": row["dimensions"]})


def record(conn: Connection, model: StoreModel, *, replace: bool) -> StoreModel:
    """Record ``model`` unless a model is recorded (``replace``: in its place); the one recorded now."""
    details = json.dumps({key: getattr(model, key) for key in _DETAILS if getattr(model, key)})
    conflict = (
        "DO UPDATE SET identity = excluded.identity, dimensions = excluded.dimensions, details = excluded.details"
        if replace
        else "DO NOTHING"
    )
    conn.execute(
        f"INSERT INTO store_model (identity, dimensions, details) VALUES (%s, %s, %s) ON CONFLICT (one) {conflict}",
        (model.identity, model.dimensions, details),
    )
    found = recorded(conn)
    assert found is not None  # written, or there already
    return found


def vector_models(conn: Connection) -> dict[str, int]:
    """``{identity: dimensions}`` of every model that has a vector table."""
    rows = conn.execute("SELECT identity, dimensions FROM embedding_models ORDER BY id")
    return {row["identity"]: int(row["dimensions"]) for row in rows}


def drop_model(conn: Connection, identity: str) -> str | None:
    """Remove a model's vector table and its registration; documents that still named it are due for
    embedding again. The table dropped, or None when the model had none."""
    row = conn.execute("SELECT id FROM embedding_models WHERE identity = %s", (identity,)).fetchone()
    if row is None:
        return None
    table = f"vec_chunks_{int(row['id'])}"
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute("DELETE FROM embedding_models WHERE id = %s", (row["id"],))
    conn.execute(
        "UPDATE documents SET embedding_model = NULL, embed_pending = true WHERE embedding_model = %s", (identity,)
    )
    return table
