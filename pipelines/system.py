"""What a learned system is to `schedlab run`: one `LearnedSystem` value per system, listed
in `pipelines/registry.py`. The run config, the nightly flow, the command line and the
report loop over that list and name no system themselves.

A system is a folder under `pipelines/systems/` with two modules. `plugin.py` holds its
`LearnedSystem` entry (`plugin(__name__, name=..., key=..., options=...)` builds it from the
module's `BUDGETS`, `NESTED`, `apply`, `seeded` and `summary_lines`) and imports nothing
heavy, because the command line reads every system's flags before it knows which command
runs:

    options    a dataclass of its `schedlab run` options; each field becomes the flag
               `--<key>-<field>` (a bool that defaults to True: `--no-<key>-<field>`),
               its docstring the flag's help, `Literal[...]` its choices
    nested     the configs nested in its run config whose fields are flags too,
               `--<key>-<attr>-<field>` (`--dl2-grouped-lr`): attribute -> `Nested`
    budgets    per budget (smoke, large), the config fields it changes ("train.updates")
    apply      (config, options) -> the config with the options applied, or None when
               they skip the system (0 updates, ...)
    seeded     (config, seed, workload_set) -> the config with its seed (spawned for it
               from the run's) and the run's synthetic workload set; a policy it trains
               for the arena on another set gets `arena_configs`' seed for that set
    summary_lines  its lines of `schedlab run`'s end summary
    steps      loads `steps.py` (torch, Prefect), which implements `Steps`: its run
               config, the Prefect tasks it submits, and its report sections

Each step receives the `RunContext` (warehouse, progress, what the shared stages produced)
and the futures its earlier steps returned (`Pending`: their dicts merged).

The arena: the evaluation on every workload set runs, beside the heuristics, the policies a
system enters (`Steps.arena`), per set: a system trains one policy per set of
`RunContext.arena_sets` (`arena_configs` gives its config for each) and the evaluation of a
set runs that set's own policy, or the one trained on the run's synthetic set where it has
none (`arena_policy`).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import inspect
import itertools
import sys
import textwrap
import threading
import types
import typing
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from tracelib.configs import resized

if TYPE_CHECKING:
    import duckdb

    from models.evaluation import ArenaLoader, Loader
    from pipelines.progress import Reporter
    from pipelines.sections import Section

BUDGETS = ("smoke", "default", "large")
"""How large every learned system's training and evaluation is (`--budget`)."""

Pending = dict[str, Any]
"""A system's futures so far, by its own names (merged from each step's return value)."""

ArenaPolicies = dict[str, dict[str, str]]
"""What a system enters into the evaluation on every workload set: scheduler name ->
{workload set it was trained on -> policy id}."""


def stage_seed(run_seed: int, stage: str) -> int:
    """The seed of one stage: a child of the run's `SeedSequence`, keyed by the stage's name.

    Copying the run seed into every stage made their streams identical (the synthetic
    arrivals, the derivation's model draws and the interference jobs drew the same
    numbers). A child keyed by name rather than by position (`spawn` numbers children 0, 1,
    ...) keeps every stage's seed the same whichever systems a run trains (and a set's
    arena seed the same whichever other traces arrive)."""
    key = int.from_bytes(hashlib.sha256(stage.encode()).digest()[:4], "big")
    return int(np.random.SeedSequence(run_seed, spawn_key=(key,)).generate_state(1)[0])


@dataclass(frozen=True)
class RunContext:
    """What a system's steps get from the nightly flow."""

    warehouse: str | None
    progress: Reporter
    interference: Any
    """The future of the interference-samples task (Harmony's reward model waits for it)."""
    production_sets: tuple[str, ...]
    """The workload sets derived from this run's production traces."""
    synthetic_set: str = "dl2-synthetic"
    """The run's synthetic workload set: every system trains an arena policy on it."""
    arena_sets: tuple[str, ...] = ("dl2-synthetic",)
    """The workload sets each system trains an arena policy on (the synthetic set first;
    `RunConfig.arena_training`)."""


