"""Prefect retry options of every stage task: only warehouse I/O is retried (a busy
warehouse file is worth another try, bad input is not)."""

from __future__ import annotations

from typing import Any

from warehouse import WarehouseBusy


def _retry_on_io(task, task_run, state) -> bool:
    try:
        state.result()
    except (WarehouseBusy, OSError):
        return True
    except Exception:
        return False
    return False


IO_RETRIES: dict[str, Any] = {
    "retries": 3,
    "retry_delay_seconds": 5,
    "retry_condition_fn": _retry_on_io,
}
