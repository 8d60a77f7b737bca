"""Loading entry files in a worker and describing what they registered (docs/decisions.md, E7).

``load_file(path)`` executes one entry file with postponed annotations in a
fresh module ``vis_ext_<seq>_<label>`` and returns a :class:`LoadResult`.
``catalog(extension)`` returns JSON-able data describing the registration.
"""

from __future__ import annotations

import __future__
import contextvars
import itertools
import os
import re
import sys
import traceback
import types
from dataclasses import dataclass

from . import _host, _registry

_SEQ = itertools.count(1)


@dataclass(frozen=True, slots=True)
class LoadError:
    file: str
    type: str
    message: str
    traceback: str

    def to_dict(self) -> dict:
        return {"file": self.file, "type": self.type, "message": self.message,
                "traceback": self.traceback}


@dataclass(frozen=True, slots=True)
class LoadResult:
    file: str
    module_name: str
    extension: object = None
    error: LoadError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _error(file: str, exc: BaseException) -> LoadError:
    tb = traceback.TracebackException.from_exception(exc)
    tb.stack = traceback.StackSummary.from_list(
        [f for f in tb.stack if f.filename != __file__])
    text = "".join(tb.format())
    return LoadError(file, type(exc).__name__, f"{type(exc).__name__}: {exc}", text)


def _label(path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem == "extension":
        stem = os.path.basename(os.path.dirname(path)) or stem
    return re.sub(r"\W", "_", stem)


def load_file(path, *, module_name=None) -> LoadResult:
    """Execute an entry file and capture its registration or its failure."""
    file = os.path.realpath(os.fspath(path))
    name = module_name or f"vis_ext_{next(_SEQ)}_{_label(file)}"
    module = types.ModuleType(name)
    module.__file__ = file
    module.__cached__ = None
    folder = os.path.dirname(file)
    _registry.forget(file)

    def run():
        _registry._CURRENT_FILE.set(file)
        _host.set_owner(None)
        with open(file, "rb") as handle:
            source = handle.read()
        code = compile(source, file, "exec", flags=__future__.annotations.compiler_flag,
                       dont_inherit=True)
        sys.modules[name] = module
        if folder not in sys.path:
            sys.path.insert(0, folder)
        exec(code, module.__dict__)

    try:
        contextvars.copy_context().run(run)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        _registry.forget(file)
        return LoadResult(file, name, None, _error(file, exc))
    extension = _registry.registered(file)
    if extension is None:
        sys.modules.pop(name, None)
        message = f"{file} never called vis.register(vis.Extension(...))"
        return LoadResult(file, name, None, LoadError(file, "NoRegistration", message, ""))
    return LoadResult(file, name, extension)


def _member_entry(member) -> dict:
    contract = member.contract
    return {"name": member.full_name, "tag": member.tag, "is_hidden": member.is_hidden,
            "contract": contract, "doc": member.doc(), "tool": member.tool_schema(),
            "activity": member.activity.to_wire() if member.activity is not None else None}


def catalog(extension) -> dict:
    """JSON-able description of a registered extension (no callables)."""
    prompt = extension.prompt
    return {
        "name": extension.name,
        "description": extension.description,
        "version": extension.version,
        "kind": extension.kind or "python",
        "alias": extension.alias,
        "env": list(extension.env),
        "prompt": prompt if isinstance(prompt, str) else None,
        "has_prompt_fn": callable(prompt),
        "has_activation": extension.activation is not None,
        "has_ctx": extension.ctx is not None,
        "symbols": [{"name": s.name, "is_namespace": s.is_namespace, "contract": s.contract,
                     "members": [_member_entry(m) for m in s.members]}
                    for s in extension.symbols],
        "tools": [_member_entry(m)["tool"] for m in extension.members if not m.is_hidden],
        "slash_commands": [{"name": c.name, "doc": c.doc, "usage": c.usage}
                           for c in extension.slash_commands],
        "op_hooks": [{"ops": list(h.ops), "phase": h.phase, "is_gate": h.is_gate}
                     for h in extension.op_hooks],
        "network_filters": [{"index": i} for i, _ in enumerate(extension.network_filters)],
        "providers": [p.to_wire() for p in extension.providers],
    }
