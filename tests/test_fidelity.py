"""Fidelity checks of the simulator's ground truth (models/fidelity.py) and their table."""

from __future__ import annotations

import math

import duckdb
import pytest

from models.fidelity import FidelityConfig, _large_checks, fidelity_checks
from pipelines.stages import fidelity_stage
from tracelib.sim.calibration import QUIET
from tracelib.sim.config import SpeedConfig


def test_every_measurement_and_published_figure_is_reproduced():
    rows = {r.check_name: r for r in fidelity_checks(FidelityConfig(large=False))}
    assert set(rows) == {
        "speed_at_measured_points",
        "speed_leave_one_out",
        "dl2_fig1_resnet50@1",
        "dl2_fig1_resnet50@2",
        "dl2_fig1_resnet50@4",
        "dl2_fig1_resnet50@8",
        "harmony_packing_slowdown",
        "harmony_resnext_slowdown",
        "gavel_pair_spread",
    }
    failed = [name for name, r in rows.items() if not r.passed]
    assert not failed, failed
    # The interpolation passes through the measurements; between them it is 6% off.
    assert rows["speed_at_measured_points"].measured < 1e-6
    assert 0.04 < rows["speed_leave_one_out"].measured < 0.08


def test_checks_fail_when_the_truth_is_not_the_measurements():
    # A check that cannot fail would be worthless: the Optimus-form fit as the truth misses
    # the measured points, and a simulator without contention misses Harmony's slowdowns.
    quiet = {"speed_variation": 0.0, "slot_noise": 0.0}
    analytical = fidelity_checks(
        FidelityConfig(speed=SpeedConfig(truth="analytical", **quiet), large=False)
    )
    assert analytical[0].check_name == "speed_at_measured_points"
    assert not analytical[0].passed
    no_contention = fidelity_checks(
        FidelityConfig(speed=SpeedConfig(interference_scale=0.0, **quiet), large=False)
    )
    packing = next(r for r in no_contention if r.check_name == "harmony_packing_slowdown")
    assert not packing.passed and packing.measured == pytest.approx(0.0, abs=1e-9)


def test_large_setting_checks_run_at_a_small_size():
    # The 500-server checks take minutes (benchmarks/bench_fidelity.py); here the same code
    # at 60 servers and 40 jobs: Optimus beats DRF and its model is wrong somewhere.
    rows = {
        r.check_name: r for r in _large_checks(FidelityConfig(seeds=1, n_servers=60, n_jobs=40))
    }
    assert set(rows) == {
        "optimus_over_drf_large",
        "optimus_over_drf_contention",
        "optimus_model_error",
    }
    assert 0.0 < rows["optimus_over_drf_large"].measured < 1.0
    assert rows["optimus_over_drf_contention"].passed
    assert rows["optimus_model_error"].passed and math.isfinite(
        rows["optimus_model_error"].measured
    )


def test_stage_stores_the_checks_once_per_simulator(warehouse_path):
    cfg = FidelityConfig(speed=QUIET, large=False)
    first = fidelity_stage(warehouse_path, cfg, "run-1")
    second = fidelity_stage(warehouse_path, cfg, "run-2")
    assert not first.cached and second.cached
    assert first.check_key == second.check_key and first.failed == second.failed == []
    with duckdb.connect(str(warehouse_path), read_only=True) as con:
        rows = con.sql("SELECT run_id, count(*), bool_and(passed) FROM fidelity_checks GROUP BY 1")
        assert rows.fetchall() == [("run-1", first.checks, True)]
