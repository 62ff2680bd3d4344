"""Name -> factory registries, one per extension point (embedders, sectioners, context writers,
rerankers).

Each registry is defined next to the seam's protocol and each built-in registers itself where
it is implemented, so a new embedder or sectioner is one module, not an edit to an if/elif chain
and to the lists of names that CLI choices and settings validation used to copy::

    EMBEDDERS = Registry("embedding backend")

    @EMBEDDERS.register("hash")
    def _hash(settings):
        return HashEmbedder(dim=settings.embed_dim or 64)

A factory is a plain function: it imports what is heavy (torch, onnxruntime, a client SDK) when
it is called, so listing names or validating settings loads nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import import_module
from typing import Generic, TypeVar

from quarry.core.errors import ConfigError

__all__ = ["Registry"]

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """Factories by name for one kind of component (``kind`` names it in error messages).

    ``modules`` are the modules whose import registers the built-ins; they are imported on the
    first lookup, not when the registry is defined, so a seam module never imports its
    implementations (no import cycles) and defining a registry costs nothing.
    """

    def __init__(self, kind: str, modules: tuple[str, ...] = ()):
        self.kind = kind
        self._modules = modules
        self._loaded = not modules
        self._loading = False
        self._guard = threading.RLock()
        self._factories: dict[str, F] = {}
        self._info: dict[str, dict] = {}

    def register(self, name: str, **info) -> Callable[[F], F]:
        """Decorator: register the decorated factory under ``name`` (each name once); ``info``
        is kept for :meth:`info` (a backend's ``describe`` function, say)."""

        def add(factory: F) -> F:
            if name in self._factories and self._factories[name] is not factory:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._factories[name] = factory
            self._info[name] = info
            return factory

        return add

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
                self._loaded = True
            finally:
                self._loading = False

    def get(self, name: str) -> F:
        """The factory registered as ``name``; :class:`ConfigError` listing the known names if none."""
        self._load()
        try:
            return self._factories[name]
        except (KeyError, TypeError):
            raise ConfigError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self.names())}") from None

    def info(self, name: str) -> dict:
        """What ``name`` was registered with besides its factory."""
        self.get(name)
        return self._info[name]

    def check(self, name: str) -> str:
        """``name`` if it is registered, else the :class:`ConfigError` of :meth:`get`."""
        self.get(name)
        return name

    def names(self) -> tuple[str, ...]:
        """Registered names: built-ins in the order of ``modules`` (then of registration), whatever
        imported first; others after them."""
        self._load()
        rank = {m: i for i, m in enumerate(self._modules)}
        return tuple(sorted(self._factories,
                            key=lambda n: rank.get(getattr(self._factories[n], "__module__", ""), len(rank))))

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._factories

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"
