"""Declarations (``Extension``, ``SlashCommand``, ``OpHook``, ``NetworkFilter``) and
result values (``ok``, ``err``, ``block``, ``strings_of``) (docs/extension-api.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._provider import Provider
from ._symbol import Symbol
from ._util import is_blank, require_sync

GATE_OPS = ("fs_access",)
PHASES = ("before", "after")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True, slots=True)
class SlashCommand:
    """A ``/name`` command for the user; ``run(ctx)`` returns ok/err, a string or None."""

    name: str
    run: object
    doc: str | None = None
    usage: str | None = None

    def __post_init__(self):
        if is_blank(self.name):
            raise ValueError("vis.SlashCommand requires name=<non-empty string>")
        require_sync("vis.SlashCommand", "run", self.run, optional=False)
        for key in ("doc", "usage"):
            if getattr(self, key) is not None and not isinstance(getattr(self, key), str):
                raise TypeError(f"vis.SlashCommand {key} must be a string or None")


@dataclass(frozen=True, slots=True)
class OpHook:
    """A guard (``before``) or observer (``after``) over named ops, or the ``fs_access`` gate."""

    ops: tuple
    fn: object
    phase: str = "before"

    def __post_init__(self):
        if self.phase not in PHASES:
            raise ValueError(f"vis.OpHook phase must be 'before' or 'after', got {self.phase!r}")
        require_sync("vis.OpHook", "fn", self.fn, optional=False)
        ops = self.ops
        if not isinstance(ops, (list, tuple)) or not ops or any(is_blank(o) for o in ops):
            raise ValueError("vis.OpHook ops must be a non-empty list or tuple of op names "
                             "(a bare string is not accepted)")
        gates = [o for o in ops if o in GATE_OPS]
        if gates and len(gates) != len(ops):
            raise ValueError("vis.OpHook cannot mix the gate op 'fs_access' with tool ops; "
                             "declare a separate OpHook for it")
        if gates and self.phase == "after":
            raise ValueError("vis.OpHook gate op 'fs_access' takes no phase; it always runs "
                             "before the access")
        object.__setattr__(self, "ops", tuple(ops))

    @property
    def is_gate(self) -> bool:
        return self.ops[0] in GATE_OPS


@dataclass(frozen=True, slots=True)
class NetworkFilter:
    """``fn(ctx)`` returns ``vis.block(reason)`` to deny an egress request or response."""

    fn: object

    def __post_init__(self):
        require_sync("vis.NetworkFilter", "fn", self.fn, optional=False)


_COLLECTIONS = (("symbols", Symbol), ("slash_commands", SlashCommand), ("op_hooks", OpHook),
                ("network_filters", NetworkFilter), ("providers", Provider))


@dataclass(frozen=True, slots=True, kw_only=True)
class Extension:
    """One extension: call ``vis.register(vis.Extension(...))`` once per entry file."""

    name: str
    description: str
    alias: str | None = None
    symbols: tuple = ()
    prompt: object = None
    activation: object = None
    slash_commands: tuple = ()
    op_hooks: tuple = ()
    network_filters: tuple = ()
    providers: tuple = ()
    ctx: object = None
    env: tuple = ()
    kind: str | None = None
    version: str | None = None

    def __post_init__(self):
        owner = "vis.Extension"
        if is_blank(self.name):
            raise ValueError(f"{owner} requires name=<non-empty string>")
        if is_blank(self.description):
            raise ValueError(f"{owner} requires description=<non-empty string>")
        if self.alias is not None and not isinstance(self.alias, str):
            raise TypeError(f"{owner} alias must be a string")
        if self.symbols and is_blank(self.alias):
            raise ValueError(f"{owner} requires alias=<string> when symbols are declared")
        for key, cls in _COLLECTIONS:
            value = getattr(self, key)
            if not isinstance(value, (list, tuple)) or any(type(v) is not cls for v in value):
                raise TypeError(f"{owner} {key} must contain {cls.__name__} declarations")
            object.__setattr__(self, key, tuple(value))
        if self.prompt is not None and not isinstance(self.prompt, str):
            if not callable(self.prompt):
                raise TypeError(f"{owner} prompt must be a string, a callable or None")
            require_sync(owner, "prompt", self.prompt)
        require_sync(owner, "activation", self.activation)
        require_sync(owner, "ctx", self.ctx)
        if not isinstance(self.env, (list, tuple)):
            raise ValueError(f"{owner} env must be a list or tuple of environment variable names")
        for entry in self.env:
            if not isinstance(entry, str) or not _ENV_NAME.match(entry):
                raise ValueError(f"{owner} env entry {entry!r} is not an environment variable "
                                 f"name ([A-Za-z_][A-Za-z0-9_]*)")
        object.__setattr__(self, "env", tuple(self.env))
        for key in ("kind", "version"):
            if getattr(self, key) is not None and not isinstance(getattr(self, key), str):
                raise TypeError(f"{owner} {key} must be a string or None")
        self._check_unique()

    def _check_unique(self):
        seen = set()
        for symbol in self.symbols:
            for member in symbol.members:
                if member.full_name in seen:
                    raise ValueError(f"vis.Extension declares the tool '{member.full_name}' "
                                     f"more than once")
                seen.add(member.full_name)
        names = [s.name for s in self.slash_commands]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"vis.Extension declares the slash command '{name}' "
                                 f"more than once")

    @property
    def members(self) -> tuple:
        """Every callable tool of every Symbol, in declaration order."""
        return tuple(m for s in self.symbols for m in s.members)


def ok(title, body=None, data=None) -> dict:
    """A successful slash-command result; ``body`` is Markdown."""
    return {"marker": "slash_result", "status": "ok", "title": str(title), "body": body,
            "data": data}


def err(title, body=None, data=None) -> dict:
    """A failed slash-command result; ``body`` is Markdown."""
    return {"marker": "slash_result", "status": "error", "title": str(title), "body": body,
            "data": data}


def block(reason) -> dict:
    """The only deny value for op hooks, the ``fs_access`` gate and network filters."""
    return {"marker": "block", "reason": str(reason)}


def strings_of(value) -> list:
    """Every string leaf of a nested structure, depth first (dict keys included)."""
    out = []

    def visit(item):
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for key, val in item.items():
                visit(key)
                visit(val)
        elif isinstance(item, (set, frozenset)):
            for val in sorted(item, key=repr):
                visit(val)
        elif isinstance(item, (list, tuple)):
            for val in item:
                visit(val)

    visit(value)
    return out
