"""A checkpoint lost or refused under policies/ never breaks a later run:
it is marked in `checkpoint_problems` (shown by `policy_lineage`), and training falls back
to the newest usable ancestor, or from scratch, saying so."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from models.chic.config import ChicEvalConfig
from pipelines.cli import _resume_notes
from pipelines.systems.chic.stages import evaluate_chic_stage, train_chic_stage
from pipelines.systems.rltaps.stages import (
    evaluate_rltaps_stage,
    train_rltaps_stage,
)
from tests.test_chic_pipeline import TINY as CHIC
from tests.test_rltaps_pipeline import CFG as RLTAPS
from warehouse import connect, read_frame


def _problems(path) -> dict[str, str]:
    with connect(path) as con:
        rows = read_frame(con, "SELECT policy_id, problem FROM checkpoint_problems")
    return dict(rows.iter_rows())


def _lineage(path, policy_id) -> dict:
    with connect(path) as con:
        rows = read_frame(con, "SELECT * FROM policy_lineage WHERE policy_id = ?", [policy_id])
    return rows.row(0, named=True)


def _two_generations(train, path, cfg):
    """Trains with `cfg`, then again with another seed: the second continues from the first."""
    first = train(path, cfg)
    second = train(path, replace(cfg, seed=1))
    assert second.parent_policy_id == first.policy_id
    return first, second


def test_training_falls_back_to_the_newest_usable_ancestor_then_to_scratch(tmp_path):
    path = tmp_path / "wh.duckdb"
    first, second = _two_generations(train_rltaps_stage, path, RLTAPS)

    # The newest checkpoint is deleted: the next training continues from its parent.
    Path(second.checkpoint).unlink()
    third = train_rltaps_stage(path, replace(RLTAPS, seed=2))
    assert third.parent_policy_id == first.policy_id
    note = third.metrics["resume_note"]
    assert f"resumed from ancestor {first.policy_id}" in note
    assert second.policy_id in note and "missing" in note
    assert _problems(path) == {second.policy_id: "missing"}
    assert "missing: checkpoint" in _lineage(path, second.policy_id)["checkpoint_problem"]
    assert _lineage(path, first.policy_id)["checkpoint_problem"] is None
    with connect(path) as con:
        stored = read_frame(
            con, "SELECT metrics FROM policies WHERE policy_id = ?", [third.policy_id]
        ).item()
    assert json.loads(stored)["resume_note"] == note  # the registry says so too
    assert list(_resume_notes({"rltaps": {"train": {"m": {"metrics": third.metrics}}}})) == [note]

    # Every remaining ancestor refused (bytes changed) or lost: from scratch.
    Path(third.checkpoint).write_bytes(b"not a checkpoint")
    Path(first.checkpoint).unlink()
    fourth = train_rltaps_stage(path, replace(RLTAPS, seed=3))
    assert fourth.parent_policy_id is None
    assert "trained from scratch" in fourth.metrics["resume_note"]
    assert _problems(path) == {
        second.policy_id: "missing",
        third.policy_id: "refused",
        first.policy_id: "missing",
    }
    # And the next run is clean again: it continues from the new policy, nothing to say.
    fifth = train_rltaps_stage(path, replace(RLTAPS, seed=4))
    assert fifth.parent_policy_id == fourth.policy_id and "resume_note" not in fifth.metrics


def test_unchanged_inputs_with_a_lost_checkpoint_train_again(tmp_path):
    path = tmp_path / "wh.duckdb"
    first = train_rltaps_stage(path, RLTAPS)
    assert train_rltaps_stage(path, RLTAPS).metrics.get("cached")
    Path(first.checkpoint).write_bytes(Path(first.checkpoint).read_bytes() + b"tampered")
    again = train_rltaps_stage(path, RLTAPS)
    assert not again.metrics.get("cached")
    # The same inputs and seed give the same weights: the file is restored, same id, and
    # the mark is lifted.
    assert again.policy_id == first.policy_id
    assert _problems(path) == {}
    assert evaluate_rltaps_stage(path, RLTAPS).policy_ids == {
        "rl-taps-nonstreaming": first.policy_id
    }


def test_evaluation_skips_to_a_usable_policy(tmp_path):
    path = tmp_path / "wh.duckdb"
    first, second = _two_generations(train_chic_stage, path, CHIC)
    Path(second.checkpoint).unlink()
    evaluate_chic_stage(path, ChicEvalConfig(rates=(1.8,), test_sequences=2, jobs_per_sequence=6))
    with connect(path) as con:
        used = read_frame(
            con, "SELECT DISTINCT policy_id FROM chic_evaluation WHERE system = 'chic'"
        )["policy_id"].to_list()
    assert used == [first.policy_id]
    assert _problems(path) == {second.policy_id: "missing"}


def _policy_paths(path) -> dict[str, str]:
    with connect(path) as con:
        rows = read_frame(con, "SELECT policy_id, checkpoint_path FROM policies")
    return dict(rows.iter_rows())


def test_a_moved_or_copied_warehouse_uses_its_own_policies_folder(tmp_path):
    import shutil

    origin = tmp_path / "a" / "wh.duckdb"
    first = train_rltaps_stage(origin, RLTAPS)
    # Recorded relative to the warehouse's folder, so the pair moves together.
    assert _policy_paths(origin) == {first.policy_id: f"policies/{Path(first.checkpoint).name}"}

    copy = tmp_path / "b" / "wh.duckdb"
    shutil.copytree(origin.parent, copy.parent)
    # The original's file is altered: the copy must not be reading it.
    Path(first.checkpoint).write_bytes(b"not a checkpoint")
    again = train_rltaps_stage(copy, RLTAPS)
    assert again.policy_id == first.policy_id and again.metrics.get("cached") is True
    assert Path(again.checkpoint).parent == copy.parent / "policies"
    assert _problems(copy) == {}
    assert again.policy_id in evaluate_rltaps_stage(copy, RLTAPS).policy_ids.values()


def test_a_lost_checkpoint_is_trained_again_once(tmp_path):
    """A warehouse whose row names its checkpoint by an absolute path at a place that is
    gone (recorded by older code, then the warehouse moved without its files): the next
    run trains it again into the warehouse's own policies/, and every run after finds it
    there instead of training again."""
    import shutil

    from models.checkpoints import register_policy

    origin = tmp_path / "a" / "wh.duckdb"
    first = train_rltaps_stage(origin, RLTAPS)
    with connect(origin) as con:
        row = read_frame(con, "SELECT * FROM policies").row(0, named=True)
    moved = tmp_path / "b" / "wh.duckdb"
    with connect(moved) as con:
        register_policy(
            con,
            system=row["system"],
            config=json.loads(row["config"]),
            checkpoint_path=first.checkpoint,  # outside b/: recorded absolute
            sha256=row["sha256"],
            training_workloads=json.loads(row["training_workloads"]),
            metrics=json.loads(row["metrics"]),
        )
    assert _policy_paths(moved) == {first.policy_id: str(Path(first.checkpoint).resolve())}
    shutil.rmtree(origin.parent)

    repaired = train_rltaps_stage(moved, RLTAPS)
    assert repaired.metrics.get("cached") is not True  # lost: trained again
    assert repaired.policy_id == first.policy_id  # the same inputs give the same bytes
    assert Path(repaired.checkpoint).parent == moved.parent / "policies"
    for _ in range(2):
        again = train_rltaps_stage(moved, RLTAPS)
        assert again.policy_id == first.policy_id and again.metrics["cached"] is True
    assert _problems(moved) == {}  # the file is whole again


def test_the_inputs_first_usable_policy_is_found_past_a_lost_one(tmp_path):
    """Two policies trained on the same inputs, the older one's file lost: a run takes the
    newer one instead of training a third time."""
    path = tmp_path / "wh.duckdb"
    first = train_rltaps_stage(path, RLTAPS)
    Path(first.checkpoint).unlink()
    with connect(path) as con:
        # The retraining resumed elsewhere and made other bytes: a second policy with the
        # same input key (forged here from the first's row with another checkpoint).
        from models.checkpoints import register_policy

        row = read_frame(con, "SELECT * FROM policies").row(0, named=True)
        other = path.parent / "policies" / "rltaps-other.pt"
        other.write_bytes(b"other bytes")
        from models.checkpoints import file_sha256

        second = register_policy(
            con,
            system=row["system"],
            config=json.loads(row["config"]),
            checkpoint_path=other,
            sha256=file_sha256(other),
            training_workloads=json.loads(row["training_workloads"]),
            metrics=json.loads(row["metrics"]),
        )
    from pipelines.trained import already_trained

    key = json.loads(row["metrics"])["input_key"]
    with connect(path) as con:
        found = already_trained(con, key, row["system"])
    assert found is not None and found.policy_id == second
    assert _problems(path) == {first.policy_id: "missing"}
