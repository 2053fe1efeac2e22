"""Code version and stable hashing, stamped on every row a stage writes."""

from __future__ import annotations

import hashlib
import json
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any


def _git(root: Path, *args: str) -> str:
    """The stripped output of `git -C root args...` (raises on failure or after 5 s)."""
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=5
    ).stdout.strip()


@cache
def code_version() -> str:
    """Package version plus the git commit of the checkout (and '-dirty' if modified)."""
    try:
        version = metadata.version("schedlab")
    except metadata.PackageNotFoundError:
        version = "0+unknown"
    root = Path(__file__).resolve().parent.parent
    try:
        sha = _git(root, "rev-parse", "--short=12", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
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
