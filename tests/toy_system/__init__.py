"""A fifth learned system, as a user would add one: this folder and a line in the registry
(`tests/test_systems.py` builds that registry)."""

from tests.toy_system.plugin import TOY

__all__ = ["TOY"]
