"""Registries, one per extension point, and plugins by entry point.

Each extension point has one :class:`Registry` (name -> factory or record), defined here so that
every layer — settings validation included — can read its names without importing the
implementations. quarry's own components register themselves in the module that implements
them, the way a plugin does::

    from quarry.core.registry import EMBEDDERS

    @EMBEDDERS.register("hash")
    def _hash(settings):
        return HashEmbedder(dim=settings.embed_dim or 64)

and a registry imports those modules (``modules``) on its first lookup. A package outside
quarry adds components the same way, plus one line in its own ``pyproject.toml`` (the convention
of llm, pytest and Datasette)::

    [project.entry-points."quarry.embedders"]
    my-embedder = "my_package.embedder"        # a module whose import registers, or
    my-other = "my_package.embedder:register"  # a function called with the registry

Entry point groups: ``quarry.embedders``, ``quarry.sectioners``, ``quarry.context_writers``,
``quarry.rerankers``, ``quarry.fusions``, ``quarry.formats`` (a :class:`~quarry.ingest.parsers.Format`,
a list of them, or a module that registers), ``quarry.stores`` (object-store backends by URL
scheme) and ``quarry.sources`` (readers of index roots on object storage, by URL scheme). A plugin
that fails to load is named in a warning and left out; it never stops quarry.

A factory is a plain function: it imports what is heavy (torch, onnxruntime, a client SDK) when
it is called, so listing names or validating settings loads nothing heavy.

A component declares the settings it reads where it registers (``options=``, a tuple of
:class:`~quarry.core.options.Option`): Settings reads, checks and masks them, and the content
fingerprint takes those that shape the index — adding a component is one module and one
registration, never an edit to settings.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from functools import cache
from importlib import import_module
from types import ModuleType
from typing import Any, Generic, TypeVar

from quarry.core.errors import ConfigError
from quarry.core.options import Option

__all__ = [
    "Registry",
    "EMBEDDERS",
    "SECTIONERS",
    "CONTEXT_WRITERS",
    "RERANKERS",
    "FUSIONS",
    "FORMATS",
    "STORES",
    "SOURCES",
    "REGISTRIES",
    "components",
    "declared_option",
]

F = TypeVar("F")
# A registered factory: its arguments and product depend on the extension point, whose types
# live in the layers above this one.
Factory = Callable[..., Any]


@cache
def _entry_points() -> Any:
    """Every installed entry point, from one scan of the installed distributions per process (a
    scan reads every distribution's metadata: about 15 ms with 250 installed, which a cold
    ``quarry search`` paid once per registry its settings read); ``.select(group=...)`` filters."""
    from importlib.metadata import entry_points

    return entry_points()


class Registry(Generic[F]):
    """Components by name for one extension point (``kind`` names it in error messages).

    ``modules`` are the modules whose import registers the built-ins, and ``group`` the entry
    point group plugins declare themselves in; both are loaded on the first lookup, not when the
    registry is defined, so defining a registry imports nothing and no seam module imports its
    implementations (no import cycles).
    """

    def __init__(self, kind: str, modules: tuple[str, ...] = (), group: str | None = None):
        self.kind = kind
        self.group = group
        self._modules = modules
        self._loaded = not modules and group is None
        self._loading = False
        self._guard = threading.RLock()
        self._items: dict[str, F] = {}
        self._info: dict[str, dict[str, Any]] = {}
        self._origin: dict[str, str] = {}  # name -> the plugin (entry point) that registered it
        self._options: dict[str, tuple[Option, ...]] = {}  # name -> the settings it declared
        self._plugin: str | None = None  # the entry point being loaded
        self.errors: list[str] = []  # plugins that failed to load, and why
        self.version = 0  # grows with every registration (views cache by it)
        self._names: tuple[tuple[int, int], tuple[str, ...]] = ((-1, -1), ())  # ((version, size), names())

    # --- registering --------------------------------------------------------------------------

    def register(self, name: str, *, options: tuple[Option, ...] = (), **info: Any) -> Callable[[F], F]:
        """Decorator: register the decorated factory under ``name`` (each name once); ``options``:
        the settings it reads (:mod:`quarry.core.options`); ``info`` is kept for :meth:`info` (a
        backend's ``describe`` function, a fusion's properties …)."""

        def add(factory: F) -> F:
            self.add(name, factory, options=options, **info)
            return factory

        return add

    def add(self, name: str, item: F, *, options: tuple[Option, ...] = (), **info: Any) -> F:
        """Register ``item`` (a factory, or a record such as a file format) under ``name``, with
        the settings it reads (``options``; a record may carry them as its ``options`` attribute)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} needs a name, got {name!r}")
        if name in self._items and self._items[name] is not item:
            raise ValueError(
                f"{self.kind} {name!r} is registered twice"
                + (f" (by plugin {self._origin[name]})" if name in self._origin else "")
            )
        options = tuple(options or getattr(item, "options", None) or ())
        for option in options:
            if not isinstance(option, Option):
                raise ValueError(f"{self.kind} {name!r}: options must be quarry.core.options.Option, got {option!r}")
            _claim(option, f"{self.kind} {name!r}")
        self._items[name] = item
        self._options[name] = options
        self._info[name] = info
        if self._plugin is not None:
            self._origin[name] = self._plugin
        self.version += 1
        return item

    # --- loading ------------------------------------------------------------------------------

    def _load(self) -> None:
        # A server's threads may look a name up at the same moment: one imports the built-ins while
        # the others wait, so none sees a half-filled registry. Re-entrant: importing a built-in may
        # look up another name of this registry.
        if self._loaded:
            return
        with self._guard:
            if self._loaded or self._loading:
                return
            self._loading = True
            try:
                for module in self._modules:
                    import_module(module)
                if self.group:
                    self._load_plugins()
                self._loaded = True
            finally:
                self._loading = False

    def _load_plugins(self) -> None:
        assert self.group is not None  # called only for a registry with a group
        for ep in sorted(_entry_points().select(group=self.group), key=lambda e: e.name):
            self._plugin = f"{ep.name} ({ep.value})"
            try:
                loaded = ep.load()
                if isinstance(loaded, ModuleType):
                    pass  # importing it registered what it holds
                elif callable(loaded) and not _is_record(loaded):
                    loaded(self)
                else:
                    for record in loaded if isinstance(loaded, (list, tuple)) else [loaded]:
                        self.add(record.name, record)
            except Exception as exc:  # noqa: BLE001 - a broken plugin is named, never fatal
                message = f"{self.kind} plugin {self._plugin} failed to load: {type(exc).__name__}: {exc}"
                self.errors.append(message)
                logging.getLogger("quarry").warning("%s", message)
            finally:
                self._plugin = None

    # --- reading ------------------------------------------------------------------------------

    def get(self, name: str) -> F:
        """The component registered as ``name``; :class:`ConfigError` listing the known names if none."""
        self._load()
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise ConfigError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self.names())}") from None

    def info(self, name: str) -> dict[str, Any]:
        """What ``name`` was registered with besides its component."""
        self.get(name)
        return self._info[name]

    def options(self, name: str) -> tuple[Option, ...]:
        """The settings ``name`` declared when it registered."""
        self.get(name)
        return self._options.get(name, ())

    def origin(self, name: str) -> str | None:
        """The plugin (entry point) that registered ``name``; None for quarry's own."""
        self.get(name)
        return self._origin.get(name)

    def check(self, name: str) -> str:
        """``name`` if it is registered, else the :class:`ConfigError` of :meth:`get`."""
        self.get(name)
        return name

    def load(self) -> None:
        """Import the built-ins and the plugins now (every lookup does it first; this does only that)."""
        self._load()

    def names(self) -> tuple[str, ...]:
        """Registered names: built-ins in the order of ``modules`` (then of registration), plugins after
        (kept per :attr:`version`: discovery asks once a file)."""
        self._load()
        key, names = self._names
        if key == (self.version, len(self._items)):  # the length too: a test may set an item in place
            return names
        rank = {m: i for i, m in enumerate(self._modules)}
        order = {n: i for i, n in enumerate(self._items)}

        def position(name: str) -> tuple[int, int]:
            if name in self._origin:
                return (len(rank) + 1, order[name])
            return (rank.get(getattr(self._items[name], "__module__", ""), len(rank)), order[name])

        names = tuple(sorted(self._items, key=position))
        if not self._loading:  # a registry still importing its built-ins has not reached its order yet
            self._names = ((self.version, len(self._items)), names)
        return names

    def values(self) -> list[F]:
        """The components, in the order of :meth:`names`."""
        return [self._items[n] for n in self.names()]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"