def arena_configs(run: RunContext, cfg: Any) -> dict[str, Any]:
    """A system's arena training config (a frozen dataclass with `workload_set` and `seed`,
    made for the run's synthetic set by `LearnedSystem.seeded`) for each set of
    `run.arena_sets`: another set's training gets the same budget and a seed spawned from
    the synthetic one's, keyed by the set's name."""
    return {
        name: cfg
        if name == cfg.workload_set
        else replace(cfg, workload_set=name, seed=stage_seed(cfg.seed, name))
        for name in run.arena_sets
    }


def arena_policy(by_set: Mapping[str, str], workload_set: str, synthetic_set: str) -> str | None:
    """The policy id a scheduler runs with in the evaluation of `workload_set`: the one
    trained on that set, else the one trained on the synthetic set, else none."""
    return by_set.get(workload_set) or by_set.get(synthetic_set)


def trained_line(what: str, result: Mapping[str, Any]) -> str:
    """The start of a run summary's line on a trained policy (a stage's result as the run
    summary holds it): "  <what> <policy id>", noting a policy that was already trained on
    the same inputs (nothing trained this time)."""
    cached = " (already trained on these inputs)" if result["metrics"].get("cached") else ""
    return f"  {what} {result['policy_id']}{cached}"


class Steps(Protocol):
    """What a system's `steps.py` implements (a module is fine)."""

    def config(self) -> Any:
        """Its run config at the default budget (a frozen dataclass)."""

    def prepare(self, run: RunContext, cfg: Any) -> Pending:
        """Submit what all its trainings wait for (DL2's decision recording and warm-up,
        Harmony's reward model); {} when nothing."""

    def train(self, run: RunContext, cfg: Any, pending: Pending) -> Pending:
        """Submit its trainings."""

    def evaluate(self, run: RunContext, cfg: Any, pending: Pending) -> Pending:
        """Submit its evaluation in its own paper's scenario; {} when none."""

    def arena(self, run: RunContext, pending: Pending) -> ArenaPolicies:
        """The policies it enters into the evaluation on every workload set, once trained:
        scheduler name -> {the set each was trained on -> policy id}; {} when none."""

    def loaders(self) -> dict[str, Loader | ArenaLoader]:
        """How its checkpoints run in that evaluation: `policies.system` -> loader
        (`models.evaluation.Loader`, or an `ArenaLoader` naming what a policy learned
        from, or marking a baseline it builds); {} when none of its policies runs there."""

    def collect(self, run: RunContext, cfg: Any, pending: Pending) -> dict:
        """Wait for what it submitted; its part of the run summary."""

    def report(self, con: duckdb.DuckDBPyConnection) -> list[Section]:
        """Its sections of the HTML report."""


@dataclass(frozen=True)
class Nested:
    """A config nested in a system's run config (an algorithm's, by value), each of whose
    fields is a `schedlab run` flag `--<key>-<attr>-<field>`, its docstring the help."""

    cls: type
    """The nested config's dataclass."""
    derived: frozenset[str] = frozenset()
    """Its fields that get no flag: those the system derives from its run config (the
    seed, the simulator, the network) or sets from an option, whose flag would not reach
    the algorithm."""


