"""Helpers the worker uses to call into a registered extension: tools, slash commands, hooks, per-turn callables."""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import math
import re
import traceback

from . import _contract
from ._activity import ActivityPresentation, publish_activity


def find_member(extension, name: str):
    """The tool named ``name`` (full dotted name or its provider tool name)."""
    for member in extension.members:
        if name in (member.full_name, _contract.tool_name(member.full_name)):
            return member
    raise LookupError(f"extension '{extension.name}' has no tool {name!r}")


def _present(render, **kwargs) -> None:
    try:
        presentation = render(**kwargs)
        if isinstance(presentation, ActivityPresentation):
            publish_activity(presentation)
    except Exception:
        pass  # presentation errors never change a tool's result


def invoke(member, args=(), kwargs=None):
    """Call a tool with its activity ``render`` phases (start, success or failure)."""
    kwargs = dict(kwargs or {})
    render = member.activity.render if member.activity is not None else None
    if render is not None and member.activity.show_start:
        _present(render, phase="start", args=tuple(args), kwargs=kwargs, result=None, error=None)
    try:
        result = member.fn(*args, **kwargs)
    except BaseException as exc:
        if render is not None:
            _present(render, phase="failure", args=tuple(args), kwargs=kwargs, result=None,
                     error=exc)
        raise
    if render is not None:
        _present(render, phase="success", args=tuple(args), kwargs=kwargs, result=result,
                 error=None)
    return result


def call_tool(extension, name: str, arguments: dict):
    """Bind a provider tool call's JSON arguments and invoke the tool."""
    member = find_member(extension, name)
    args, kwargs = _contract.bind_arguments(member.contract, arguments)
    return invoke(member, args, kwargs)


def slash_result(value, extension_name: str) -> dict:
    """Normalize what a slash command's ``run`` returned (docs/extension-api.md, "Slash commands")."""
    if isinstance(value, dict) and value.get("marker") == "slash_result":
        out = {"status": value.get("status", "ok"), "title": str(value.get("title", ""))}
        if isinstance(value.get("body"), str):
            out["body"] = value["body"]
        if value.get("data") is not None:
            out["data"] = to_portable(value["data"], _where="the slash command's data")
        return out
    if value is None:
        return {"status": "ok", "title": f"{extension_name}: done"}
    return {"status": "ok", "title": value if isinstance(value, str) else str(value)}


def is_block(value) -> bool:
    """True only for ``vis.block(reason)``; anything else allows."""
    return isinstance(value, dict) and value.get("marker") == "block"


# -- discovery over registered extensions (the built-in apropos and doc, docs/decisions.md E9) ------------------------

def _public_members(extensions):
    for extension in extensions:
        for member in extension.members:
            if not member.is_hidden:
                yield member


def apropos(extensions, pattern: str) -> list:
    """Compact catalog of public tools whose full name matches ``pattern`` (``re.search``)."""
    regex = re.compile(pattern)
    hits = []
    for member in _public_members(extensions):
        if regex.search(member.full_name):
            contract = member.contract
            hits.append({"name": member.full_name, "tag": member.tag,
                         "signature": contract["signature"],
                         "summary": contract["description"].splitlines()[0]})
    return hits


def doc(extensions, name_or_hit) -> str:
    """The complete ``doc()`` text of one public tool, by name or by an ``apropos`` hit."""
    name = name_or_hit.get("name") if isinstance(name_or_hit, dict) else name_or_hit
    for member in _public_members(extensions):
        if member.full_name == name:
            return member.doc()
    raise LookupError(f"no public tool named {name!r}; search with apropos(pattern)")


# -- crossing the worker boundary ---------------------------------------------

def _not_finite(value, where: str) -> ValueError:
    return ValueError(f"{where} is {value!r}, which JSON cannot carry (no NaN or infinity); "
                      f"return None, a string or a finite number instead")


def to_portable(value, _path=(), _where="the result"):
    """A tool result as JSON data; objects become ``__vis_object__`` records. A NaN or an
    infinity is refused, naming where it is (``the result['stats'][0]``)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _not_finite(value, _where)
        return value
    if isinstance(value, enum.Enum):
        return to_portable(value.value, _path, _where)
    if isinstance(value, (bytes, bytearray)):
        return {"__vis_bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if any(value is seen for seen in _path):
        raise ValueError("a tool result refers to itself; results must be trees of data")
    path = _path + (value,)
    if isinstance(value, dict):
        return {str(k): to_portable(v, path, f"{_where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_portable(v, path, f"{_where}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        attrs = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)
                 if not f.name.startswith("_")}
    elif hasattr(value, "__dict__") and not callable(value):
        attrs = {k: v for k, v in vars(value).items()
                 if not k.startswith("_") and not callable(v)}
    else:
        raise TypeError(f"a tool result of type {type(value).__name__} cannot cross to the "
                        f"sandbox; return data, a dataclass or a plain object")
    return {"__vis_object__": type(value).__name__,
            "__vis_attrs__": {k: to_portable(v, path, f"{_where}.{k}")
                              for k, v in attrs.items()}}


def find_not_finite(value, where: str = "the result"):
    """The first NaN or infinity in plain JSON-like data, as a ``ValueError`` naming where
    it is, or ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return _not_finite(value, where)
    if isinstance(value, dict):
        items = ((f"{where}[{k!r}]", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for inner, item in items:
        found = find_not_finite(item, inner)
        if found is not None:
            return found
    return None


class Sealer:
    """Replaces callables in a registration spec with ``{"__vis_callable__": "c<n>"}``."""

    def __init__(self):
        self.table = {}
        self._ids = {}

    def seal(self, value):
        if callable(value) and not isinstance(value, type):
            cid = self._ids.get(id(value))
            if cid is None:
                cid = f"c{len(self.table) + 1}"
                self._ids[id(value)] = cid
                self.table[cid] = value
            return {"__vis_callable__": cid}
        if isinstance(value, dict):
            return {k: self.seal(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.seal(v) for v in value]
        return value

    def call(self, cid: str, args_json: str, kwargs_json: str) -> str:
        """``__vis_call__``: call a sealed callable with JSON arguments, answer a JSON envelope.

        ``{"ok": true, "value": <portable result>}`` or ``{"ok": false, "error":
        "ClassName: message", "type": "ClassName", "traceback": "..."}``.
        """
        try:
            fn = self.table[cid]
            args = json.loads(args_json) if args_json else []
            kwargs = json.loads(kwargs_json) if kwargs_json else {}
            value = to_portable(fn(*args, **kwargs))
            return json.dumps({"ok": True, "value": value})
        except Exception as exc:
            return json.dumps({"ok": False, "type": type(exc).__name__,
                               "error": f"{type(exc).__name__}: {exc}",
                               "traceback": traceback.format_exc()})
