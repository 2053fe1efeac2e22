"""Each action space's layout object encodes and decodes its indices consistently."""

from __future__ import annotations

import numpy as np
import pytest

from tracelib.envs.chic import ChicActions
from tracelib.envs.observation import AllocationActions, PlacementActions
from tracelib.sim.builder import Action


def test_dl2_actions_round_trip_and_stop_is_last():
    layout = AllocationActions(window=4)
    assert (layout.n, layout.stop) == (13, 12)
    made = [layout.add_worker(i) for i in range(4)]
    made += [layout.add_ps(i) for i in range(4)] + [layout.add_both(i) for i in range(4)]
    assert sorted(made) == list(range(12))  # every job action once, stop apart
    assert layout.decode(layout.add_ps(2)) == (2, Action.PS)
    assert layout.decode(layout.stop) is None
    for a in range(layout.stop):
        row, kind = layout.decode(a)
        assert layout.of(row, kind) == a and a in range(12)[layout.row(row)]
    assert list(range(13)[layout.rows(2)]) == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(("variant", "n"), [("chic", 9), ("chic-pair", 5)])
def test_chic_actions_round_trip_and_void_is_last(variant, n):
    layout = ChicActions(variant, window=4)
    assert (layout.n, layout.void) == (n, n - 1)
    assert layout.decode(layout.void) is None
    with pytest.raises(ValueError, match="outside"):
        layout.decode(n)
    for row in range(4):
        actions = range(n)[layout.row(row)]
        if variant == "chic":
            assert list(actions) == [layout.add_worker(row), layout.add_ps(row)]
            assert layout.decode(layout.add_worker(row)) == (row, 1, 0)
            assert layout.decode(layout.add_ps(row)) == (row, 0, 1)
        else:
            assert list(actions) == [layout.add_pair(row)]
            assert layout.decode(layout.add_pair(row)) == (row, 1, 1)
    if variant == "chic":
        assert list(range(n)[layout.workers(2)]) == [0, 2]
        assert list(range(n)[layout.ps(2)]) == [1, 3]


def test_placement_actions_round_trip_and_grid():
    layout = PlacementActions(window=3, n_servers=5)
    assert layout.n == 30
    flat = np.arange(layout.n)
    grid = layout.grid(flat)  # (N', 2, M)
    for row in range(3):
        for role in (0, 1):
            assert list(flat[layout.task(row, role)]) == list(grid[row, role])
            for server in range(5):
                a = layout.of(row, role, server)
                assert layout.decode(a) == (row, role, server) and grid[row, role, server] == a
