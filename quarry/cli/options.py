"""Click options made from the declared arguments of a search and an answer
(:mod:`quarry.search.parameters`): each option's name, type, limits, default and help are its
declaration's, so ``quarry search``, ``quarry ask`` and ``quarry export`` say what the HTTP API and
the MCP tools say, and the library checks the same limits.

A name ``min_scores`` is spelled ``--min-scores`` on the command line, except where an older spelling
is kept (:data:`SPELLINGS`); an argument that is true by default is a ``--name/--no-name`` pair; a
list is a repeatable option, a mapping a repeatable ``NAME=NUMBER,...`` option.
"""

from __future__ import annotations

from importlib import import_module

import click

from quarry.core.registry import Registry
from quarry.search import parameters as p
from quarry.search.parameters import FILTERS, Param

__all__ = ["RegistryChoice", "SPELLINGS", "flags", "option", "options", "filter_options", "filter_of", "pairs"]

# spellings older than the declarations, which scripts use: kept
SPELLINGS = {"k": ("-k",), "min_scores": ("--min-score",)}
METAVARS = {p.NUMBERS: "NAME=NUMBER", p.WINDOW_KIND: "B,A", "rerank": "SPEC"}  # by kind, or by name


class RegistryChoice(click.Choice):
    """A ``click.Choice`` over the names of a component registry (quarry/core/registry.py), read
    when a flag is parsed, completed or shown in help, so that the names are written once, next
    to their implementations, and starting the CLI imports none of them. ``registry``: the
    :class:`~quarry.core.registry.Registry`, or ``"module:NAME"`` of one."""

    def __init__(self, registry: Registry | str):
        self._registry = registry
        super().__init__((), case_sensitive=True)

    @property
    def choices(self) -> tuple[str, ...]:
        registry = self._registry
        if isinstance(registry, str):
            module, _, name = registry.partition(":")
            registry = getattr(import_module(module), name)
        return registry.names()

    @choices.setter
    def choices(self, value) -> None:  # click.Choice.__init__ assigns it; the registry is the source
        pass


def flags(param: Param) -> tuple[str, ...]:
    """The option's spellings: ``--name-with-dashes``, or the one :data:`SPELLINGS` keeps."""
    return SPELLINGS.get(param.name, (f"--{param.name.replace('_', '-')}",))


def _help(param: Param, multiple: bool) -> str:
    return f"{param.description} Repeatable." if multiple else param.description


def option(param: Param):
    """The click option of a declared argument (its value arrives under the argument's name)."""
    spelled = flags(param)
    kwargs: dict = {"default": param.default, "metavar": METAVARS.get(param.name, METAVARS.get(param.kind))}
    if param.kind == p.INT:
        low, high = (None if x is None else int(x) for x in (param.minimum, param.maximum))
        kwargs.update(type=click.IntRange(low, high), show_default=param.default is not None)
    elif param.kind == p.CHOICE:
        names = RegistryChoice(param.registry) if param.registry is not None else click.Choice(param.choices)
        kwargs.update(type=names, show_default=True)
    elif param.kind == p.FLAG:
        if param.default:
            spelled = tuple(f"{s}/--no-{s.removeprefix('--')}" for s in spelled)
            kwargs.update(show_default=True)
        else:
            kwargs.update(is_flag=True)
    elif param.kind in (p.TEXTS, p.NUMBERS):
        kwargs.update(multiple=True, default=())
    elif param.kind == p.SEGMENTS_KIND:  # --segments alone is the first preset
        kwargs.update(type=click.Choice(param.choices), is_flag=False, flag_value=param.choices[0])
    elif param.kind not in (p.TEXT, p.WINDOW_KIND):
        raise ValueError(f"no option for the kind {param.kind!r} of {param.name}")
    multiple = bool(kwargs.get("multiple"))
    return click.option(*spelled, param.name, help=_help(param, multiple), **kwargs)


def options(declared: dict[str, Param], *names: str):
    """The options of ``names`` (in that order in ``--help``) from ``declared``."""

    def decorate(fn):
        for name in reversed(names):
            fn = option(declared[name])(fn)
        return fn

    return decorate


def filter_options(fn):
    """--where/--path/--type/--since/--until/--doc (the declared filters) and --as, shared by search,
    ask and export."""
    fn = click.option(
        "--as",
        "as_principals",
        multiple=True,
        metavar="PRINCIPAL",
        help="Only documents this principal may read, e.g. group:finance (repeatable; public is "
        "implied; see docs/api.md).",
    )(fn)
    return options(FILTERS, "where", "path", "since", "until", "type", "doc")(fn)


def filter_of(args: dict):
    """The filter of the filter options, taken out of ``args`` (a command's keywords); None when none
    was given."""
    given = {name: args.pop(name) for name in FILTERS}
    if not any(given.values()):
        return None
    from quarry.search.filters import Filter

    return Filter.build(
        where=list(given["where"]),
        path=list(given["path"]),
        since=given["since"],
        until=given["until"],
        file_type=list(given["type"]),
        doc_id=list(given["doc"]),
    )


def pairs(values, param: Param) -> dict[str, float] | None:
    """``name=value`` pairs of a repeatable, comma-separable option of a mapping; the library checks the
    numbers against their limits."""
    from quarry.core.errors import UsageError

    out: dict[str, float] = {}
    for item in (s.strip() for v in values for s in v.split(",")):
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        try:
            value = float(raw)
        except ValueError:
            value = None
        if not sep or name not in param.keys or value is None or value != value:
            raise UsageError(
                f"{flags(param)[0]} takes NAME=NUMBER with NAME one of {', '.join(param.keys)}, got {item!r}"
            )
        out[name] = value
    return out or None