@dataclass(frozen=True)
class LearnedSystem:
    """One learned system's entry in the registry (see the module docstring)."""

    name: str
    """Its name in `--systems`, in messages and in the run config (e.g. "rl-taps")."""
    key: str
    """A Python identifier: its flags' prefix and its key in the run summary ("rltaps")."""
    options: type
    budgets: Mapping[str, Mapping[str, Any]]
    apply: Callable[[Any, Any], Any | None]
    seeded: Callable[[Any, int, str], Any]
    summary_lines: Callable[[dict], list[str]]
    steps: Callable[[], Steps]
    nested: Mapping[str, Nested] = field(default_factory=dict)
    """Attribute of its run config (a dotted path for a deeper one) -> the config there
    whose fields are flags; a flag given changes that field after the options apply."""

    def __post_init__(self) -> None:
        if not self.key.isidentifier():
            raise ValueError(f"system key {self.key!r} must be a Python identifier")
        unknown = set(self.budgets) - set(BUDGETS)
        if unknown:
            raise ValueError(f"{self.name}: unknown budget(s) {sorted(unknown)}")

    def configured(self, budget: str, values: Mapping[str, Any]) -> Any | None:
        """Its run config at `budget` with its options from `values` (flat, keyed by flag
        dest: `dl2_updates`) applied; None when the options skip it."""
        sized = resized(self.steps().config(), self.budgets.get(budget, {}))
        applied = self.apply(sized, self.parse_options(values))
        if applied is None:
            return None
        # The nested fields' flags go last: one names a single field, so it wins over an
        # option that sets many (`--dl2-as-published --dl2-finetune-clip 0.1` fine-tunes
        # with clip 0.1). A training the options switched off (RL-TAPS' arena: None) has
        # no fields for its flags to change.
        changes = self.nested_changes(values)
        return resized(applied, {k: v for k, v in changes.items() if _present(applied, k)})

    def flags(self) -> list[Flag]:
        """Its `schedlab run` flags: one per field of `options`, then one per field of each
        nested config (`nested`) that it does not derive."""
        out = option_flags(self.key, self.options)
        for attr, nested in self.nested.items():
            prefix = f"{self.key}_{attr.replace('.', '_')}"
            out += nested_flags(prefix, nested.cls, nested.derived)
        dests = [f.dest for f in out]
        if len(set(dests)) < len(dests):
            raise ValueError(f"{self.name}: two flags share a dest: {sorted(dests)}")
        return out

    def nested_changes(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The nested fields' flags given in `values` (flat, by flag dest; None: not
        given), by dotted path ("grouped.lr"), as `resized` takes them."""
        out = {}
        for attr, nested in self.nested.items():
            prefix = f"{self.key}_{attr.replace('.', '_')}_"
            for f in fields(nested.cls):
                value = values.get(prefix + f.name)
                if f.name not in nested.derived and value is not None:
                    out[f"{attr}.{f.name}"] = value
        return out

    def parse_options(self, values: Mapping[str, Any]) -> Any:
        """Its `options` from flat values keyed by flag dest; absent ones (and None for a
        field whose default is not None) keep the field's default."""
        prefix = f"{self.key}_"
        given = {
            f.name: values[prefix + f.name]
            for f in fields(self.options)
            if values.get(prefix + f.name) is not None
        }
        return self.options(**given)


@dataclass(frozen=True)
class StepsModule:
    """A system's `steps` entry: imports its steps module (torch, Prefect) when called."""

    module: str

    def __call__(self) -> Steps:
        return importlib.import_module(self.module)


def plugin(module: str, *, name: str, key: str, options: type) -> LearnedSystem:
    """The entry of the system whose `plugin.py` is `module` (call it there with
    `__name__`): its `BUDGETS`, `NESTED` (if any), `apply`, `seeded` and `summary_lines`,
    and the `steps.py` beside it."""
    found = sys.modules[module]
    return LearnedSystem(
        name=name,
        key=key,
        options=options,
        budgets=found.BUDGETS,
        apply=found.apply,
        seeded=found.seeded,
        summary_lines=found.summary_lines,
        steps=StepsModule(module.rpartition(".")[0] + ".steps"),
        nested=getattr(found, "NESTED", {}),
    )


def _present(cfg: Any, path: str) -> bool:
    """Whether every config on the way to the field at dotted `path` is there (not None)."""
    for name in path.split(".")[:-1]:
        cfg = getattr(cfg, name)
        if cfg is None:
            return False
    return True


