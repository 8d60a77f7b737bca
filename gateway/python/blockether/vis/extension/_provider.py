"""LLM provider declarations and their typed records (docs/extension-api.md, "Providers")."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from ._util import is_async_callable, is_blank

_DIALECTS = {
    "anthropic-messages": ("anthropic", "anthropic-messages", "claude", "messages"),
    "openai-chat": ("openai", "openai-chat", "openai-compatible", "openai-compatible-chat",
                    "chat", "chat-completions"),
    "openai-responses": ("openai-responses", "openai-compatible-responses", "responses"),
    "gemini": ("gemini", "google", "google-gemini"),
}
LIMIT_STATUSES = ("ok", "error", "unauthenticated", "unknown-provider", "unsupported")
LIMIT_SCOPES = ("account", "plan", "workspace", "model")
LIMIT_KINDS = ("requests", "tokens", "usd", "credits", "sessions", "rate")
LIMIT_PRECISIONS = ("exact", "estimate", "derived", "unknown")
LIMIT_SOURCES = ("provider-api", "derived", "static", "local")
WINDOW_KINDS = ("calendar", "rolling", "lifetime")
WINDOW_UNITS = ("minute", "hour", "day", "week", "month", "year")
# The dialects this gateway drives natively; the others are known names it refuses at load.
GATEWAY_DIALECTS = ("anthropic-messages", "openai-chat")
API_STYLES = tuple(name for names in _DIALECTS.values() for name in names)


def dialect_of(api_style: str) -> str:
    """Canonical wire dialect for an ``api_style`` name (``_`` and ``-`` are the same; the
    names are lower case, exactly as listed)."""
    key = api_style.strip().replace("_", "-") if isinstance(api_style, str) else None
    for dialect, names in _DIALECTS.items():
        if key in names:
            return dialect
    raise ValueError(f"provider api_style names no wire dialect: {api_style!r}; accepted: "
                     f"{', '.join(API_STYLES)}")


def gateway_dialect_error(owner: str, api_style):
    """A message when ``api_style`` names a dialect this gateway cannot drive, else None."""
    if api_style is None:
        return None
    dialect = dialect_of(api_style)
    if dialect in GATEWAY_DIALECTS:
        return None
    accepted = [n for d in GATEWAY_DIALECTS for n in _DIALECTS[d]]
    return (f"{owner} api_style {api_style!r} names the {dialect} dialect, which this gateway "
            f"does not drive; accepted: {', '.join(accepted)}")


def _portable(value, where: str):
    """Refuse what JSON cannot carry exactly: non-string keys, NaN and infinities, objects."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where} must be portable JSON data: {value!r} is not a finite "
                            f"number")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _portable(item, f"{where}[{i}]")
        return
    if isinstance(value, (dict, MappingProxyType)):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} must be portable JSON data: key {key!r} is not a "
                                f"string")
            _portable(item, f"{where}[{key!r}]")
        return
    raise TypeError(f"{where} must be portable JSON data: {type(value).__name__} is not "
                    f"JSON")


def _freeze(value, where: str):
    """Portable JSON data, frozen (dicts become read-only mappings, lists tuples)."""
    _portable(value, where)

    def freeze(v):
        if isinstance(v, dict):
            return MappingProxyType({k: freeze(x) for k, x in v.items()})
        if isinstance(v, (list, tuple)):
            return tuple(freeze(x) for x in v)
        return v

    return freeze(value)


def _thaw(value):
    if isinstance(value, MappingProxyType):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _opt_str(owner: str, obj, *names):
    for name in names:
        value = getattr(obj, name)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{owner} {name} must be a string or None")


def _nonblank(owner: str, name: str, value):
    if is_blank(value):
        raise ValueError(f"{owner} {name} must be a non-empty string")


def _one_of(owner: str, name: str, value, allowed):
    if value not in allowed:
        raise ValueError(f"{owner} {name} must be one of {', '.join(allowed)}; got {value!r}")


def _headers(owner: str, value):
    if value is None:
        return None
    if not hasattr(value, "items") or any(not isinstance(k, str) or not isinstance(v, str)
                                          for k, v in value.items()):
        raise TypeError(f"{owner} llm_headers must map strings to strings")
    return MappingProxyType(dict(value))


