"""The names of the Table 2 ablations DL2 and Harmony share: an actor-critic trainer with
some of its three mechanisms (the critic, exploration, experience replay) switched off."""

from __future__ import annotations


def ablation_system(system: str, *, critic: bool, exploration: bool, replay: bool) -> str:
    """`policies.system` of a trainer of `system` that keeps the mechanisms given True:
    `system` itself with all three, else `system` + "-without-" + the dropped ones, joined
    by "-" in the order critic, exploration, replay."""
    dropped = [
        name
        for name, kept in (("critic", critic), ("exploration", exploration), ("replay", replay))
        if not kept
    ]
    return f"{system}-without-{'-'.join(dropped)}" if dropped else system
