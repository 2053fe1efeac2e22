"""Torch's process-wide state, scoped to the stage that sets it.

`torch.manual_seed` and `torch.set_num_threads` change the whole process: a trainer that
seeds the global generator to build its networks, or a stage that drops to one thread
(tiny matrix products, where BLAS threads only contend), would otherwise leave that state
to whatever runs next in the same process (the next task of a sequential run, a test).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def scoped_torch(seed: int | None = None, threads: int | None = None) -> Iterator[None]:
    """Inside: torch's global generator seeded with `seed` and `threads` intra-op threads
    (None leaves either as it is). On exit, even by an exception, the generator's state and
    the thread count are what they were before, whatever the body set meanwhile."""
    # Imported here: a command that never trains (`schedlab ingest`, `sql`, `describe`)
    # imports this module through the stages and should not pay torch's 1.4 s import.
    import torch

    threads_before = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        try:
            if seed is not None:
                torch.manual_seed(seed)
            if threads is not None:
                torch.set_num_threads(threads)
            yield
        finally:
            torch.set_num_threads(threads_before)
