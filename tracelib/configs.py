"""Frozen dataclass configs changed by dotted field names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any


def resized(cfg: Any, changes: Mapping[str, Any]) -> Any:
    """`cfg` (a frozen dataclass) with `changes` applied; a dotted name ("train.updates")
    changes a field of a nested config."""
    nested: dict[str, dict[str, Any]] = {}
    flat = {}
    for name, value in changes.items():
        head, _, rest = name.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            flat[head] = value
    for head, inner in nested.items():
        flat[head] = resized(getattr(cfg, head), inner)
    return replace(cfg, **flat)
