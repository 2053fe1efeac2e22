"""Interference samples: Harmony-style collection, its contract and its warehouse table."""

from __future__ import annotations

import itertools
import time

import numpy as np
import polars as pl
import pytest

from tracelib.catalogue import by_name
from tracelib.contracts import InterferenceSamples
from tracelib.interference import (
    InterferenceConfig,
    collect_samples,
    interference_frame,
    pair_fits,
    placement_counts,
    sample_sets,
    store_samples,
)
from tracelib.sim import ClusterConfig, SpeedConfig
from warehouse import ContractViolation, connect
from warehouse.io import validate

SMALL = InterferenceConfig(n_samples=600, seed=3)
EXACT = InterferenceConfig(
    n_samples=1500, seed=1, speed=SpeedConfig(speed_variation=0.0, slot_noise=0.0)
)


@pytest.fixture(scope="module")
def small() -> pl.DataFrame:
    return collect_samples(SMALL)


@pytest.fixture(scope="module")
def exact() -> pl.DataFrame:
    return collect_samples(EXACT)


def test_same_config_same_frame_bit_for_bit(small):
    again = collect_samples(SMALL)
    assert again.equals(small)
    assert (
        again["measured_speed"].to_numpy().tobytes() == small["measured_speed"].to_numpy().tobytes()
    )
    other = collect_samples(InterferenceConfig(n_samples=600, seed=4))
    assert not other.equals(small)


def test_sets_are_saturated_and_never_over_capacity():
    cfg = InterferenceConfig(n_samples=2000, seed=7, cluster=ClusterConfig(n_servers=4))
    c = cfg.cluster
    capacity = np.array([c.gpus, c.cpus, c.mem_gb])
    types = {jt.type_index: jt for jt in by_name().values()}
    n_sets = 0
    for ss in sample_sets(cfg):
        n_sets += 1
        used = np.zeros((c.n_servers, 3))
        for t, w, p, pl_ in zip(ss.types, ss.workers, ss.ps, ss.placements, strict=True):
            assert (len(pl_.workers), len(pl_.ps)) == (w, p)
            assert 1 <= w <= 3 and 1 <= p <= 3
            for s in pl_.workers:
                used[s] += types[t].worker_demand
            for s in pl_.ps:
                used[s] += types[t].ps_demand
        assert (used <= capacity + 1e-9).all(), "over capacity"
        np.testing.assert_allclose(capacity - used, np.array(ss.free))
        # Saturated: what ended the set fits nowhere in what is left.
        if len(ss.blocked) == 1:
            (d,) = ss.blocked
            assert not any((np.array(f) + 1e-9 >= d).all() for f in ss.free)
        else:
            assert len(ss.blocked) == 2 and not pair_fits(ss.free, *ss.blocked)
    assert n_sets > 50


def test_packed_jobs_are_slower_and_slowdown_grows_with_load(exact):
    alone = exact.filter(pl.col("colocated_tasks") == 0)
    packed = exact.filter(pl.col("colocated_tasks") > 0)
    assert packed.height > 0.9 * exact.height
    # Without noise a job alone has exactly its isolated speed; every co-located job is slower.
    np.testing.assert_allclose(alone["slowdown"].to_numpy(), 0.0, atol=1e-12)
    assert (packed["measured_speed"] < packed["isolated_speed"]).all()
    bins = np.digitize(packed["colocated_tasks"].to_numpy(), [3, 5, 7, 10])  # 1-2, 3-4, ...
    slowdown = packed["slowdown"].to_numpy()
    means = [slowdown[bins == b].mean() for b in range(5)]
    assert all(a < b for a, b in itertools.pairwise(means)), means
    # Harmony's magnitude: tens of percent when the cluster is packed.
    assert 0.2 < packed["slowdown"].mean() < 0.7


def test_columns_describe_the_placement(small):
    w, p = placement_counts(small)
    assert (w.sum(axis=1) == small["workers"].to_numpy()).all()
    assert (p.sum(axis=1) == small["ps"].to_numpy()).all()
    assert (((w + p) > 0).sum(axis=1) == small["servers_used"].to_numpy()).all()
    # Co-located tasks of a job = tasks of the other jobs of its set on its servers.
    row = small.filter(pl.col("sample_set") == 0).sort("job_in_set")
    wr, pr = placement_counts(row)
    tasks = wr + pr
    for i in range(row.height):
        others = tasks.sum(axis=0) - tasks[i]
        assert row["colocated_tasks"][i] == int(others[tasks[i] > 0].sum())
    assert set(small["model"]) <= set(by_name())
    assert small.select(pl.struct("sample_set", "job_in_set").is_unique().all()).item()


def test_default_config_yields_harmonys_sample_count():
    start = time.perf_counter()
    frame = interference_frame()
    elapsed = time.perf_counter() - start
    assert frame.height >= 13_000
    assert frame["sample_set"].n_unique() > 1000
    assert elapsed < 10.0, f"default collection took {elapsed:.1f} s"


@pytest.mark.parametrize(
    ("column", "value", "check"),
    [
        ("workers", 0, "greater_than_or_equal_to"),
        ("slowdown", 0.5, "slowdown_matches_speeds"),
        ("worker_servers", "[1,0]", "placement_matches_counts"),
        ("measured_speed", -1.0, "greater_than"),
    ],
)
def test_contract_catches_violations(small, column, value, check):
    validate(small, InterferenceSamples)  # the collected frame passes
    bad = small.with_columns(
        pl.when(pl.int_range(pl.len()) == 2)
        .then(pl.lit(value))
        .otherwise(pl.col(column))
        .cast(small.schema[column])
        .alias(column)
    )
    with pytest.raises(ContractViolation, match=check) as err:
        validate(bad, InterferenceSamples)
    assert "interference_samples" in str(err.value)


def test_duplicate_keys_are_rejected(small):
    with pytest.raises(ContractViolation, match="interference_samples"):
        validate(pl.concat([small, small.head(1)]), InterferenceSamples)


def test_store_is_idempotent_per_source_and_seed(tmp_path, small):
    other = collect_samples(InterferenceConfig(n_samples=200, seed=9))
    query = "SELECT * FROM interference_samples ORDER BY seed, sample_set, job_in_set"
    with connect(tmp_path / "wh.duckdb") as con:
        assert store_samples(con, small) == small.height
        store_samples(con, other)
        first = con.sql(query).pl()
        store_samples(con, small)
        second = con.sql(query).pl()
        assert first.equals(second)
        assert first.height == small.height + other.height
        # Re-collecting a seed with fewer samples replaces that seed's rows only.
        fewer = collect_samples(InterferenceConfig(n_samples=100, seed=3))
        store_samples(con, fewer)
        counts = dict(
            con.sql("SELECT seed, count(*) FROM interference_samples GROUP BY seed").fetchall()
        )
        assert counts == {3: fewer.height, 9: other.height}


def test_store_writes_nothing_when_the_contract_fails(tmp_path, small):
    bad = small.with_columns(pl.lit(0).cast(pl.Int32).alias("workers"))
    with connect(tmp_path / "wh.duckdb") as con:
        store_samples(con, small)
        with pytest.raises(ContractViolation, match="workers"):
            store_samples(con, bad)
        [(count,)] = con.sql("SELECT count(*) FROM interference_samples").fetchall()
        assert count == small.height


def test_config_rejects_nonsense():
    with pytest.raises(ValueError, match="catalogue"):
        InterferenceConfig(models=("alexnet",))
    with pytest.raises(ValueError, match="workers"):
        InterferenceConfig(workers=(0, 3))
