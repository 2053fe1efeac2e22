"""Which heavy packages a piece of code loads, asked of a fresh interpreter (the test run's own
has loaded everything by then)."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = (
    "import json, sys; "
    "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:]))))"
)


def packages_loaded_by(statements: str, *packages: str) -> list[str]:
    """Runs `statements` in a new Python process and returns, sorted, those of `packages`
    (top-level names) it has loaded by the end; a failing statement fails the caller."""
    code = f"{statements}\n{_PROBE}"
    out = subprocess.run(
        [sys.executable, "-c", code, *packages], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
