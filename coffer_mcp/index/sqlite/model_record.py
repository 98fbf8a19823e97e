"""The store's embedding model as the index records it, and whole models' vector tables.

``store_model`` has one row: a copy of ``embedding.yaml`` (``store.embedding``), the file being the
truth. ``record`` keeps the first model recorded unless told to replace it, so of two processes
recording their model at once, one wins and both read it back.
"""

from __future__ import annotations

import json

from coffer_mcp.index.sqlite.db import Connection
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
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    conn.execute(
        f"{verb} INTO store_model (one, identity, dimensions, details) VALUES (1, ?, ?, ?)",
        (model.identity, model.dimensions, details),
    )
    found = recorded(conn)
    assert found is not None  # written, or there already
    return found


def vector_models(conn: Connection) -> dict[str, int]:
    """``{identity: dimensions}`` of every model that has a vector table."""
    return {row[0]: row[1] for row in conn.execute("SELECT identity, dimensions FROM embedding_models ORDER BY id")}


def drop_model(conn: Connection, identity: str) -> None:
    """Remove a model's vector table, its registration and its ANN graphs' rows (their files are
    collected later); documents that still named it are due for embedding again."""
    row = conn.execute("SELECT id FROM embedding_models WHERE identity = ?", (identity,)).fetchone()
    if row is None:
        return
    model_id = int(row[0])
    conn.execute(f"DROP TABLE IF EXISTS vec_chunks_{model_id}")
    conn.execute("DELETE FROM embedding_models WHERE id = ?", (model_id,))
    conn.execute("DELETE FROM ann_files WHERE model_id = ?", (model_id,))
    conn.execute("DELETE FROM ann_changes WHERE model_id = ?", (model_id,))
    conn.execute(
        "UPDATE documents SET embedding_model = NULL, embed_pending = 1 WHERE embedding_model = ?", (identity,)
    )
