"""Tool contracts (docs/decisions.md, E3), their ``doc`` text and provider tool schemas
(docs/decisions.md, E9).

``callable_contract`` reads a function's signature and raw annotations,
never its default values (only ``default is None`` is checked).
``tool_schema`` turns a callable contract into a provider tool definition.
``bind_arguments`` is the inverse the worker uses when the model calls a tool.
"""

from __future__ import annotations

import __future__
import inspect
import sys
import types

from . import _types

VERSION = 1
_KIND_NAMES = {
    inspect.Parameter.POSITIONAL_ONLY: "positional_only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional_or_keyword",
    inspect.Parameter.VAR_POSITIONAL: "var_positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword_only",
    inspect.Parameter.VAR_KEYWORD: "var_keyword",
}
_DEFERRED = "deferred annotation; use from __future__ import annotations"
_FUTURE_FLAG = __future__.annotations.compiler_flag
_DEFERRED_ANNOTATIONS = sys.version_info >= (3, 14)  # PEP 649/749 lazy annotations


# -- reading a callable ----------------------------------------------------

def unwrap(fn):
    """Return ``(target, is_bound)``: the wrapped function and whether ``self`` is bound.

    Follows ``functools.wraps`` chains (stopping at an explicit ``__signature__``);
    a cyclic ``__wrapped__`` chain raises ``ValueError``.
    """
    bound = inspect.ismethod(fn)
    func = fn.__func__ if bound else fn
    try:
        target = inspect.unwrap(func, stop=lambda f: hasattr(f, "__signature__"))
    except ValueError as exc:
        name = getattr(func, "__qualname__", type(func).__name__)
        raise ValueError(f"vis.Symbol: cyclic __wrapped__ chain on {name}") from exc
    return target, bound


def _is_deferred(target) -> bool:
    """True on Python 3.14+ for functions compiled without postponed annotations."""
    if not _DEFERRED_ANNOTATIONS:
        return False
    code = getattr(target, "__code__", None)
    return code is not None and not (code.co_flags & _FUTURE_FLAG)


def read_signature(target):
    """``(inspect.Signature, deferred)`` without running deferred annotation code."""
    if _is_deferred(target) and isinstance(target, types.FunctionType):
        # Build the signature from a copy without annotations so that the
        # deferred ``__annotate__`` function is never run.
        clone = types.FunctionType(target.__code__, target.__globals__, target.__name__,
                                   target.__defaults__, target.__closure__)
        clone.__kwdefaults__ = target.__kwdefaults__
        clone.__annotations__ = {}
        return inspect.signature(clone, follow_wrapped=False), True
    try:
        return inspect.signature(target, follow_wrapped=False), False
    except (TypeError, ValueError) as exc:
        name = getattr(target, "__qualname__", type(target).__name__)
        raise ValueError(f"vis.Symbol: cannot read the signature of {name}: {exc}") from None


def callable_contract(fn, full_name: str, tag: str) -> dict:
    target, bound = unwrap(fn)
    sig, deferred = read_signature(target)
    params = list(sig.parameters.values())
    if bound and params and params[0].kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                   inspect.Parameter.VAR_KEYWORD):
        params = params[1:]
    namespace = getattr(target, "__globals__", {})

    def describe(annotation):
        if deferred:
            return _types.unresolved(_DEFERRED)
        return _types.describe(annotation, namespace)

    return {
        "version": VERSION,
        "name": full_name,
        "tag": tag,
        "description": inspect.getdoc(fn) or inspect.getdoc(target) or "",
        "signature": signature_text(params),
        "parameters": [_parameter(p, describe) for p in params],
        "returns": describe(sig.return_annotation),
    }


def _parameter(p: inspect.Parameter, describe) -> dict:
    variadic = p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    has_default = p.default is not inspect.Parameter.empty
    return {
        "name": p.name,
        "kind": _KIND_NAMES[p.kind],
        "required": not has_default and not variadic,
        "has_default": has_default,
        "default_is_none": has_default and p.default is None,
        "type": describe(p.annotation),
    }


def signature_text(params) -> str:
    """The bare signature (docs/decisions.md, E3): no annotations, non-None defaults shown as ``...``."""
    parts = []
    saw_star = False
    for i, p in enumerate(params):
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not saw_star:
            parts.append("*")
            saw_star = True
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            parts.append("*" + p.name)
            saw_star = True
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            parts.append("**" + p.name)
        elif p.default is inspect.Parameter.empty:
            parts.append(p.name)
        else:
            parts.append(p.name + ("=None" if p.default is None else "=..."))
        is_last_positional_only = p.kind is inspect.Parameter.POSITIONAL_ONLY and (
            i + 1 == len(params) or params[i + 1].kind is not inspect.Parameter.POSITIONAL_ONLY)
        if is_last_positional_only:
            parts.append("/")
    return ", ".join(parts)