def _check_extra(owner: str, record, extra):
    """``extra`` is a string-keyed JSON dict whose keys do not shadow declared fields
    (``-`` and ``_`` are the same); it is merged into the wire form."""
    if extra is None:
        return None
    if not isinstance(extra, dict):
        raise TypeError(f"{owner} extra must be a dict")
    declared = {f.name for f in fields(record)}
    for key in extra:
        if not isinstance(key, str):
            raise TypeError(f"{owner} extra key {key!r} must be a string")
        if key.replace("-", "_") in declared:
            raise ValueError(f"{owner} extra key {key!r} shadows a declared field")
    return _freeze(extra, f"{owner} extra")


class _Record:
    """Wire form: every non-None field, frozen containers thawed; ``extra`` is merged into
    the top level, and a ``False`` ``is_hidden`` is left out."""

    __slots__ = ()

    def to_wire(self) -> dict:
        out = {}
        extra = None
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or (f.name == "is_hidden" and value is False):
                continue
            if f.name == "extra":
                extra = _thaw(value)
                continue
            if isinstance(value, _Record):
                value = value.to_wire()
            elif isinstance(value, tuple) and value and isinstance(value[0], _Record):
                value = [v.to_wire() for v in value]
            out[f.name] = _thaw(value)
        if extra:
            out.update(extra)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderPreset(_Record):
    """Endpoint defaults for a provider (never credentials)."""

    base_url: str | None = None
    api_style: str | None = None
    default_models: tuple = ()
    responses_path: str | None = None
    llm_headers: object = field(default=None, repr=False)
    extra_body: object = None
    is_hidden: bool = False
    extra: object = None

    def __post_init__(self):
        owner = "vis.ProviderPreset"
        _opt_str(owner, self, "base_url", "api_style", "responses_path")
        if self.api_style is not None:
            dialect_of(self.api_style)
        models = self.default_models
        if isinstance(models, str) or not isinstance(models, (list, tuple)):
            raise TypeError(f"{owner} default_models must be a list or tuple of model names")
        for model in models:
            _nonblank(owner, "default_models entry", model)
        object.__setattr__(self, "default_models", tuple(models))
        object.__setattr__(self, "llm_headers", _headers(owner, self.llm_headers))
        if self.extra_body is not None:
            object.__setattr__(self, "extra_body", _freeze(self.extra_body, f"{owner} extra_body"))
        if type(self.is_hidden) is not bool:
            raise TypeError(f"{owner} is_hidden must be a bool")
        object.__setattr__(self, "extra", _check_extra(owner, self, self.extra))


@dataclass(frozen=True, slots=True)
class ProviderCredential(_Record):
    """A credential returned by ``get_token_fn``/``detect_fn``/``refresh_token_fn``."""

    token: str = field(repr=False)
    api_url: str | None = None
    api_style: str | None = None
    responses_path: str | None = None
    llm_headers: object = field(default=None, repr=False)
    source: str | None = None

    def __post_init__(self):
        _nonblank("vis.ProviderCredential", "token", self.token)
        _opt_str("vis.ProviderCredential", self, "api_url", "api_style", "responses_path",
                 "source")
        if self.api_style is not None:
            dialect_of(self.api_style)
        object.__setattr__(self, "llm_headers",
                           _headers("vis.ProviderCredential", self.llm_headers))


@dataclass(frozen=True, slots=True)
class ProviderStatus(_Record):
    """Connection status shown by the host."""

    is_authenticated: bool
    error: str | None = None
    source: str | None = None
    provider_id: str | None = None
    status: str | None = None
    base_url: str | None = None
    label: str | None = None
    config_path: str | None = None
    extra: object = None

    def __post_init__(self):
        if type(self.is_authenticated) is not bool:
            raise TypeError("vis.ProviderStatus is_authenticated must be a bool")
        _opt_str("vis.ProviderStatus", self, "error", "source", "provider_id", "status",
                 "base_url", "label", "config_path")
        object.__setattr__(self, "extra", _check_extra("vis.ProviderStatus", self, self.extra))


@dataclass(frozen=True, slots=True)
class ProviderModel(_Record):
    """Model metadata returned by ``enrich_models_fn``."""

    name: str
    context: int | None = None
    is_tool_call: bool | None = None
    is_image_input: bool | None = None
    extra: object = None

    def __post_init__(self):
        _nonblank("vis.ProviderModel", "name", self.name)
        if self.context is not None and (type(self.context) is not int or self.context < 1):
            raise ValueError("vis.ProviderModel context must be an int >= 1")
        for key in ("is_tool_call", "is_image_input"):
            if getattr(self, key) is not None and type(getattr(self, key)) is not bool:
                raise TypeError(f"vis.ProviderModel {key} must be a bool")
        object.__setattr__(self, "extra", _check_extra("vis.ProviderModel", self, self.extra))


