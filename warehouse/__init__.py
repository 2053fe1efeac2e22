"""The DuckDB warehouse: every read and write of project tables goes through here."""

from warehouse.db import (
    DEFAULT_PATH,
    ENV_VAR,
    WarehouseBusy,
    connect,
    resolve_path,
    transaction,
)
from warehouse.io import ContractViolation, read_frame, replace_rows, table_counts, write_frame
from warehouse.migrations import MigrationError, applied_migrations, migrate

__all__ = [
    "DEFAULT_PATH",
    "ENV_VAR",
    "ContractViolation",
    "MigrationError",
    "WarehouseBusy",
    "applied_migrations",
    "connect",
    "migrate",
    "read_frame",
    "replace_rows",
    "resolve_path",
    "table_counts",
    "transaction",
    "write_frame",
]
