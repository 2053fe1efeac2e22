"""Code version and stable hashing, stamped on every row a stage writes."""

from __future__ import annotations

import hashlib
import json
import os
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


CODE_VERSION_ENV = "SCHEDLAB_CODE_VERSION"
"""A code version pinned for this process and the processes it starts (`pin_code_version`)."""


@cache
def code_version() -> str:
    """Package version plus the git commit of the checkout (and '-dirty' if modified), or
    the version pinned in `$SCHEDLAB_CODE_VERSION` by the process that started this one."""
    pinned = os.environ.get(CODE_VERSION_ENV)
    if pinned:
        return pinned
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


def pin_code_version() -> str:
    """This process's code version, marked in its environment so that every process it
    starts afterwards (a run's task-runner workers, a local Ray) stamps the same one.

    Each process would otherwise ask git on its own: a checkout edited while a run goes on
    (or a `git status` slower than its timeout on a loaded machine) would give the run's
    later workers another version than its first stages, and with it other checkpoint bytes
    and other policy ids for the same weights. Returns the version."""
    version = code_version()
    os.environ[CODE_VERSION_ENV] = version
    return version


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal strings (and hashes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def sha256_hex(*chunks: bytes) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()
