"""Names of a package loaded from its modules on first use (PEP 562)."""

from __future__ import annotations

import importlib


def lazy_getattr(package: str, table: dict, namespace: dict):
    """A module ``__getattr__`` for ``package``: a name of ``table`` (name -> submodule)
    is imported from ``package.<submodule>`` when first asked for, then kept in
    ``namespace`` (the package's globals), so later lookups cost nothing.

    Raises
    ------
    AttributeError
        For a name not in ``table`` (as a module without it would).
    """
    def __getattr__(name):
        if name in table:
            value = getattr(importlib.import_module(f"{package}.{table[name]}"), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
