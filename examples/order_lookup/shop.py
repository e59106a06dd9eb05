"""The shop's order database: a small sqlite file shared by every user's orders."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

ORDERS = [
    # order_id, user_id, product, status, ship_to, placed_at
    (1017, "u_alice", "kettle", "delivered", "12 Oak Lane, Leeds", "2026-10-02"),
    (1042, "u_bob", "kettle", "shipped", "9 Elm Street, York", "2026-11-18"),
    (1043, "u_alice", "mug", "processing", "12 Oak Lane, Leeds", "2026-11-19"),
    (1051, "u_carol", "toaster", "shipped", "3 Mill Road, Hull", "2026-11-20"),
]
PRODUCTS = sorted({order[2] for order in ORDERS})
DATABASE = Path(
    os.environ.get("SHOP_DATABASE", Path(tempfile.gettempdir()) / "agenttape-order-lookup.sqlite")
)


def create(path: Path) -> Path:
    """Writes the database file afresh (the same rows every time)."""
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE orders (order_id INTEGER PRIMARY KEY, user_id TEXT, product TEXT, "
            "status TEXT, ship_to TEXT, placed_at TEXT)"
        )
        db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)", ORDERS)
    return path


def query(path: Path, sql: str, parameters: tuple[object, ...]) -> list[dict[str, object]]:
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute(sql, parameters)]
