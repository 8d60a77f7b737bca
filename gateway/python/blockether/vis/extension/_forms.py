"""``vis.ask``: typed forms shown to the human (docs/extension-api.md, "Asking the human"), builders and ``Answer``."""

from __future__ import annotations

import inspect
import re

from . import _host

FIELD_TYPES = ("plaintext", "password", "multiline", "select", "multiselect", "checkbox",
               "range", "otp")
_FIELD_KEYS = {"name", "id", "label", "description", "type", "placeholder", "default",
               "is_required", "min_length", "max_length", "options", "min", "max", "step",
               "validate"}
_GROUP_KEYS = {"type", "fields", "direction", "id", "name", "label", "description"}
_DECOR_KEYS = {"type", "text"}
_LAYOUT_KEYS = {"fields", "direction"}
_OPTIONS = {"description", "submit_label", "cancel_label", "is_cancellable", "timeout_ms",
            "source"}
_CAMEL = re.compile(r"(?<!^)([A-Z])")


def _snake(key: str) -> str:
    return _CAMEL.sub(r"_\1", key).replace("-", "_").lower()


def _check_keys(node: dict, allowed: set, where: str):
    for key in node:
        if not isinstance(key, str):
            raise ValueError(f"vis.ask {where}: keys must be strings")
        if key in allowed:
            continue
        snake = _snake(key)
        if snake != key and snake in _FIELD_KEYS | _GROUP_KEYS:
            raise ValueError(f"vis.ask {where}: key {key!r} must be spelled {snake!r} "
                             f"(snake_case)")
        if allowed is _FIELD_KEYS and key in _LAYOUT_KEYS:
            raise ValueError(f"vis.ask {where}: layout key {key!r} belongs on a group")
        if allowed is not _FIELD_KEYS and key in _FIELD_KEYS:
            raise ValueError(f"vis.ask {where}: value key {key!r} belongs on a field")
        raise ValueError(f"vis.ask {where}: unknown key {key!r}")


def _validators(value, where: str) -> list:
    fns = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for fn in fns:
        if not callable(fn):
            raise TypeError(f"vis.ask {where}: validate must be a function or a list of functions")
        arity = None
        try:
            sig = inspect.signature(fn)
            for n in (2, 1):
                try:
                    sig.bind(*([None] * n))
                    arity = n
                    break
                except TypeError:
                    continue
        except (TypeError, ValueError):
            arity = 1
        if arity is None:
            raise TypeError(f"vis.ask {where}: a validator must take (value) or "
                            f"(value, all_values)")
        out.append((fn, arity))
    return out


def _options(value, where: str) -> list:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"vis.ask {where}: options must be a non-empty list")
    out = []
    for item in value:
        if isinstance(item, dict) and "value" in item:
            out.append({"value": item["value"], "label": str(item.get("label") or item["value"])})
        elif isinstance(item, (str, int, float)) and not isinstance(item, bool):
            out.append({"value": item, "label": str(item)})
        else:
            raise ValueError(f"vis.ask {where}: an option is a value or {{'value', 'label'}}")
    return out


class _Form:
    """Validated form tree: wire nodes, field index and validators."""

    def __init__(self, nodes):
        if isinstance(nodes, dict) or not isinstance(nodes, (list, tuple)):
            raise TypeError("vis.ask fields must be a list of field nodes")
        self.fields = {}
        self.validators = {}
        self.wire = [self._node(n, f"fields[{i}]") for i, n in enumerate(nodes)]
        if not self.fields:
            raise ValueError("vis.ask needs at least one field")

    def _node(self, node, where):
        if not isinstance(node, dict):
            raise TypeError(f"vis.ask {where}: a node must be a dict (use the vis form builders)")
        kind = node.get("type")
        if kind == "group":
            _check_keys(node, _GROUP_KEYS, where)
            direction = node.get("direction", "column")
            if direction not in ("column", "row"):
                raise ValueError(f"vis.ask {where}: direction must be 'column' or 'row'")
            children = node.get("fields")
            if not isinstance(children, (list, tuple)):
                raise ValueError(f"vis.ask {where}: a group needs fields=[...]")
            wire = dict(node, direction=direction)
            wire["fields"] = [self._node(c, f"{where}.fields[{i}]") for i, c in enumerate(children)]
            return wire
        if kind in ("heading", "paragraph"):
            _check_keys(node, _DECOR_KEYS, where)
            if not isinstance(node.get("text"), str):
                raise ValueError(f"vis.ask {where}: {kind} needs text")
            return dict(node)
        if kind not in FIELD_TYPES:
            raise ValueError(f"vis.ask {where}: unknown field type {kind!r}")
        _check_keys(node, _FIELD_KEYS, where)
        return self._field(node, kind, where)

    def _field(self, node, kind, where):
        name = node.get("name", node.get("id"))
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"vis.ask {where}: a field needs name=<non-empty string>")
        if name in self.fields:
            raise ValueError(f"vis.ask {where}: field name {name!r} is used twice")
        wire = {k: v for k, v in node.items() if k != "validate"}
        wire.update(id=name, name=name, label=node.get("label") or name,
                    is_required=bool(node.get("is_required", False)))
        if kind in ("select", "multiselect"):
            wire["options"] = _options(node.get("options"), where)
        if kind == "range":
            for key, default in (("min", 0), ("max", 100), ("step", 1)):
                value = wire.setdefault(key, default)
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"vis.ask {where}: {key} must be a number")
        if kind == "otp":
            for key in ("min_length", "max_length"):
                value = wire.setdefault(key, 6)
                if type(value) is not int or not 1 <= value <= 12:
                    raise ValueError(f"vis.ask {where}: {key} must be an int from 1 to 12")
        if "validate" in node and node["validate"] is not None:
            self.validators[name] = _validators(node["validate"], where)
        self.fields[name] = wire
        return wire

    def run_validator(self, name, value, all_values):
        """First error message of a field's validators, or ``None``; blanks are not checked."""
        if value is None or value == "" or value == []:
            return None
        for fn, arity in self.validators.get(name, []):
            try:
                verdict = fn(value, all_values) if arity == 2 else fn(value)
            except Exception as exc:
                return f"could not be validated: {exc}"
            if verdict is None or verdict is True:
                continue
            if verdict is False:
                return "is not valid"
            return str(verdict)
        return None

    def coerce(self, values) -> dict:
        out = {}
        values = values if isinstance(values, dict) else {}
        for name, f in self.fields.items():
            value = values.get(name)
            kind = f["type"]
            if kind == "checkbox":
                value = bool(value)
            elif kind == "multiselect":
                chosen = value if isinstance(value, (list, tuple)) else []
                value = [o["value"] for o in f["options"] if o["value"] in chosen]
            elif kind == "range" and isinstance(value, (int, float)) and not isinstance(value, bool):
                numbers = [f["min"], f["max"], f["step"], value]
                value = int(value) if all(float(n).is_integer() for n in numbers) else float(value)
            out[name] = value
        return out


