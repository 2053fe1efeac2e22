"""The frozen algorithm configs (`tests/data/*_algorithm_configs.json`): what a learned
system's stage configs handed its trainers at each budget and with each set of options, and
the run config that must hand them the same today."""

from __future__ import annotations

import json

from pipelines.config import run_config
from pipelines.registry import SYSTEMS
from tests.conftest import DATA

BUDGETS = ("smoke", "default", "large")


def frozen_cases(file_name: str, options: dict[str, dict]) -> list[tuple[str, str, dict, dict]]:
    """The cases frozen in `tests/data/<file_name>` as (case name, budget, options, expected
    JSON); `options` maps each case name's suffix ("" or "/...") to the options it sets.
    Asserts the file holds exactly one case for each budget and suffix."""
    frozen = json.loads((DATA / file_name).read_text())
    assert set(frozen) == {f"{b}{suffix}" for b in BUDGETS for suffix in options}
    cases = []
    for name, expected in frozen.items():
        budget, _, suffix = name.partition("/")
        cases.append((name, budget, options["/" + suffix if suffix else ""], expected))
    return cases


def learned_run_config(system: str, prefix: str, options: dict, budget: str = "default"):
    """The stage config `schedlab run` builds for the learned `system` at `budget` with its
    `options` (the flags' destinations without the `<prefix>_`)."""
    dests = {f"{prefix}_{k}": v for k, v in options.items()}
    return run_config(SYSTEMS, budget=budget, systems=[system], options=dests).learned[system]