class Registry:
    """Learned systems in order: what `pipelines/registry.py` lists, and what the nightly
    flow takes as its `registry` parameter.

    A holder rather than a tuple because Prefect records every flow parameter as JSON and
    records one it cannot encode as a placeholder, while a tuple of entries (which hold
    classes and functions) breaks its encoder instead."""

    __slots__ = ("systems",)

    def __init__(self, systems: Iterable[LearnedSystem]) -> None:
        self.systems = tuple(systems)
        names = [s.name for s in self.systems]
        keys = [s.key for s in self.systems]
        if len(set(names)) < len(names) or len(set(keys)) < len(keys):
            raise ValueError(f"two systems share a name or key: {names}, {keys}")

    def __iter__(self) -> Iterator[LearnedSystem]:
        return iter(self.systems)

    def __len__(self) -> int:
        return len(self.systems)

    def __repr__(self) -> str:
        return f"Registry({', '.join(s.name for s in self.systems)})"

    def loaders(self) -> dict[str, Loader | ArenaLoader]:
        """Every system's arena loaders, by `policies.system` (imports each system's steps)."""
        out: dict[str, Loader | ArenaLoader] = {}
        for system in self.systems:
            for name, loader in system.steps().loaders().items():
                if name in out:
                    raise ValueError(f"two systems load policies of system {name!r}")
                out[name] = loader
        return out


@dataclass(frozen=True)
class Flag:
    """One generated command-line flag."""

    flag: str
    dest: str
    kind: str
    """"value", "store_true" or "store_false"."""
    type: Callable[[str], Any] | None
    default: Any
    choices: tuple[Any, ...] | None
    help: str

    def add_to(self, parser: Any, help: str | None = None) -> None:
        """Add this flag to the argparse `parser`, with `help` for its help text if given."""
        text = self.help if help is None else help
        if self.kind == "value":
            parser.add_argument(
                self.flag,
                dest=self.dest,
                type=self.type,
                choices=self.choices,
                default=self.default,
                help=text,
            )
        else:
            parser.add_argument(self.flag, dest=self.dest, action=self.kind, help=text)


def field_docs(cls: type) -> dict[str, str]:
    """The docstrings under a dataclass's fields (the string literal right after each
    annotated field), read from its source: Python keeps no other trace of them.

    Parsed once per class and kept: CPython 3.11's `ast` module is not thread-safe (two
    threads building ASTs at once fail with "AST constructor recursion depth mismatch"),
    and a run asks for these from the flow's threads. The command line asks first, in the
    main thread before any other starts (`build_parser`), so a run never parses at all;
    the lock keeps any other caller to one parse at a time."""
    with _FIELD_DOCS_LOCK:
        docs = _FIELD_DOCS.get(cls)
        if docs is None:
            docs = _FIELD_DOCS[cls] = _parse_field_docs(cls)
    return dict(docs)


# The parsed docstrings per class: derived from the source, which cannot change while the
# process runs, so keeping them is a cache, not state.
_FIELD_DOCS: dict[type, dict[str, str]] = {}
_FIELD_DOCS_LOCK = threading.Lock()


