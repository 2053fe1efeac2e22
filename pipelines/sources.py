"""Ingested trace sources: checking that one exists, and deleting one with everything
derived from it (`schedlab delete-source SOURCE_ID`).

What goes with a source, in one transaction (all or nothing):
- its `trace_sources` row, its `jobs` and its `quarantine` records (and, for a shadow
  day, its `shadow_decisions` rows);
- every derivation (workload set) one of whose workloads drew jobs from it, whole (a set
  that lost some of its jobs is no longer what its id and hashes say): `workloads`,
  `workload_jobs`, and the `decision_traces` recorded on those workloads;
- every evaluation that ran on one of those sets or replayed the source (`replay:<source>`):
  its `eval_runs`, `eval_jobs`, `eval_selection_runs` and `eval_summary` rows, and its plots folder.
Policies trained on those workloads stay: they are models, not data, and their rows keep
the ids of the workloads they learned from.

DuckDB marks deleted rows' blocks free but leaves their bytes in the file, so by default
the warehouse is then rewritten into a new file with only its live rows and swapped in
(`warehouse.maintenance.compact`): nothing of the source is left to read in it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tracelib.ingest.base import printable
from warehouse import connect, read_frame, transaction
from warehouse.maintenance import compact


class UnknownSource(ValueError):
    """A source id that is not in the warehouse."""


def source_ids(con) -> list[str]:
    """Every ingested source, oldest first."""
    frame = read_frame(con, "SELECT source_id FROM trace_sources ORDER BY ingested_at, source_id")
    return frame["source_id"].to_list()


def require_source(con, source_id: str) -> None:
    """UnknownSource (naming the ingested ones) unless `source_id` is ingested."""
    known = source_ids(con)
    if source_id not in known:
        # The id is what the user typed: shown escaped and cut, never as raw control codes.
        raise UnknownSource(
            f"unknown trace source {printable(repr(source_id), 80)}; ingested: "
            f"{', '.join(printable(k) for k in known) or 'none'}"
        )


@dataclass(frozen=True)
class SourceDeletion:
    """What deleting a source removes (or removed): rows per table, the derivations and
    evaluations that went with it."""

    source_id: str
    derivations: tuple[str, ...]
    evaluations: tuple[str, ...]
    rows: dict[str, int]
    """Table -> rows deleted."""
    done: bool
    """False for a plan (nothing deleted yet)."""


def _in_list(values: list[str]) -> tuple[str, list[str]]:
    """A `(?, ?, ...)` placeholder list and its parameters (never empty: no value matches
    an empty string id)."""
    values = values or [""]
    return "(" + ", ".join("?" for _ in values) + ")", values


def _plan(con, source_id: str) -> tuple[list[str], list[str], dict[str, tuple[str, list]]]:
    """(derivations, evaluations, table -> (WHERE clause, parameters)) for `source_id`."""
    derivations = read_frame(
        con,
        "SELECT DISTINCT derivation FROM workloads "
        "WHERE list_contains(string_split(source_ids, ','), ?) ORDER BY derivation",
        [source_id],
    )["derivation"].to_list()
    sets, set_params = _in_list(derivations)
    evaluations = read_frame(
        con,
        f"SELECT DISTINCT eval_id FROM eval_runs WHERE workload_set IN {sets} "
        "OR workload_set = ? ORDER BY eval_id",
        [*set_params, f"replay:{source_id}"],
    )["eval_id"].to_list()
    evals, eval_params = _in_list(evaluations)
    in_sets = f"workload_id IN (SELECT workload_id FROM workloads WHERE derivation IN {sets})"
    where = {
        "eval_jobs": (f"eval_id IN {evals}", eval_params),
        "eval_runs": (f"eval_id IN {evals}", eval_params),
        "eval_selection_runs": (f"eval_id IN {evals}", eval_params),
        "eval_summary": (f"eval_id IN {evals}", eval_params),
        "decision_traces": (in_sets, set_params),
        "workload_jobs": (in_sets, set_params),
        "workloads": (f"derivation IN {sets}", set_params),
        "shadow_decisions": ("source_id = ?", [source_id]),
        "quarantine": ("source_id = ?", [source_id]),
        "jobs": ("source_id = ?", [source_id]),
        "trace_sources": ("source_id = ?", [source_id]),
    }
    return derivations, evaluations, where


def delete_source(
    warehouse: str | Path | None,
    source_id: str,
    *,
    dry_run: bool = False,
    evaluations_dir: Path | None = None,
    purge: bool = True,
) -> SourceDeletion:
    """Delete `source_id` and everything derived from it (see the module docstring) in one
    transaction, then the removed evaluations' plot folders under `evaluations_dir`; with
    `dry_run`, only count what would go. With `purge` the warehouse file is then rewritten
    so no byte of the deleted rows is left in it (`compact`). UnknownSource when it is not
    ingested."""
    with connect(warehouse) as con:
        require_source(con, source_id)
        derivations, evaluations, where = _plan(con, source_id)
        # Counted first, in dependency order (rows that point at others go first), so the
        # plan and the deletion report the same numbers.
        rows = {
            table: con.sql(
                f"SELECT count(*) FROM {table} WHERE {clause}", params=params
            ).fetchall()[0][0]
            for table, (clause, params) in where.items()
        }
        if not dry_run:
            with transaction(con):
                for table, (clause, params) in where.items():
                    con.execute(f"DELETE FROM {table} WHERE {clause}", params)
    if not dry_run and purge:
        compact(warehouse)
    if not dry_run and evaluations_dir is not None:
        for eval_id in evaluations:
            shutil.rmtree(evaluations_dir / eval_id, ignore_errors=True)
    return SourceDeletion(source_id, tuple(derivations), tuple(evaluations), rows, done=not dry_run)
