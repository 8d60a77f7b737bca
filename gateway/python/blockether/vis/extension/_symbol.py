"""``vis.Symbol`` and ``vis.method``: tools from functions and object namespaces (docs/extension-api.md, "Tools")."""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass, field

from . import _contract
from ._activity import Activity
from ._util import is_async_callable, is_blank

TAGS = ("observation", "mutation")
_TAG_ATTR, _HIDDEN_ATTR, _ACTIVITY_ATTR = ("__vis_symbol_tag__", "__vis_symbol_hidden__",
                                           "__vis_symbol_activity__")


@dataclass(frozen=True, slots=True)
class Member:
    """One callable tool of a Symbol: ``path`` is relative to the root, ``full_name`` is not."""

    path: str
    full_name: str
    fn: object
    tag: str
    is_hidden: bool
    activity: Activity | None

    @property
    def contract(self) -> dict:
        return _contract.callable_contract(self.fn, self.full_name, self.tag)

    def doc(self) -> str:
        return _contract.render_doc(self.contract)

    def tool_schema(self) -> dict:
        return _contract.tool_schema(self.contract)


def _check_tag(owner: str, tag):
    if tag not in TAGS:
        raise ValueError(f"{owner} tag must be 'observation' or 'mutation', got {tag!r}")


def _check_activity(owner: str, activity):
    if activity is not None and type(activity) is not Activity:
        raise TypeError(f"{owner} activity must be a vis.Activity or None")


def _fn_label(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(type(fn))


def _check_callable(fn, public_name: str):
    if is_async_callable(fn):
        raise TypeError(f"vis.Symbol: {_fn_label(fn)} is async; tool functions must be "
                        f"synchronous")
    if is_blank(inspect.getdoc(fn)):
        raise ValueError(f"vis.Symbol: {_fn_label(fn)} needs a docstring - it becomes the "
                         f"model-facing doc()")
    _contract.callable_contract(fn, public_name, "observation")  # signature, wrapper cycles


@dataclass(frozen=True, slots=True)
class Symbol:
    """A tool (function) or a namespace of tools (object) the model can call."""

    fn_or_object: object
    name: str | None = None
    tag: str = "observation"
    is_hidden: bool = False
    activity: Activity | None = None
    _members: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self):
        if type(self.is_hidden) is not bool:
            raise TypeError("vis.Symbol is_hidden must be a bool")
        target = self.fn_or_object
        if inspect.isroutine(target) or isinstance(target, (staticmethod, classmethod)):
            members = self._callable_members(target)
        else:
            members = self._namespace_members(target)
        object.__setattr__(self, "_members", members)

    def _callable_members(self, fn):
        if isinstance(fn, (staticmethod, classmethod)):
            fn = fn.__func__
        if not callable(fn):
            raise ValueError("vis.Symbol requires a callable or an object namespace")
        if is_async_callable(fn):
            raise TypeError(f"vis.Symbol: {_fn_label(fn)} is async; tool functions must be "
                            f"synchronous")
        public = self.name if self.name is not None else getattr(fn, "__name__", "")
        if not isinstance(public, str) or not public.isidentifier() or public.startswith("_"):
            raise ValueError(f"vis.Symbol name must be a public Python identifier, got {public!r}")
        _check_tag("vis.Symbol", self.tag)
        _check_callable(fn, public)
        _check_activity("vis.Symbol", self.activity)
        object.__setattr__(self, "name", public)
        return (Member("", public, fn, self.tag, self.is_hidden, self.activity),)

    def _namespace_members(self, obj):
        if self.activity is not None:
            raise ValueError("declare object Activity on each vis.method(), not its namespace")
        name = self.name
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise ValueError("vis.Symbol(object, ...) requires name=<public Python identifier>")
        _check_tag("vis.Symbol", self.tag)
        if _unsupported(obj):
            raise ValueError(f"vis.Symbol(object, ...) cannot export a value of type "
                             f"{type(obj).__name__} as '{name}'; pass a function or an object "
                             f"with public methods")
        members = []
        _walk(obj, name, "", {id(obj): name}, members, self)
        if not members:
            raise ValueError(f"vis.Symbol(object, ...) requires at least one public method "
                             f"(namespace '{name}')")
        return tuple(members)

    # -- derived data -----------------------------------------------------
    @property
    def members(self) -> tuple:
        """Every callable tool of this declaration, in order."""
        return self._members

    @property
    def is_namespace(self) -> bool:
        return not (len(self._members) == 1 and self._members[0].path == "")

    @property
    def contract(self) -> dict:
        """Fresh portable contract data."""
        if not self.is_namespace:
            return self._members[0].contract
        return _contract.namespace_contract(self.name, [m.contract for m in self._members])

    def doc(self) -> str:
        """The ``doc()`` text of this declaration (all members for a namespace)."""
        return _contract.render_doc(self.contract)

    @property
    def spec(self) -> dict:
        """The registration spec the host receives (callables unsealed)."""
        if self.is_namespace:
            return {"marker": "namespace", "name": self.name,
                    "methods": [_member_spec(m, m.path) for m in self._members]}
        return _member_spec(self._members[0], self.name)