def _parse_field_docs(cls: type) -> dict[str, str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # the class statement's body
    docs = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def option_flags(key: str, options: type) -> list[Flag]:
    """Flags `--<key>-<field>` (`--<field>` when `key` is "") for every field of the
    dataclass `options`: help from the field's docstring, choices from a `Literal`
    annotation, `store_true` for a bool that defaults to False and `--no-<key>-<field>` for
    one that defaults to True, comma-separated values for a `tuple[X, ...]`, and the
    field's `metadata["parse"]` (str -> value) as the type where it has one."""
    docs = field_docs(options)
    hints = typing.get_type_hints(options)
    out = []
    for f in fields(options):
        if f.default is MISSING:
            raise ValueError(f"{options.__name__}.{f.name} needs a default to be a flag")
        dest = f"{key}_{f.name}" if key else f.name
        name = f"{key}-{f.name}".replace("_", "-") if key else f.name.replace("_", "-")
        help_text = docs.get(f.name, "")
        hint = hints[f.name]
        if "parse" in f.metadata:
            parse = f.metadata["parse"]
            out.append(Flag(f"--{name}", dest, "value", parse, f.default, None, help_text))
            continue
        if hint is bool:
            negate = f.default is True
            flag = f"--no-{name}" if negate else f"--{name}"
            kind = "store_false" if negate else "store_true"
            text = f"do not {help_text}" if negate else help_text
            out.append(Flag(flag, dest, kind, None, f.default, None, text))
            continue
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        listed = [a for a in [hint, *args] if typing.get_origin(a) is tuple]
        if listed:
            item = typing.get_args(listed[0])[0]
            if item not in (int, float, str):
                raise ValueError(f"{options.__name__}.{f.name}: no flag for type {hint}")
            out.append(Flag(f"--{name}", dest, "value", _listed(item), f.default, None, help_text))
            continue
        literal = [a for a in args if typing.get_origin(a) is typing.Literal]
        if typing.get_origin(hint) is typing.Literal:
            literal = [hint]
        choices = tuple(typing.get_args(literal[0])) if literal else None
        scalar = next((a for a in args if a in (int, float, str, Path)), hint)
        kind_type = type(choices[0]) if choices else scalar
        if kind_type not in (int, float, str, Path):
            raise ValueError(f"{options.__name__}.{f.name}: no flag for type {hint}")
        out.append(Flag(f"--{name}", dest, "value", kind_type, f.default, choices, help_text))
    return out


def nested_flags(prefix: str, cls: type, derived: Collection[str] = ()) -> list[Flag]:
    """Flags `--<prefix>-<field>` for the fields of the dataclass `cls` not in `derived`,
    each taking a value and defaulting to None (not given: the config keeps its own, which
    the budget and the options chose); help from the field's docstring, choices from a
    `Literal`, a bool as true/false, comma-separated values for a `tuple[X, ...]`. A field
    that may be None takes a value of its other type (None is its default's business)."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        if f.name in derived:
            continue
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
            hint = args[0]
        choices = None
        if typing.get_origin(hint) is typing.Literal:
            choices = typing.get_args(hint)
            parse: Callable[[str], Any] = type(choices[0])
        elif hint is bool:
            parse = _boolean
        elif typing.get_origin(hint) is tuple and typing.get_args(hint)[0] in (int, float, str):
            parse = _listed(typing.get_args(hint)[0])
        elif hint in (int, float, str):
            parse = hint
        else:
            raise ValueError(f"{cls.__name__}.{f.name}: no flag for type {hint}; derive it")
        flag = f"--{prefix}-{f.name}".replace("_", "-")
        dest = f"{prefix}_{f.name}"
        # argparse formats help with %: an algorithm's docstring says "45% slower"
        help_text = docs.get(f.name, "").replace("%", "%%")
        out.append(Flag(flag, dest, "value", parse, None, choices, help_text))
    return out


def _boolean(text: str) -> bool:
    """A bool flag's value: true/false (also yes/no, 1/0)."""
    word = text.strip().lower()
    if word in ("true", "yes", "1"):
        return True
    if word in ("false", "no", "0"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


_boolean.__name__ = "true/false"  # argparse names it in an error


def at_least(kind: Callable[[str], Any], low: float) -> Callable[[str], Any]:
    """An argparse type (also a benchmark's `parsed` field's parser): a number that `kind`
    (int or float) reads from the text, `low` or more."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            noun = "whole number" if kind is int else "number"
            raise argparse.ArgumentTypeError(f"{text!r} is not a {noun}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r}: must be at least {low}")
        return value

    return parse


def _listed(item: type) -> Callable[[str], tuple]:
    """The parser of a comma-separated flag value into a tuple of `item`s."""

    def parse(text: str) -> tuple:
        return tuple(item(x) for x in text.split(",") if x)

    parse.__name__ = f"comma-separated {item.__name__}"  # argparse names it in an error
    return parse
