"""Host doors: the seam between the SDK and the Vis gateway worker.

Every effect of the host-backed names (``state``, ``log``, ``notify``, ``shell``,
``jailed_shell``, ``jailed_shell_session``, ``fs``, ``ask``, ``reveal``,
``forget``, ``live``, ``publish_activity`` and ``register``'s environment
resolution) goes through ONE bridge object installed by the worker::

    from blockether.vis.extension import _host
    _host.set_bridge(bridge)          # bridge.call(op: str, payload: dict) -> Any

The SDK validates arguments before calling the bridge, so the bridge only sees
well-formed payloads.  Every payload carries ``"extension"``: the name of the
extension the call acts for (``None`` before ``register``), taken from
:func:`acting_for` (the worker wraps each call into an extension with it; the
loader sets it when ``register`` succeeds).  A bridge reports a failure by
raising an exception; the SDK lets it propagate to extension code unchanged.
Without a bridge every door raises ``RuntimeError`` (``publish_activity``
returns ``False`` instead, because it never raises).

Protocol (op, payload keys besides ``extension`` -> return value):

==========================  ==============================================  =========================
op                          payload                                         returns
==========================  ==============================================  =========================
``state_get``               ``key: str``                                    JSON value, ``None`` = absent
``state_put``               ``key: str, value: JSON (never None)``          ignored
``state_del``               ``key: str`` (absent key is not an error)       ignored
``state_keys``              —                                               ``list[str]``
``log``                     ``level`` (trace|debug|info|warn|error),        ignored
                            ``message: str``
``notify``                  ``text: str``, ``level`` (info|success|warn|    ignored
                            error)
``shell``                   ``opts: dict`` (see below)                      ``dict`` shell record
``jailed_shell``            ``opts: dict``                                  ``dict`` shell record
``jailed_shell_session``    ``opts: dict`` (raise "available only while     ``dict`` shell record
                            handling a session" without one)
``fs_read``                 ``path: str``                                   ``bytes``
``fs_write``                ``path: str, data: bytes, append: bool``        ignored
``fs_list``                 ``path: str``                                   ``list[str]`` entry names
``fs_stat``                 ``path: str``                                   ``dict``
``fs_copy`` / ``fs_move``   ``src: str, dst: str``                          ignored
``fs_remove``               ``path: str``                                   ``bool`` (removed)
``fs_mkdir``                ``path: str``                                   ``bool`` (created)
``fs_exists``               ``path: str``                                   ``bool``
``request_input``           ``request: dict`` (the form, validators         answer ``dict``: ``status``
                            stripped), ``validators: {field: [arity]}``,    (submitted|cancelled|
                            ``run_validator: callable(field, value,         timeout|undeliverable|…),
                            all_values) -> str | None`` (error message)     ``values``, ``request_id``,
                                                                            ``reason``
``reveal_secret``           ``handle: str``                                 ``str | None``
``forget_secret``           ``handle: str``                                 ``bool``
``live``                    ``envelope: dict`` (``op``: open|patch|state|   ``dict``
                            close, see ``_live``)
``activity``                ``presentation: dict`` (wire form)              truthy when shown
``declare_env``             ``names: list[str]`` (may be empty)             ``{name: value}``: the
                                                                            declared names that
                                                                            resolved, plus the names
                                                                            the project defines
                                                                            (``environment:``,
                                                                            ``.env``, ``.env.local``)
==========================  ==============================================  =========================

Shell ``opts``: ``op`` is ``run`` (default) or ``background`` with ``command``
(``str`` run by the shell, or ``list[str]`` argv) and optional ``cwd``,
``env``, ``timeout_secs``, ``stdin``; or ``logs`` / ``wait`` / ``send`` /
``stop`` with ``id`` (plus ``offset``/``limit``, ``seconds``, ``text``/
``is_enter``).  The shell record has the keys in :data:`SHELL_KEYS`; missing
keys are filled with ``None`` by the SDK.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import typing
from collections.abc import MutableMapping

_bridge = None


@typing.runtime_checkable
class Bridge(typing.Protocol):
    """What the worker installs with :func:`set_bridge`."""

    def call(self, op: str, payload: dict) -> typing.Any: ...

_OWNER = contextvars.ContextVar("vis_extension_owner", default=None)
# Which registration's environment ``os.environ`` shows (the entry file); see ``_environ``.
_ENV_KEY = contextvars.ContextVar("vis_extension_env_key", default=None)

SHELL_KEYS = ("stage", "id", "cwd", "command", "status", "pid", "exit", "duration_ms",
              "uptime_ms", "started_at", "finished_at", "log_path", "cpu_ms", "cpu_percent",
              "rss_bytes", "timed_out", "timeout_secs", "out", "out_omitted_chars", "offset",
              "next_offset", "is_eof", "attach", "already_running", "keys", "note")
SHELL_OPS = ("run", "background", "logs", "wait", "send", "stop")
LOG_LEVELS = ("trace", "debug", "info", "warn", "error")
NOTIFY_LEVELS = ("info", "success", "warn", "error")


def set_bridge(bridge) -> None:
    """Install the worker's bridge (an object with ``call(op, payload)``); ``None`` removes it."""
    if bridge is not None and not isinstance(bridge, Bridge):
        raise TypeError("the host bridge must have a call(op, payload) method")
    global _bridge
    _bridge = bridge


def get_bridge():
    return _bridge


def current_extension():
    return _OWNER.get()