def _member_spec(m: Member, name: str) -> dict:
    contract = m.contract
    target, bound = _contract.unwrap(m.fn)
    sig, _ = _contract.read_signature(target)
    params = list(sig.parameters.values())[1 if bound else 0:]
    out = {"marker": "symbol", "fn": m.fn, "name": name, "tag": m.tag, "hidden": m.is_hidden,
           "doc": _contract.render_doc(contract), "contract": contract,
           "params": [p.name for p in params if p.kind in (
               inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)],
           "varargs": any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)}
    if m.activity is not None:
        out["activity"] = m.activity.to_wire()
    return out


def _unsupported(value) -> bool:
    if isinstance(value, (type, types.ModuleType)):
        return True
    return type(value).__module__ == "builtins"


def _public_names(obj) -> list:
    names = []
    for klass in reversed(type(obj).__mro__):
        if klass is object:
            continue
        for n in vars(klass):
            if not n.startswith("_") and n not in names:
                names.append(n)
    for n in getattr(obj, "__dict__", {}):
        if not n.startswith("_") and n not in names:
            names.append(n)
    return names


def _walk(obj, root: str, prefix: str, seen: dict, out: list, symbol: Symbol):
    for attr in _public_names(obj):
        value = getattr(obj, attr)
        path = f"{prefix}{attr}"
        full = f"{root}.{path}"
        if callable(value) and not isinstance(value, type):
            if is_async_callable(value):
                raise TypeError(f"vis.Symbol: {_fn_label(value)} is async; tool functions "
                                f"must be synchronous")
            tag = getattr(value, _TAG_ATTR, symbol.tag)
            hidden = bool(getattr(value, _HIDDEN_ATTR, False)) or symbol.is_hidden
            _check_callable(value, full)
            out.append(Member(path, full, value, tag, hidden, getattr(value, _ACTIVITY_ATTR, None)))
            continue
        if _unsupported(value):
            raise ValueError(f"vis.Symbol(object, ...) public attribute '{full}' has unsupported "
                             f"value of type {type(value).__name__}; expose callable methods, "
                             f"nest a capability object, or make the attribute private")
        if id(value) in seen:
            raise ValueError(f"vis.Symbol(object, ...) attribute '{full}' repeats the object "
                             f"already exposed at '{seen[id(value)]}'; expose each object once")
        seen[id(value)] = full
        _walk(value, root, path + ".", seen, out, symbol)


def method(fn=None, /, *, tag="observation", is_hidden=False, activity=None):
    """Override tool metadata for one method; never changes its Python signature."""
    _check_tag("vis.method", tag)
    if type(is_hidden) is not bool:
        raise TypeError("vis.method is_hidden must be a bool")
    _check_activity("vis.method", activity)

    def apply(target):
        func = target.__func__ if isinstance(target, (staticmethod, classmethod)) else target
        if not callable(func):
            raise ValueError("vis.method must decorate a callable")
        setattr(func, _TAG_ATTR, tag)
        setattr(func, _HIDDEN_ATTR, is_hidden)
        setattr(func, _ACTIVITY_ATTR, activity)
        return target

    return apply if fn is None else apply(fn)