class Answer:
    """The human's answer: truthy when submitted; ``values`` holds every field."""

    __slots__ = ("is_submitted", "reason", "request_id", "values")

    def __init__(self, is_submitted=False, values=None, reason="cancelled", request_id=None):
        self.is_submitted = bool(is_submitted)
        self.values = dict(values or {})
        self.reason = None if self.is_submitted else (reason or "cancelled")
        self.request_id = request_id

    def __bool__(self):
        return self.is_submitted

    def __contains__(self, name):
        return name in self.values

    def __getitem__(self, name):
        return self.values[name]

    def get(self, name, default=None):
        return self.values.get(name, default)

    def reveal(self, name):
        """Plaintext of a password/otp field (its value is a secret handle)."""
        return _host.reveal(self.values.get(name))

    def __repr__(self):
        state = "submitted" if self.is_submitted else f"reason={self.reason!r}"
        return f"Answer({state}, fields={sorted(self.values)})"


def ask(title, fields, **options) -> Answer:
    """Show a typed form and wait for the human; never raises for a refusal."""
    if not isinstance(title, str) or not title.strip():
        raise ValueError("vis.ask requires a non-empty title")
    for key in options:
        if key not in _OPTIONS:
            raise TypeError(f"vis.ask got an unknown option {key!r}")
    if "timeout_ms" in options and (type(options["timeout_ms"]) is not int
                                    or options["timeout_ms"] < 0):
        raise ValueError("vis.ask timeout_ms must be an int >= 0 (0 waits forever)")
    form = _Form(fields)
    request = dict(options, title=title, fields=form.wire)
    arities = {name: [a for _, a in fns] for name, fns in form.validators.items()}
    reply = _host.call("request_input", {"request": request, "validators": arities,
                                         "run_validator": form.run_validator})
    reply = reply if isinstance(reply, dict) else {}
    submitted = reply.get("status") == "submitted"
    return Answer(submitted, form.coerce(reply.get("values")) if submitted else {},
                  reply.get("reason") or reply.get("status") or "cancelled",
                  reply.get("request_id"))


# -- builders (pure dicts; extra keywords pass through verbatim) -----------------

def _field_builder(kind):
    def build(name, label=None, **extra):
        node = {"type": kind, "name": name}
        if label is not None:
            node["label"] = label
        node.update(extra)
        return node
    build.__name__ = build.__qualname__ = kind
    build.__doc__ = f"A {kind} form field."
    return build


plaintext = _field_builder("plaintext")
password = _field_builder("password")
multiline = _field_builder("multiline")
checkbox = _field_builder("checkbox")
slider = _field_builder("range")
slider.__name__ = slider.__qualname__ = "slider"
otp = _field_builder("otp")


def select(name, options, label=None, **extra):
    """One value out of ``options``."""
    return dict(_field_builder("select")(name, label, **extra), options=list(options))


def multiselect(name, options, label=None, **extra):
    """Several values out of ``options`` (answered in declaration order)."""
    return dict(_field_builder("multiselect")(name, label, **extra), options=list(options))


def option(value, label=None):
    return {"value": value, "label": label if label is not None else str(value)}


def _group(direction, nodes, extra):
    node = {"type": "group", "direction": direction}
    if nodes and isinstance(nodes[0], str):
        node["id"], nodes = nodes[0], nodes[1:]
    node["fields"] = list(nodes)
    node.update(extra)
    return node


def row(*nodes, **extra):
    """A horizontal group; a leading string is the group id."""
    return _group("row", nodes, extra)


def column(*nodes, **extra):
    """A vertical group; a leading string is the group id."""
    return _group("column", nodes, extra)


def heading(text):
    return {"type": "heading", "text": text}


def paragraph(text):
    return {"type": "paragraph", "text": text}
