"""``os.environ`` per extension, for a worker process that hosts several extensions.

Every worker starts with a cleared environment (the *base*: ``PATH``, ``HOME``, locale …).
``register`` resolves each extension's environment (its declared ``env=[…]`` names plus the
names its project defines) and installs it with :func:`blockether.vis.extension._host.
install_env`. :class:`OwnerEnviron` replaces ``os.environ`` in the worker so that code acting
for an extension (``_host.acting_for(name, env_key)``, set by the worker around every call
and by ``register`` for the rest of the entry file) sees the base plus ITS names only, and
code acting for nobody sees the base. One extension's names never appear in another's
``os.environ``.

Child processes: the process-level environment (what ``execve`` inherits) stays the base,
so :func:`install` also makes ``subprocess.Popen`` (and everything built on it:
``subprocess.run``, ``os.popen``) and ``os.system`` pass the caller's ``os.environ`` when no
``env=`` is given. Threads started by extension code inherit the starting code's context,
so they act for the same extension (as ``vis.state`` and ``os.environ`` expect).
"""

from __future__ import annotations

import contextvars
import os
import subprocess
import threading

from . import _host


class OwnerEnviron(os._Environ):
    """``os.environ`` whose contents depend on the extension the caller acts for."""

    def __init__(self, base):
        self._views = {}
        super().__init__(base._data, base.encodekey, base.decodekey, base.encodevalue,
                         base.decodevalue)

    @property
    def _data(self):
        key = _host.current_env_key()
        if key is not None:
            view = self._views.get(key)
            if view is not None:
                return view
        return self._base

    @_data.setter
    def _data(self, value):
        self._base = value

    def _is_base(self, data) -> bool:
        return data is self._base

    def __setitem__(self, key, value):
        data = self._data
        key, value = self.encodekey(key), self.encodevalue(value)
        if self._is_base(data):
            os.putenv(key, value)
        data[key] = value

    def __delitem__(self, key):
        data = self._data
        encoded = self.encodekey(key)
        if self._is_base(data):
            try:
                os.unsetenv(encoded)
            except OSError:
                pass
        try:
            del data[encoded]
        except KeyError:
            raise KeyError(key) from None

    def install(self, env_key, values: dict) -> None:
        """The environment of the registration ``env_key``: the base plus ``values``."""
        view = dict(self._base)
        for name, value in values.items():
            view[self.encodekey(name)] = self.encodevalue(value)
        self._views[env_key] = view

    def forget(self, env_key) -> None:
        self._views.pop(env_key, None)


_ORIGINAL = {}


def _popen_init(self, args, *rest, **kwargs):
    # ``env`` is the 11th positional parameter of ``Popen``.
    if len(rest) < 10 and kwargs.get("env") is None and _host.current_env_key() is not None:
        kwargs["env"] = dict(os.environ)
    return _ORIGINAL["popen_init"](self, args, *rest, **kwargs)


def _system(command):
    if _host.current_env_key() is None:
        return _ORIGINAL["system"](command)
    code = subprocess.call(command, shell=True, env=dict(os.environ))
    # os.system answers a wait status: the exit code in the high byte, or the signal.
    return -code if code < 0 else code << 8


def _thread_start(self):
    context = contextvars.copy_context()
    run = self.run

    def run_in_context():
        context.run(run)

    self.run = run_in_context
    return _ORIGINAL["thread_start"](self)


def install() -> OwnerEnviron:
    """Replace ``os.environ`` with an :class:`OwnerEnviron` (idempotent)."""
    if isinstance(os.environ, OwnerEnviron):
        return os.environ
    environ = OwnerEnviron(os.environ)
    os.environ = environ  # noqa: B003 -- replacing the mapping itself is the point
    _ORIGINAL["popen_init"] = subprocess.Popen.__init__
    _ORIGINAL["system"] = os.system
    _ORIGINAL["thread_start"] = threading.Thread.start
    subprocess.Popen.__init__ = _popen_init
    os.system = _system
    threading.Thread.start = _thread_start
    return environ


def uninstall() -> None:
    """Undo :func:`install` (tests)."""
    environ = os.environ
    if not isinstance(environ, OwnerEnviron):
        return
    base = os._Environ(environ._base, environ.encodekey, environ.decodekey,
                       environ.encodevalue, environ.decodevalue)
    os.environ = base  # noqa: B003 -- restores the mapping install() replaced
    subprocess.Popen.__init__ = _ORIGINAL.pop("popen_init")
    os.system = _ORIGINAL.pop("system")
    threading.Thread.start = _ORIGINAL.pop("thread_start")