def namespace_contract(name: str, member_contracts: list) -> dict:
    return {"version": VERSION, "name": name, "members": member_contracts}


# -- doc text ----------------------------------------------------------------

def type_text(t: dict) -> str:
    kind = t.get("kind")
    if kind in ("unresolved", "opaque"):
        return f"{t['name']} ({kind})"
    if kind == "literal":
        return "Literal[" + ", ".join(repr(v) for v in t.get("values", [])) + "]"
    if kind == "union":
        return " | ".join(type_text(a) for a in t.get("arguments", []))
    if kind == "generic":
        args = [type_text(a) for a in t.get("arguments", [])]
        if t.get("variadic"):
            args.append("...")
        return f"{t['name']}[{', '.join(args)}]" if args else t["name"]
    return t.get("name", "Any")


def _records_in(t: dict):
    """Records reachable from a type without entering another record."""
    if t.get("kind") == "record":
        yield t
    for arg in t.get("arguments", []):
        yield from _records_in(arg)


def _field_lines(t: dict, prefix: str, seen: tuple = ()) -> list:
    lines = []
    for record in _records_in(t):
        if record["name"] in seen:
            continue
        for f in record.get("fields", []):
            name = f"{prefix}{f['name']}"
            note = f" — {f['type']['description']}" if f["type"].get("description") else ""
            lines.append(f"- {name}: {type_text(f['type'])}{note}")
            lines.extend(_field_lines(f["type"], name + ".", seen + (record["name"],)))
    return lines


def _param_note(p: dict) -> str:
    if p["kind"] in ("var_positional", "var_keyword"):
        state = "variadic"
    elif p["required"]:
        state = "required"
    elif p["default_is_none"]:
        state = "default None"
    else:
        state = "default omitted"
    return f"({p['kind']}; {state})"


def render_doc(contract: dict) -> str:
    """Render a callable (or namespace) contract as ``doc()`` text."""
    if "members" in contract:
        return "\n\n".join(render_doc(m) for m in contract["members"])
    # The layout extension authors are promised: the description comes first; the
    # parameters below carry what the signature line would repeat.
    lines = [contract["description"], "", f"Effect: {contract['tag']}", ""]
    if contract["parameters"]:
        lines.append("Parameters:")
        for p in contract["parameters"]:
            note = f" — {p['type']['description']}" if p["type"].get("description") else ""
            lines.append(f"- {p['name']}: {type_text(p['type'])}{note} {_param_note(p)}")
            lines.extend(_field_lines(p["type"], p["name"] + "."))
    else:
        lines.append("Parameters: none")
    returns = contract["returns"]
    lines += ["", f"Returns: {type_text(returns)}"]
    if returns.get("description"):
        lines.append(returns["description"])
    lines.extend(_field_lines(returns, ""))
    return "\n".join(lines)


# -- provider tool schema (docs/decisions.md, E9) ------------------------------------------------

_JSON_SCALARS = {"str": "string", "int": "integer", "float": "number",
                 "bool": "boolean", "bytes": "string"}
_ARRAYS = {"list", "tuple", "set", "frozenset", "Sequence", "MutableSequence",
           "Set", "MutableSet", "AbstractSet", "Collection", "Iterable", "Iterator",
           "deque", "Generator"}
_OBJECTS = {"dict", "Mapping", "MutableMapping", "OrderedDict", "defaultdict", "Counter"}


def tool_name(full_name: str) -> str:
    return full_name.replace(".", "__")


def type_schema(t: dict) -> dict:
    """JSON Schema for one contract type."""
    schema = _type_schema(t)
    if t.get("description"):
        schema["description"] = t["description"]
    return schema


def _literal_type(values):
    kinds = set()
    for v in values:
        if v is None:
            kinds.add("null")
        elif isinstance(v, bool):
            kinds.add("boolean")
        elif isinstance(v, int):
            kinds.add("integer")
        else:
            kinds.add("string")
    if len(kinds) == 1:
        return kinds.pop()
    return sorted(kinds) if kinds else None