@dataclass(frozen=True, slots=True)
class ProviderError(_Record):
    type: str
    message: str
    data: object = None

    def __post_init__(self):
        _nonblank("vis.ProviderError", "type", self.type)
        _nonblank("vis.ProviderError", "message", self.message)
        if self.data is not None:
            object.__setattr__(self, "data", _freeze(self.data, "vis.ProviderError data"))


@dataclass(frozen=True, slots=True)
class ProviderLimitWindow(_Record):
    """The period a limit counts over: ``kind`` calendar, rolling or lifetime; ``unit``
    (optional: a lifetime window has none) minute … year; ``size`` units long."""

    kind: str
    unit: str | None = None
    size: int = 1
    resets_at_ms: int | None = None

    def __post_init__(self):
        _one_of("vis.ProviderLimitWindow", "kind", self.kind, WINDOW_KINDS)
        if self.unit is not None:
            _one_of("vis.ProviderLimitWindow", "unit", self.unit, WINDOW_UNITS)
        if type(self.size) is not int or self.size < 1:
            raise ValueError("vis.ProviderLimitWindow size must be an int >= 1")
        if self.resets_at_ms is not None and type(self.resets_at_ms) is not int:
            raise TypeError("vis.ProviderLimitWindow resets_at_ms must be an int")


