"""Named streams are the children `SeedSequence.spawn` numbers in the order of their names."""

from __future__ import annotations

import numpy as np
import pytest

from tracelib.seeds import named_seeds, named_streams


def test_a_named_child_is_the_spawned_child_at_its_position():
    names = ("split", "init", "batches", "augmentation")
    for seed in (0, 7, [3, 1]):
        seeds = named_seeds(seed, names)
        for i, name in enumerate(names):
            # whatever the count spawned, child i is the same (names may grow at the end)
            for n in (i + 1, len(names)):
                expected = np.random.SeedSequence(seed).spawn(n)[i]
                assert (seeds[name].generate_state(4) == expected.generate_state(4)).all()


def test_named_streams_draw_like_generators_of_the_children():
    rngs = named_streams(5, ("a", "b"))
    child = np.random.SeedSequence(5).spawn(2)[1]
    assert rngs["b"].random(3).tolist() == np.random.default_rng(child).random(3).tolist()


def test_a_repeated_name_is_refused():
    with pytest.raises(ValueError, match="repeat"):
        named_seeds(0, ("a", "a"))
