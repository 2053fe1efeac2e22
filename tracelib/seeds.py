"""Named random streams: one child of a seed's `SeedSequence` per source of randomness.

A stream is asked for by name (`streams["arrivals"]`), never by position. The children are
spawned in the order the names are listed, so the i-th name's child is
`SeedSequence(seed).spawn(n)[i]` for any n > i: a list of names may grow at its end without
changing any earlier stream, and must never be reordered (every stored result drawn from
it would change).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def named_seeds(
    seed: int | Sequence[int], names: Sequence[str]
) -> dict[str, np.random.SeedSequence]:
    """One child of `SeedSequence(seed)` per name, spawned in the order of `names`."""
    if len(set(names)) != len(names):
        raise ValueError(f"stream names repeat: {list(names)}")
    children = np.random.SeedSequence(seed).spawn(len(names))
    return dict(zip(names, children, strict=True))


def named_streams(
    seed: int | Sequence[int], names: Sequence[str]
) -> dict[str, np.random.Generator]:
    """One generator per name, from `named_seeds(seed, names)`."""
    return {name: np.random.default_rng(child) for name, child in named_seeds(seed, names).items()}