# option name -> (the option, the first component that declared it): one meaning per name
_DECLARED: dict[str, tuple[Option, str]] = {}


def _claim(option: Option, owner: str) -> None:
    """Record ``option`` as declared by ``owner``; components may share an option only when they
    declare it alike (two embedding backends of one service reading one key)."""
    seen = _DECLARED.get(option.name)
    if seen is not None and seen[0] != option:
        raise ValueError(f"option {option.name!r} of {owner} is declared differently by {seen[1]}")
    _DECLARED.setdefault(option.name, (option, owner))


def declared_option(name: str) -> tuple[Option, str] | None:
    """The option called ``name`` and the component that declared it, every registry loaded
    (plugins included); None when no component declares it."""
    for registry in REGISTRIES.values():
        registry.load()
    return _DECLARED.get(name)


def _is_record(obj: Any) -> bool:
    """A registered record (a file format), as opposed to a registration function."""
    return hasattr(obj, "name") and not isinstance(obj, type) and not hasattr(obj, "__code__")


# --- the extension points ----------------------------------------------------------------------

EMBEDDERS: Registry[Factory] = Registry(
    "embedding backend",
    modules=(
        "quarry.ingest.embedders.local",
        "quarry.ingest.embedders.onnx_backend",
        "quarry.ingest.embedders.openai_provider",
        "quarry.ingest.embedders.hashing",
    ),
    group="quarry.embedders",
)
SECTIONERS: Registry[Factory] = Registry(
    "sectioner", modules=("quarry.ingest.sectioning", "quarry.ingest.llm.sections"), group="quarry.sectioners"
)
CONTEXT_WRITERS: Registry[Factory] = Registry(
    "context writer", modules=("quarry.ingest.context", "quarry.ingest.llm.context"), group="quarry.context_writers"
)
RERANKERS: Registry[Factory] = Registry("reranker", modules=("quarry.search.rerank",), group="quarry.rerankers")
FUSIONS: Registry[Factory] = Registry("fusion", modules=("quarry.search.fusion",), group="quarry.fusions")
# records (quarry.ingest.parsers.Format), not factories
FORMATS: Registry[Any] = Registry("file format", modules=("quarry.ingest.parsers.formats",), group="quarry.formats")
STORES: Registry[Factory] = Registry(
    "object store",
    modules=(
        "quarry.store.objstore.s3",
        "quarry.store.objstore.local",
        "quarry.store.objstore.gcs",
        "quarry.store.objstore.azure",
    ),
    group="quarry.stores",
)
# Roots of an index run on object storage: scheme -> factory(bucket) -> quarry.ingest.sources.Source.
# A scheme here is also a STORES scheme (tests/test_sources.py): one URL form for stores and roots.
SOURCES: Registry[Factory] = Registry(
    "object source",
    modules=("quarry.ingest.sources.s3", "quarry.ingest.sources.gcs", "quarry.ingest.sources.azure"),
    group="quarry.sources",
)


def components() -> dict[str, dict[str, Any]]:
    """Every extension point's components and the plugin (entry point) that added each (None for
    quarry's own), with the plugins that failed to load: what ``quarry plugins`` prints."""
    out: dict[str, dict[str, Any]] = {}
    for kind, registry in REGISTRIES.items():
        out[kind] = {
            "components": [
                {
                    "name": n,
                    "plugin": registry.origin(n),
                    "options": [
                        {
                            "name": o.name,
                            "variable": o.variable,
                            "required": o.required,
                            "secret": o.secret,
                            "help": o.help,
                        }
                        for o in registry.options(n)
                    ],
                }
                for n in registry.names()
            ],
            "errors": list(registry.errors),
            "entry_point_group": registry.group,
        }
    return out


REGISTRIES: dict[str, Registry[Any]] = {
    "embedders": EMBEDDERS,
    "sectioners": SECTIONERS,
    "context_writers": CONTEXT_WRITERS,
    "rerankers": RERANKERS,
    "fusions": FUSIONS,
    "formats": FORMATS,
    "stores": STORES,
    "sources": SOURCES,
}
