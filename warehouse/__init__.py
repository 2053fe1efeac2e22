"""The DuckDB warehouse: every read and write of project tables goes through here."""

from warehouse.db import (
    DEFAULT_PATH,
    ENV_VAR,
    WarehouseBusy,
    WarehouseCorrupt,
    WarehouseUnusable,
    backups_dir,
    classify_error,
    connect,
    files_dir,
    resolve_path,
    transaction,
)
from warehouse.io import (
    ContractViolation,
    column_types,
    empty_frame,
    read_frame,
    replace_rows,
    table_counts,
    write_frame,
)
from warehouse.migrations import MigrationError, applied_migrations, migrate
from warehouse.query import (
    QueryLimitExceeded,
    QueryRefused,
    QueryResult,
    check_user_query,
    run_user_query,
)

__all__ = [
    "DEFAULT_PATH",
    "ENV_VAR",
    "ContractViolation",
    "MigrationError",
    "QueryLimitExceeded",
    "QueryRefused",
    "QueryResult",
    "WarehouseBusy",
    "WarehouseCorrupt",
    "WarehouseUnusable",
    "applied_migrations",
    "backups_dir",
    "check_user_query",
    "classify_error",
    "column_types",
    "connect",
    "empty_frame",
    "files_dir",
    "migrate",
    "read_frame",
    "replace_rows",
    "resolve_path",
    "run_user_query",
    "table_counts",
    "transaction",
    "write_frame",
]
