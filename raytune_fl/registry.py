"""Name -> factory registries: the names a search-space file may use resolve here."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(ValueError):
    """A name that no factory is registered under; the message lists the known names."""


class Registry(Generic[T]):
    """`homes`: names declared ahead, each with the module that registers it, imported on the first `get`. The
    names are then known without importing those modules (the models' torch, in the driver's config checks)."""

    def __init__(self, kind: str, homes: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._homes = dict(homes or {})

    def register(self, name: str) -> Callable[[T], T]:
        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            if self._homes and name not in self._homes:  # else its name would be unknown until its module loads
                raise ValueError(f"{self.kind} {name!r} is not declared in the registry's homes; add it there")
            self._entries[name] = entry
            return entry

        return add

    def get(self, name: str) -> T:
        if name not in self._entries and name in self._homes:
            importlib.import_module(self._homes[name])
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        return sorted({*self._entries, *self._homes})

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._homes

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
