"""One command line for every benchmark: its options are a frozen dataclass, parsed here.

Each field becomes a flag `--<field>` (`pipelines.system.option_flags`: its docstring the
help, `Literal[...]` its choices, a bool a switch, `tuple[X, ...]` comma-separated values,
`metadata["parse"]` a parser of its own); a field made with `positional(...)` is an optional
positional argument instead, and one made with `repeated(...)` a flag given any number of
times (its values a tuple). `--help` prints the benchmark's module docstring, its usage,
and the flags. A bad argument (unknown, without its value, a value its type or the
dataclass's `__post_init__` refuses) prints one line, `<prog>: error: <why>`, and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from collections.abc import Callable, Collection
from dataclasses import field, fields, is_dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from pipelines.system import option_flags

T = TypeVar("T")


def positional(default: Any, parse: Callable[[str], Any] | None = None) -> Any:
    """A field read as an optional positional argument (in field order), `parse` its type
    (default: the one `option_flags` gives the field's annotation)."""
    meta = {"positional": True} | ({"parse": parse} if parse else {})
    return field(default=default, metadata=meta)


def parsed(default: Any, parse: Callable[[str], Any]) -> Any:
    """A flag whose value `parse` reads (raising `argparse.ArgumentTypeError` with why a
    value is refused)."""
    return field(default=default, metadata={"parse": parse})


def repeated(parse: Callable[[str], Any]) -> Any:
    """A field read from a flag that may be given any number of times: the tuple of its
    values, each through `parse`."""
    return field(default=(), metadata={"parse": parse, "repeated": True})


def setting(config: type, exclude: Collection[str] = ()) -> Callable[[str], tuple[str, Any]]:
    """The parser of `FIELD=JSON`, a change to a field of the dataclass `config` (not one
    of `exclude`), or of a config nested in it by a dotted name (`finetune.clip=0.1`, as
    `pipelines.system.resized` takes it): -> (FIELD, the value; a JSON list as a tuple, as
    frozen configs hold)."""
    known = sorted({f.name for f in fields(config)} - set(exclude))

    def parse(text: str) -> tuple[str, Any]:
        name, sep, value = text.partition("=")
        if not sep or not _is_field(config, name, exclude):
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected FIELD=JSON, FIELD a {config.__name__} field {known} "
                "(or a field of one of them that is a config, dotted: NAME.FIELD)"
            )
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: the value is not JSON (a string is written '\"text\"')"
            ) from None
        return name, tuple(parsed) if isinstance(parsed, list) else parsed

    return parse


def _is_field(config: type, name: str, exclude: Collection[str]) -> bool:
    """Whether the dotted `name` is a field of `config` (its head not in `exclude`)."""
    head, _, rest = name.partition(".")
    if head in exclude or head not in {f.name for f in fields(config)}:
        return False
    if not rest:
        return True
    inner = typing.get_type_hints(config)[head]
    return is_dataclass(inner) and _is_field(inner, rest, ())


class _Parser(argparse.ArgumentParser):
    """argparse with its error on one line (argparse prints the usage above it)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def parser_for(options: type, prog: str, doc: str | None) -> argparse.ArgumentParser:
    """The argparse parser of a benchmark's `options` dataclass; `doc` (the module
    docstring) is its description, printed as written."""
    parser = _Parser(
        prog=prog,
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    meta = {f.name: f.metadata for f in fields(options)}
    for flag in option_flags("", options):
        # argparse formats help with %: a literal one must be doubled
        text = flag.help.replace("%", "%%")
        extra = meta[flag.dest]
        if extra.get("positional"):
            parser.add_argument(
                flag.dest,
                nargs="?",
                type=flag.type,
                default=flag.default,
                choices=flag.choices,
                help=text,
            )
        elif extra.get("repeated"):
            parser.add_argument(
                flag.flag, dest=flag.dest, type=flag.type, action="append", help=text
            )
        else:
            flag.add_to(parser, help=text)
    return parser


def parse(options: type[T], argv: list[str]) -> T:
    """The benchmark's `options` from `argv`, or exit: 0 after `--help`, 2 after printing
    a bad argument's one-line error. The program name and the help text come from the
    module that defines `options` (`python -m benchmarks.bench_x`, its docstring)."""
    module = sys.modules[options.__module__]
    spec = getattr(module, "__spec__", None)
    prog = f"python -m {spec.name}" if spec else Path(module.__file__).name
    parser = parser_for(options, prog, module.__doc__)
    # intermixed: a flag may sit between positional arguments (`default --as-published OUT`)
    values = vars(parser.parse_intermixed_args(argv))
    for f in fields(options):
        if f.metadata.get("repeated"):
            values[f.name] = tuple(values[f.name] or ())
    try:  # a value of the right type can still be one the options refuse
        return options(**values)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