def current_env_key():
    """The registration whose environment ``os.environ`` shows (``None``: the base one)."""
    return _ENV_KEY.get()


@contextlib.contextmanager
def acting_for(extension_name, env_key=None):
    """Attribute host calls inside the block to ``extension_name``; ``os.environ`` shows the
    environment of the registration ``env_key`` (its entry file) when the worker keeps one
    per extension."""
    token = _OWNER.set(extension_name)
    env_token = _ENV_KEY.set(env_key)
    try:
        yield
    finally:
        _ENV_KEY.reset(env_token)
        _OWNER.reset(token)


def set_owner(extension_name, env_key=None) -> None:
    _OWNER.set(extension_name)
    _ENV_KEY.set(env_key)


def install_env(env_key, values: dict) -> None:
    """Make ``values`` visible in ``os.environ`` for the registration ``env_key``. A worker
    that hosts several extensions replaces ``os.environ`` with a per-extension view
    (``_environ.OwnerEnviron``); otherwise the values go into ``os.environ`` itself."""
    environ = os.environ
    install = getattr(environ, "install", None)
    if callable(install):
        install(env_key, values)
    else:
        environ.update(values)


def call(op: str, payload: dict):
    if _bridge is None:
        raise RuntimeError(f"vis host operation '{op}' needs the Vis gateway: it is only "
                           f"available inside a gateway extension worker")
    return _bridge.call(op, dict(payload, extension=_OWNER.get()))


class RecordingBridge:
    """Test double: records ``(op, payload)`` and answers from ``responses``.

    ``responses[op]`` is a value or a callable ``(payload) -> value``.  State ops
    are served from ``self.state`` unless a response overrides them.
    """

    def __init__(self, responses=None):
        self.calls = []
        self.responses = dict(responses or {})
        self.state = {}

    def call(self, op, payload):
        self.calls.append((op, payload))
        if op in self.responses:
            answer = self.responses[op]
            return answer(payload) if callable(answer) else answer
        if op == "state_get":
            return self.state.get(payload["key"])
        if op == "state_put":
            self.state[payload["key"]] = payload["value"]
        elif op == "state_del":
            self.state.pop(payload["key"], None)
        elif op == "state_keys":
            return list(self.state)
        elif op == "declare_env":
            return {}
        return None

    def ops(self) -> list:
        return [op for op, _ in self.calls]


# -- state -------------------------------------------------------------------

def _plain(value, path="value"):
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"vis.state {path} must be a finite number")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _plain(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"vis.state {path} keys must be strings")
            _plain(item, f"{path}[{key!r}]")
        return
    raise TypeError(f"vis.state values must be plain JSON data (dict, list, str, number, "
                    f"bool); {path} is {type(value).__name__}")


def _state_call(op: str, payload: dict):
    if _bridge is not None and _OWNER.get() is None:
        raise RuntimeError("vis.state belongs to a registered extension: call "
                           "vis.register(vis.Extension(...)) before using vis.state")
    return call(op, payload)


class _State(MutableMapping):
    """``vis.state``: a MutableMapping persisted by the gateway, keyed by extension name.

    Before ``register`` (no owning extension) every operation raises ``RuntimeError``.
    """

    def __getitem__(self, key):
        value = _state_call("state_get", {"key": str(key)})
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key, default=None):
        value = _state_call("state_get", {"key": str(key)})
        return default if value is None else value

    def __contains__(self, key):
        return _state_call("state_get", {"key": str(key)}) is not None

    def __setitem__(self, key, value):
        if value is None:
            _state_call("state_del", {"key": str(key)})
            return
        _plain(value)
        _state_call("state_put", {"key": str(key), "value": value})

    def __delitem__(self, key):
        if key not in self:
            raise KeyError(key)
        _state_call("state_del", {"key": str(key)})

    def __iter__(self):
        return iter(sorted(_state_call("state_keys", {}) or []))

    def __len__(self):
        return len(_state_call("state_keys", {}) or [])

    def __repr__(self):
        return "<vis.state>"


state = _State()


# -- log, notify, env ------------------------------------------------------------

def log(level, msg) -> None:
    """Write to the gateway log (levels trace, debug, info, warn, error; unknown -> info)."""
    level = level if level in LOG_LEVELS else "info"
    call("log", {"level": level, "message": str(msg)})


def notify(text, level="info") -> None:
    """Show a toast in the active channel (levels info, success, warn, error)."""
    level = level if level in NOTIFY_LEVELS else "info"
    call("notify", {"text": str(text), "level": level})


def host_env(name, default=None):
    """A declared (and resolved) environment variable, or ``default``."""
    return os.environ.get(name, default)


def declare_env(names) -> dict:
    """Resolve the declared ``names``; the host also answers the names the project defines
    itself (they need no declaration). Only string values are kept."""
    resolved = call("declare_env", {"names": list(names)})
    if not isinstance(resolved, dict):
        raise TypeError("the host's declare_env answer must be a dict of name -> value")
    return {k: v for k, v in resolved.items() if isinstance(k, str) and isinstance(v, str)}


# -- secrets -------------------------------------------------------------------

def reveal(handle):
    """Plaintext of a secret handle from a form answer (``None`` for a falsy handle)."""
    if not handle:
        return None
    return call("reveal_secret", {"handle": str(handle)})


def forget(handle) -> bool:
    """Drop a secret handle (``False`` for a falsy handle)."""
    if not handle:
        return False
    return bool(call("forget_secret", {"handle": str(handle)}))