def _type_schema(t: dict) -> dict:
    kind, name = t.get("kind"), t.get("name")
    if kind == "scalar":
        return {"type": _JSON_SCALARS.get(name, "string")}
    if kind == "null":
        return {"type": "null"}
    if kind == "literal":
        out = {"enum": list(t.get("values", []))}
        json_type = _literal_type(out["enum"])
        if json_type:
            out["type"] = json_type
        return out
    if kind == "union":
        return _union_schema(t.get("arguments", []))
    if kind == "generic":
        return _generic_schema(t)
    if kind == "record":
        fields = t.get("fields", [])
        out = {"type": "object",
               "properties": {f["name"]: type_schema(f["type"]) for f in fields},
               "required": [f["name"] for f in fields if f["required"]]}
        if t.get("description"):
            out["description"] = t["description"]
        return out
    if kind == "reference":
        return {"type": "object", "description": f"{name} (recursive reference)"}
    if kind in ("opaque", "unresolved"):
        return {"description": f"{name} ({kind})"}
    return {}


def _union_schema(arguments) -> dict:
    nullable = any(a.get("kind") == "null" for a in arguments)
    rest = [type_schema(a) for a in arguments if a.get("kind") != "null"]
    if not rest:
        return {"type": "null"}
    if len(rest) == 1:
        only = rest[0]
        if not nullable:
            return only
        if isinstance(only.get("type"), str):
            only = dict(only, type=[only["type"], "null"])
            if "enum" in only and None not in only["enum"]:
                only["enum"] = only["enum"] + [None]
            return only
        return {"anyOf": [only, {"type": "null"}]}
    options = rest + ([{"type": "null"}] if nullable else [])
    return {"anyOf": options}


def _generic_schema(t: dict) -> dict:
    name, args = t.get("name"), t.get("arguments", [])
    if name in _OBJECTS:
        out = {"type": "object"}
        if len(args) == 2:
            out["additionalProperties"] = type_schema(args[1])
        return out
    if name in _ARRAYS:
        out = {"type": "array"}
        if name == "tuple" and args and not t.get("variadic"):
            out["prefixItems"] = [type_schema(a) for a in args]
            out["minItems"] = out["maxItems"] = len(args)
        elif args:
            out["items"] = type_schema(args[0])
        if name in ("set", "frozenset", "Set", "MutableSet", "AbstractSet"):
            out["uniqueItems"] = True
        return out
    return {"description": f"{type_text(t)} (opaque)"}


def tool_schema(contract: dict) -> dict:
    """Provider tool definition for one callable contract (docs/decisions.md, E9).

    ``{"name", "description", "parameters"}`` where ``parameters`` is a JSON
    Schema object with one property per parameter (positional-only and
    keyword-only alike).  ``*args`` becomes an array property under its own
    name; ``**kwargs`` allows additional properties of its value type.
    """
    if "members" in contract:
        raise ValueError("tool_schema takes a callable contract, not a namespace")
    properties, required = {}, []
    extra = False
    for p in contract["parameters"]:
        if p["kind"] == "var_keyword":
            extra = type_schema(p["type"]) if p["type"].get("kind") != "any" else True
            continue
        schema = type_schema(p["type"])
        if p["kind"] == "var_positional":
            schema = {"type": "array", "items": schema}
        properties[p["name"]] = schema
        if p["required"]:
            required.append(p["name"])
    parameters = {"type": "object", "properties": properties, "required": required,
                  "additionalProperties": extra}
    return {"name": tool_name(contract["name"]),
            "description": contract["description"],
            "parameters": parameters}


def bind_arguments(contract: dict, arguments: dict):
    """Split a tool call's named JSON arguments into ``(args, kwargs)`` for Python.

    Positional-only parameters are passed by position (in order), ``*args``
    from its array property, everything else by keyword.  Unknown names go to
    ``**kwargs`` when the function has one, else raise ``TypeError``.
    """
    if not isinstance(arguments, dict):
        raise TypeError("tool arguments must be a JSON object")
    params = contract["parameters"]
    remaining = dict(arguments)
    star = next((p["name"] for p in params if p["kind"] == "var_positional"), None)
    star_values = remaining.pop(star, []) if star else []
    if not isinstance(star_values, (list, tuple)):
        raise TypeError(f"argument '{star}' must be an array")
    args, kwargs = [], {}
    accepts_extra = False
    for index, p in enumerate(params):
        name, kind = p["name"], p["kind"]
        if kind in ("positional_only", "positional_or_keyword"):
            if name not in remaining:
                continue
            if kind == "positional_only" or star_values:
                if len(args) != index:
                    raise TypeError(f"argument '{name}' needs the positional arguments before it")
                args.append(remaining.pop(name))
            else:
                kwargs[name] = remaining.pop(name)
        elif kind == "var_positional":
            args.extend(star_values)
        elif kind == "keyword_only":
            if name in remaining:
                kwargs[name] = remaining.pop(name)
        else:
            accepts_extra = True
    if remaining:
        if not accepts_extra:
            raise TypeError("unexpected argument(s): " + ", ".join(sorted(remaining)))
        kwargs.update(remaining)
    return args, kwargs
