"""Static resolution of annotations into the contract type vocabulary (docs/extension-api.md, "Tool contracts").

Nothing here evaluates an annotation expression, imports a module, calls a
default factory or calls ``repr()`` on a default.  String annotations (the
normal case, since entry files run with postponed annotations) are parsed
with :mod:`ast` and their names are looked up in a namespace dictionary.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import inspect
import sys
import types
import typing

_MISSING = object()
_SCALARS = {str: "str", int: "int", float: "float", bool: "bool", bytes: "bytes"}
_BARE_CONTAINERS = (list, dict, tuple, set, frozenset)
_UNION_ORIGINS = (typing.Union, types.UnionType)
_WRAPPER_FORMS = tuple(f for f in (getattr(typing, "Required", None),
                                   getattr(typing, "NotRequired", None),
                                   getattr(typing, "ClassVar", None),
                                   getattr(typing, "Final", None)) if f is not None)

ANY = {"kind": "any", "name": "Any"}
NULL = {"kind": "null", "name": "None"}


def unresolved(text: str) -> dict:
    return {"kind": "unresolved", "name": text}


def describe(annotation, namespace: dict, path: tuple = ()) -> dict:
    """Describe one annotation object or string, resolving names in ``namespace``."""
    return _Resolver(namespace).obj(annotation, path)


class _Resolver:
    def __init__(self, namespace: dict):
        self.ns = namespace if isinstance(namespace, dict) else {}

    # -- runtime annotation objects -------------------------------------
    def obj(self, ann, path: tuple) -> dict:
        if ann is inspect.Parameter.empty or ann is typing.Any:
            return dict(ANY)
        if ann is None or ann is type(None):
            return dict(NULL)
        if isinstance(ann, str):
            return self.text(ann, path)
        if isinstance(ann, typing.ForwardRef):
            return self.text(ann.__forward_arg__, path)
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            return _annotated(self.obj(ann.__origin__, path), ann.__metadata__)
        if origin in _UNION_ORIGINS:
            return _union([self.obj(a, path) for a in typing.get_args(ann)])
        if origin is typing.Literal:
            return _literal(typing.get_args(ann))
        if origin in _WRAPPER_FORMS:
            args = typing.get_args(ann)
            return self.obj(args[0], path) if args else dict(ANY)
        if origin is not None:
            args = typing.get_args(ann)
            if not args:
                return {"kind": "generic", "name": _origin_name(origin) or repr(origin)}
            if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
                return _generic("tuple", [self.obj(args[0], path)], variadic=True)
            return _generic(_origin_name(origin), [self.obj(a, path) for a in args])
        if isinstance(ann, type):
            return self.cls(ann, path)
        if isinstance(ann, typing.NewType):
            return self.obj(ann.__supertype__, path)
        return unresolved(type(ann).__name__)

    def cls(self, cls: type, path: tuple) -> dict:
        if cls in _SCALARS:
            return {"kind": "scalar", "name": _SCALARS[cls]}
        if cls in _BARE_CONTAINERS or cls.__module__ == "collections.abc":
            return {"kind": "generic", "name": cls.__name__}
        fields = _record_fields(cls)
        if fields is None:
            return {"kind": "opaque", "name": cls.__name__}
        if cls in path:
            return {"kind": "reference", "name": cls.__name__}
        inner = path + (cls,)
        module = sys.modules.get(getattr(cls, "__module__", ""), None)
        resolver = _Resolver(vars(module) if module is not None else {})
        out = {"kind": "record", "name": cls.__name__}
        doc = _class_doc(cls)
        if doc:
            out["description"] = doc
        out["fields"] = [
            {"name": name, "type": resolver.obj(ann, inner), "required": required,
             "has_default": has_default, "default_is_none": is_none}
            for name, ann, required, has_default, is_none in fields
        ]
        return out

    # -- string annotations ---------------------------------------------
    def text(self, source: str, path: tuple) -> dict:
        try:
            tree = ast.parse(source.strip(), mode="eval")
        except SyntaxError:
            return unresolved(source)
        return self.node(tree.body, path)

    def node(self, node: ast.AST, path: tuple) -> dict:
        if isinstance(node, ast.Constant):
            if node.value is None:
                return dict(NULL)
            if isinstance(node.value, str):
                return self.text(node.value, path)
            return unresolved(ast.unparse(node))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return _union([self.node(node.left, path), self.node(node.right, path)])
        if isinstance(node, (ast.Name, ast.Attribute)):
            value = self.lookup(node)
            if value is _MISSING:
                return unresolved(ast.unparse(node))
            if isinstance(value, str):
                key = ("alias", ast.unparse(node))
                if key in path:
                    return {"kind": "reference", "name": ast.unparse(node)}
                return self.text(value, path + (key,))
            return self.obj(value, path)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, path)
        return unresolved(ast.unparse(node))

    def subscript(self, node: ast.Subscript, path: tuple) -> dict:
        origin = self.lookup(node.value)
        if origin is _MISSING or isinstance(origin, str):
            return unresolved(ast.unparse(node))
        items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if origin is typing.Annotated:
            meta = [i.value for i in items[1:] if isinstance(i, ast.Constant)]
            return _annotated(self.node(items[0], path), meta)
        if origin is typing.Union:
            return _union([self.node(i, path) for i in items])
        if origin is typing.Optional:
            return _union([self.node(items[0], path), dict(NULL)])
        if origin is typing.Literal:
            return _literal([i.value for i in items if isinstance(i, ast.Constant)])
        if origin in _WRAPPER_FORMS:
            return self.node(items[0], path)
        base = typing.get_origin(origin) or origin
        name = _origin_name(base)
        if name is None:
            return unresolved(ast.unparse(node))
        if base is tuple and len(items) == 2 and _is_ellipsis(items[1]):
            return _generic("tuple", [self.node(items[0], path)], variadic=True)
        return _generic(name, [self.node(i, path) for i in items])

    def is_required(self, ann, default: bool) -> bool:
        """TypedDict ``Required[...]``/``NotRequired[...]`` written as a string annotation."""
        text = ann.__forward_arg__ if isinstance(ann, typing.ForwardRef) else ann
        if not isinstance(text, str):
            return default
        try:
            node = ast.parse(text.strip(), mode="eval").body
        except SyntaxError:
            return default
        if isinstance(node, ast.Subscript):
            origin = self.lookup(node.value)
            if origin is getattr(typing, "NotRequired", _MISSING):
                return False
            if origin is getattr(typing, "Required", _MISSING):
                return True
        return default

    def lookup(self, node: ast.AST):
        """Resolve a Name or dotted Attribute without running code."""
        if isinstance(node, ast.Name):
            if node.id in self.ns:
                return self.ns[node.id]
            return vars(builtins).get(node.id, _MISSING)
        if isinstance(node, ast.Attribute):
            base = self.lookup(node.value)
            if isinstance(base, types.ModuleType):
                return vars(base).get(node.attr, _MISSING)
            if isinstance(base, type):
                for klass in base.__mro__:
                    if node.attr in vars(klass):
                        return vars(klass)[node.attr]
        return _MISSING


def _is_ellipsis(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def _origin_name(origin):
    name = getattr(origin, "__name__", None)
    if name is None:
        name = getattr(origin, "_name", None)
    return name if isinstance(name, str) else None


def _generic(name: str, arguments: list, variadic: bool = False) -> dict:
    out = {"kind": "generic", "name": name, "arguments": arguments}
    if variadic:
        out["variadic"] = True
    return out


def _union(parts: list) -> dict:
    flat = []
    for part in parts:
        for item in (part["arguments"] if part.get("kind") == "union" else [part]):
            if item not in flat:
                flat.append(item)
    return {"kind": "union", "name": "union", "arguments": flat}


def _literal(values) -> dict:
    kept = [v for v in values if v is None or isinstance(v, (str, int, bool))]
    return {"kind": "literal", "name": "Literal", "values": kept}


def _annotated(base: dict, metadata) -> dict:
    texts = [m for m in metadata if isinstance(m, str)]
    if not texts:
        return base
    return dict(base, description="\n".join(texts))


def _class_doc(cls: type):
    doc = vars(cls).get("__doc__")
    if not isinstance(doc, str) or not doc.strip():
        return None
    if doc.startswith(cls.__name__ + "("):  # the generated dataclass/namedtuple doc
        return None
    return inspect.cleandoc(doc)


def _record_fields(cls: type):
    """(name, annotation, required, has_default, default_is_none) per public field."""
    if dataclasses.is_dataclass(cls):
        out = []
        for f in dataclasses.fields(cls):
            if f.name.startswith("_"):
                continue
            no_default = f.default is dataclasses.MISSING
            no_factory = f.default_factory is dataclasses.MISSING
            required = no_default and no_factory
            out.append((f.name, f.type, required, not required, f.default is None))
        return out
    annotations = vars(cls).get("__annotations__", {})
    if typing.is_typeddict(cls):
        required_keys = getattr(cls, "__required_keys__", frozenset())
        all_annotations = {}
        for klass in reversed(cls.__mro__):
            all_annotations.update(vars(klass).get("__annotations__", {}))
        module = sys.modules.get(getattr(cls, "__module__", ""), None)
        resolver = _Resolver(vars(module) if module is not None else {})
        return [(n, a, resolver.is_required(a, n in required_keys), False, False)
                for n, a in all_annotations.items() if not n.startswith("_")]
    if issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple):
        defaults = getattr(cls, "_field_defaults", {})
        return [(n, annotations.get(n, inspect.Parameter.empty), n not in defaults,
                 n in defaults, n in defaults and defaults[n] is None)
                for n in cls._fields if not n.startswith("_")]
    return None
