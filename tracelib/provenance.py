"""Code version and stable hashing, stamped on every row a stage writes."""

from __future__ import annotations

import hashlib
import json
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any


@cache
def code_version() -> str:
    """Package version plus the git commit of the checkout (and '-dirty' if modified)."""
    try:
        version = metadata.version("schedlab")
    except metadata.PackageNotFoundError:
        version = "0+unknown"
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=5,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return version
    return f"{version}+g{sha}{'-dirty' if dirty else ''}"


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal strings (and hashes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def sha256_hex(*chunks: bytes) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()
