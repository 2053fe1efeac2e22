"""The speed model against the papers' figures (SPEC "Reference figures for calibration")."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tracelib.catalogue import DL2_CATALOGUE, by_name
from tracelib.sim import JobPlacement, SpeedConfig, SpeedModel
from tracelib.sim.calibration import (
    DL2_FIG1_RESNET50,
    HARMONY_TABLE_I,
    SPEED_TARGETS,
    colocated,
    dl2_speedup_curve,
    fit_all,
    harmony_packing,
    placed_speed,
    spread,
)

MODELS = [jt.model for jt in DL2_CATALOGUE]
SM = SpeedModel()


def test_catalogue_coefficients_are_the_documented_refit():
    # catalogue.py holds the NNLS fit rounded to 3 digits: speeds agree within 1%.
    fitted = fit_all()
    for jt in DL2_CATALOGUE:
        a, b, c, d, e = fitted[jt.model]
        for w, p in itertools.product(range(1, 17), repeat=2):
            refit = 1.0 / (a / w + b + c * w / p + d * w + e * p)
            assert jt.speed(w, p) == pytest.approx(refit, rel=0.01), (jt.model, w, p)


@pytest.mark.parametrize("model", MODELS)
def test_measured_single_worker_speed_is_reproduced(model):
    # The SPEC's starting fit gave ResNet-50 29.3 at (1,1) against the measured 15.8.
    jt = by_name()[model]
    measured = dict(((w, p), s) for w, p, s in SPEED_TARGETS[model])[(1, 1)]
    assert placed_speed(SM, jt, 1, 1, colocated(1, 1)) == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize("model", MODELS)
def test_diminishing_returns(model):
    jt = by_name()[model]
    curve = dl2_speedup_curve(model, tuple(range(1, 17)), SM)
    assert curve[2] > curve[1]  # a second worker+PS always helps ...
    per_worker = [curve[w] / w for w in range(1, 17)]
    assert all(b < a for a, b in itertools.pairwise(per_worker))  # ... less and less
    assert max(curve.values()) < 2.6  # far from linear: at most ~2.4x anywhere
    # Speed peaks and then falls: more workers than the peak only hurt.
    peak = max(curve, key=curve.get)
    assert 2 <= peak <= 8
    assert curve[16] < curve[peak]
    assert jt.speed(peak, peak) > jt.speed(16, 16)


def test_resnet50_curve_matches_dl2_fig1():
    curve = dl2_speedup_curve("resnet-50", tuple(DL2_FIG1_RESNET50), SM)
    for w, target in DL2_FIG1_RESNET50.items():
        assert curve[w] == pytest.approx(target, rel=0.08), (w, curve[w], target)
    assert curve[1] < curve[2] < curve[4]  # rises, then flattens between 4 and 8
    assert abs(curve[8] - curve[4]) / curve[4] < 0.15


def test_vgg16_gains_least_of_dl2_fig1_models():
    best = {
        m: max(dl2_speedup_curve(m, tuple(range(1, 17)), SM).values())
        for m in ("resnet-50", "vgg-16", "seq2seq")
    }
    assert best["vgg-16"] == min(best.values())
    assert best["resnet-50"] > 1.3 * best["vgg-16"]


def test_best_ps_count_differs_across_models():
    best_ps = {
        jt.model: max(range(1, 17), key=lambda p, jt=jt: jt.speed(4, p)) for jt in DL2_CATALOGUE
    }
    assert len(set(best_ps.values())) >= 3
    assert best_ps["dssm"] <= 2  # DSSM's speed ignores PSs: its best ratio is many workers
    assert best_ps["resnet-50"] >= 8  # ResNet-50 wants more PSs than workers
    split12 = {
        jt.model: max(range(1, 12), key=lambda w, jt=jt: jt.speed(w, 12 - w))
        for jt in DL2_CATALOGUE
    }
    assert len(set(split12.values())) >= 2


def test_colocation_speeds_up_network_heavy_models_only():
    rn, dssm = by_name()["resnet-50"], by_name()["dssm"]
    assert placed_speed(SM, rn, 2, 2, colocated(2, 2)) > 1.04 * placed_speed(
        SM, rn, 2, 2, spread(2, 2)
    )
    assert placed_speed(SM, dssm, 2, 2, colocated(2, 2)) == pytest.approx(
        placed_speed(SM, dssm, 2, 2, spread(2, 2))
    )
    no_locality = SpeedModel(SpeedConfig(locality=False))
    assert placed_speed(no_locality, rn, 2, 2, colocated(2, 2)) == pytest.approx(rn.speed(2, 2))


def test_half_local_job_sits_between_spread_and_colocated():
    rn = by_name()["resnet-50"]
    half = JobPlacement.of([0, 1], [0, 1])  # each worker has one of its two PSs locally
    speeds = [placed_speed(SM, rn, 2, 2, pl) for pl in (spread(2, 2), half, colocated(2, 2))]
    assert speeds[0] < speeds[1] < speeds[2]


def test_interference_grows_with_colocated_jobs():
    # Harmony Fig. 5: ResNeXt slows further with every extra co-located CTC job.
    t = by_name()
    types = [t["resnext-110"].type_index] + [t["cnn-text"].type_index] * 3
    speeds = []
    for k in range(4):
        pls = [JobPlacement.of([0], [0])] + [JobPlacement.of([0], [0])] * k
        speeds.append(SM.placed(types[: k + 1], [1] * (k + 1), [1] * (k + 1), pls, 1)[0])
    assert all(b < a for a, b in itertools.pairwise(speeds))
    assert speeds[1] / speeds[0] < 0.5  # ResNeXt with CTC: one of the worst pairs


def test_interference_off_gives_catalogue_speed():
    sm = SpeedModel(SpeedConfig(interference_scale=0.0, locality=False))
    t = by_name()
    pls = [JobPlacement.of([0], [0]), JobPlacement.of([0], [0])]
    got = sm.placed([t["vgg-16"].type_index, t["wlm"].type_index], [1, 1], [1, 1], pls, 1)
    assert got == pytest.approx([t["vgg-16"].speed(1, 1), t["wlm"].speed(1, 1)])


def test_harmony_packing_slowdown():
    slow = harmony_packing()
    assert set(slow) == set(HARMONY_TABLE_I)
    assert 0.28 <= np.mean(list(slow.values())) <= 0.38  # Harmony: 33% on average
    assert max(slow, key=slow.get) == "resnext-110"
    assert 1.7 <= 1.0 / (1.0 - slow["resnext-110"]) <= 2.2  # "nearly 2x slowdown"


def test_harmony_mild_pairs_are_the_mildest():
    # Harmony case study 2: ResNet+WLM and ResNet+Seq2Seq interfere least (summed slowdown).
    t = by_name()

    def pair_level(a: str, b: str) -> float:
        ta, tb = t[a].type_index, t[b].type_index
        pls = [JobPlacement.of([0], [0]), JobPlacement.of([0], [0])]
        together = SM.placed([ta, tb], [1, 1], [1, 1], pls, 1)
        alone = [SM.placed([x], [1], [1], [pls[0]], 1)[0] for x in (ta, tb)]
        return float(2.0 - together[0] / alone[0] - together[1] / alone[1])

    levels = {frozenset(p): pair_level(*p) for p in itertools.combinations(HARMONY_TABLE_I, 2)}
    mildest = sorted(levels, key=levels.get)[:2]
    assert set(mildest) == {frozenset({"resnet-50", "wlm"}), frozenset({"resnet-50", "seq2seq"})}
    assert levels[frozenset({"resnet-50", "wlm"})] < 0.5 * np.mean(list(levels.values()))
