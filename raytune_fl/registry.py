"""Name -> factory registries: the names a search-space file may use resolve here."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from raytune_fl.errors import RaytuneFLError

T = TypeVar("T")


class UnknownNameError(ValueError, RaytuneFLError):
    """A name that no factory is registered under; the message lists the known names."""


# a name a user registers: it appears in YAML, MLflow params and file names
USER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")


class Registry(Generic[T]):
    """`homes`: names declared ahead, each with the module that registers it, imported on the first `get`. The
    names are then known without importing those modules (the models' torch, in the driver's config checks).

    Built-in entries come from the package (`register`); user entries from plugins (`add`, through
    raytune_fl.register's functions), which may not take a built-in's name. A name not found is looked for once
    more after the installed packages' `raytune_fl.plugins` entry points are imported (raytune_fl.plugins)."""

    def __init__(self, kind: str, homes: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._homes = dict(homes or {})
        self._user: dict[str, str] = {}  # user name -> where its entry was defined ("module.qualname")

    def register(self, name: str) -> Callable[[T], T]:
        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            if self._homes and name not in self._homes:  # else its name would be unknown until its module loads
                raise ValueError(f"{self.kind} {name!r} is not declared in the registry's homes; add it there")
            self._entries[name] = entry
            return entry

        return add

    def add(self, name: str, entry: T, origin: str) -> T:
        """Register a user's `entry` (from a plugin) under `name`; `origin` says where it is defined. The same
        origin registering again replaces its entry (a plugin imported again, a module reloaded in a notebook)."""
        if not isinstance(name, str) or not USER_NAME.fullmatch(name):
            raise ValueError(
                f"{self.kind} name {name!r}: use letters, digits, '_', '-' and '.', starting with a letter"
            )
        if name in self._homes or (name in self._entries and name not in self._user):
            raise ValueError(f"{self.kind} {name!r} is built in; register yours under another name")
        if name in self._user and self._user[name] != origin:
            raise ValueError(f"{self.kind} {name!r} is already registered by {self._user[name]}; pick another name")
        self._entries[name] = entry
        self._user[name] = origin
        return entry

    def user_names(self) -> list[str]:
        """The names plugins registered (in this process)."""
        return sorted(self._user)

    def get(self, name: str) -> T:
        if name not in self._entries and name in self._homes:
            importlib.import_module(self._homes[name])
        if name not in self._entries and name not in self._homes:
            _load_installed_plugins()
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        return sorted({*self._entries, *self._homes})

    def __contains__(self, name: object) -> bool:
        if name not in self._entries and name not in self._homes:
            _load_installed_plugins()
        return name in self._entries or name in self._homes

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def _load_installed_plugins() -> None:
    from raytune_fl.plugins import load_installed  # imported here: the plugins module reads the registries

    load_installed()
