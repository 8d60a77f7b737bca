"""``vis.register``: once per entry file (docs/extension-api.md, "Registration")."""

from __future__ import annotations

import contextvars
import sys

from . import _host
from ._decl import Extension

_CURRENT_FILE = contextvars.ContextVar("vis_extension_file", default=None)
_REGISTERED = {}

_TWICE = ("vis.register() may only be called once per file; extension '{prev}' is already "
          "registered. Keep a single registration in the entrypoint. If this happened during "
          "an import, the entrypoint may be shadowing a package or module with the same name. "
          "Rename the entrypoint (e.g. demo.py -> demo_bridge.py) so imports resolve to the "
          "real module.")


def _file_key(depth: int):
    key = _CURRENT_FILE.get()
    if key is not None:
        return key
    frame_globals = sys._getframe(depth).f_globals
    return frame_globals.get("__file__") or frame_globals.get("__name__")


def register(extension) -> None:
    """Register this file's extension: resolve its declared ``env`` and store it."""
    if type(extension) is not Extension:
        raise TypeError("vis.register() takes a vis.Extension(...) declaration")
    key = _file_key(2)
    previous = _REGISTERED.get(key)
    if previous is not None:
        raise ValueError(_TWICE.format(prev=previous.name))
    for symbol in extension.symbols:  # build every spec once more; any failure aborts
        _ = symbol.spec
    # Inside the gateway the host is always asked: besides the declared names it answers the
    # names the project defines itself, which need no declaration.
    if extension.env or _host.get_bridge() is not None:
        _host.install_env(key, _host.declare_env(extension.env))
    _REGISTERED[key] = extension
    _host.set_owner(extension.name, key)


register_extension = register


def registered(key):
    """The extension registered by the file ``key`` (a path), or ``None``."""
    return _REGISTERED.get(key)


def forget(key) -> None:
    _REGISTERED.pop(key, None)


def reset() -> None:
    """Forget every registration (tests and full reloads)."""
    _REGISTERED.clear()


def spec_of(extension: Extension) -> dict:
    """The registration spec the host receives; callables are not sealed here."""
    return {
        "name": extension.name, "description": extension.description,
        "version": extension.version, "kind": extension.kind or "python",
        "alias": extension.alias, "activation": extension.activation,
        "symbols": [s.spec for s in extension.symbols], "prompt": extension.prompt,
        "slash_commands": [{"marker": "slash", "name": c.name, "run": c.run, "doc": c.doc,
                            "usage": c.usage} for c in extension.slash_commands],
        "op_hooks": [{"marker": "op_hook", "ops": list(h.ops), "fn": h.fn, "phase": h.phase}
                     for h in extension.op_hooks],
        "ctx": extension.ctx,
        "providers": [dict(p.to_wire(), marker="provider") for p in extension.providers],
        "network_filters": [{"marker": "network_filter", "fn": f.fn}
                            for f in extension.network_filters],
        "env": list(extension.env),
    }