@dataclass(frozen=True, slots=True)
class ProviderLimit(_Record):
    id: str
    label: str
    scope: str = "account"
    kind: str = "requests"
    precision: str = "unknown"
    source: str = "provider-api"
    is_unlimited: bool = False
    used: float | None = None
    limit: float | None = None
    remaining: float | None = None
    window: ProviderLimitWindow | None = None
    subject: str | None = None
    note: str | None = None

    def __post_init__(self):
        owner = "vis.ProviderLimit"
        _nonblank(owner, "id", self.id)
        _nonblank(owner, "label", self.label)
        _one_of(owner, "scope", self.scope, LIMIT_SCOPES)
        _one_of(owner, "kind", self.kind, LIMIT_KINDS)
        _one_of(owner, "precision", self.precision, LIMIT_PRECISIONS)
        _one_of(owner, "source", self.source, LIMIT_SOURCES)
        if type(self.is_unlimited) is not bool:
            raise TypeError(f"{owner} is_unlimited must be a bool")
        for key in ("used", "limit", "remaining"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise ValueError(f"{owner} {key} must be a finite number")
        if self.window is not None and type(self.window) is not ProviderLimitWindow:
            raise TypeError(f"{owner} window must be a ProviderLimitWindow")
        _opt_str(owner, self, "subject", "note")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderLimits:
    """Usage figures for the footer; see ``to_wire`` for the host shape."""

    status: str = "ok"
    limits: tuple = ()
    rpm: int | None = None
    tpm: int | None = None
    note: str | None = None
    error: ProviderError | None = None
    provider_id: str | None = None
    fetched_at_ms: int | None = None

    def __post_init__(self):
        owner = "vis.ProviderLimits"
        _one_of(owner, "status", self.status, LIMIT_STATUSES)
        if not isinstance(self.limits, (list, tuple)) or any(
                type(x) is not ProviderLimit for x in self.limits):
            raise TypeError(f"{owner} limits must contain ProviderLimit records")
        object.__setattr__(self, "limits", tuple(self.limits))
        for key in ("rpm", "tpm", "fetched_at_ms"):
            value = getattr(self, key)
            if value is not None and (type(value) is not int or value < 0):
                raise ValueError(f"{owner} {key} must be an int >= 0")
        if self.error is not None and type(self.error) is not ProviderError:
            raise TypeError(f"{owner} error must be a ProviderError")
        _opt_str(owner, self, "note", "provider_id")

    def to_wire(self) -> dict:
        static = {k: getattr(self, k) for k in ("rpm", "tpm") if getattr(self, k) is not None}
        dynamic = {"limits": [x.to_wire() for x in self.limits]}
        if self.note is not None:
            dynamic["note"] = self.note
        out = {"status": self.status, "static": static, "dynamic": dynamic}
        if self.error is not None:
            out["error"] = self.error.to_wire()
        for key in ("provider_id", "fetched_at_ms"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def _returns_credential(v):
    return v is None or type(v) is ProviderCredential


def _returns_models(v):
    return v is None or (isinstance(v, (list, tuple)) and all(type(m) is ProviderModel for m in v))


def _returns_prompt(v):
    return v is None or isinstance(v, str) or (
        isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v))


# slot -> (accepted arities, result check, what the check expects)
SLOTS = {
    "get_token_fn": ((0,), _returns_credential, "a ProviderCredential"),
    "detect_fn": ((0,), _returns_credential, "a ProviderCredential"),
    "status_fn": ((0,), lambda v: v is None or type(v) is ProviderStatus, "a ProviderStatus"),
    "logout_fn": ((0,), lambda v: True, "None"),
    "limits_fn": ((0,), lambda v: v is None or type(v) is ProviderLimits, "a ProviderLimits"),
    "refresh_token_fn": ((1, 0), _returns_credential, "a ProviderCredential"),
    "auth_fn": ((1,), lambda v: v is None or isinstance(v, (str, bool)), "a string or bool"),
    "auth_prompt_fn": ((0,), _returns_prompt, "a string or a list of strings"),
    "enrich_models_fn": ((2,), _returns_models, "a list of ProviderModel"),
    "on_selected_fn": ((1,), lambda v: True, "None"),
}


def _arity(slot: str, fn) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return SLOTS[slot][0][0]
    for n in SLOTS[slot][0]:
        try:
            sig.bind(*([None] * n))
            return n
        except TypeError:
            continue
    allowed = " or ".join(str(n) for n in SLOTS[slot][0])
    raise TypeError(f"vis.Provider {slot} must accept {allowed} positional argument(s)")


@dataclass(frozen=True, slots=True)
class Provider:
    """An LLM provider contributed by an extension."""

    id: str
    label: str
    preset: ProviderPreset | None = None
    is_managed: bool = False
    get_token_fn: object = None
    detect_fn: object = None
    status_fn: object = None
    logout_fn: object = None
    limits_fn: object = None
    refresh_token_fn: object = None
    auth_fn: object = None
    auth_prompt_fn: object = None
    enrich_models_fn: object = None
    on_selected_fn: object = None
    _arities: object = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        _nonblank("vis.Provider", "id", self.id)
        _nonblank("vis.Provider", "label", self.label)
        if self.preset is not None and type(self.preset) is not ProviderPreset:
            raise TypeError("vis.Provider preset must be a vis.ProviderPreset or None "
                            "(raw dicts are not accepted)")
        if type(self.is_managed) is not bool:
            raise TypeError("vis.Provider is_managed must be a bool")
        arities = {}
        for slot in SLOTS:
            fn = getattr(self, slot)
            if fn is None:
                continue
            if not callable(fn) or is_async_callable(fn):
                raise TypeError(f"vis.Provider {slot} must be a synchronous callable or None")
            arities[slot] = _arity(slot, fn)
        object.__setattr__(self, "_arities", MappingProxyType(arities))

    @property
    def slots(self) -> tuple:
        """Names of the callback slots this provider fills."""
        return tuple(self._arities)

    def call_slot(self, slot: str, *args):
        """Call a slot the way the host does, checking its result type.

        ``refresh_token_fn`` gets the rejected token only if it takes one argument.
        Returns ``None`` for an empty slot.
        """
        fn = getattr(self, slot) if slot in SLOTS else None
        if fn is None:
            return None
        arity = self._arities[slot]
        result = fn(*args[:arity])
        if inspect.iscoroutine(result):
            result.close()
            raise TypeError(f"vis.Provider {slot} returned a coroutine; provider callbacks "
                            f"must be synchronous")
        ok, expected = SLOTS[slot][1](result), SLOTS[slot][2]
        if not ok:
            raise TypeError(f"vis.Provider {slot} must return {expected} or None, got "
                            f"{type(result).__name__}")
        return result

    def to_wire(self) -> dict:
        return {"id": self.id, "label": self.label,
                "preset": self.preset.to_wire() if self.preset is not None else None,
                "is_managed": self.is_managed, "slots": list(self.slots)}
