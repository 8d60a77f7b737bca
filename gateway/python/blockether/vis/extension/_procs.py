"""Child processes (``shell`` family) and ``vis.fs`` (docs/extension-api.md, "Child processes", "Files")."""

from __future__ import annotations

import os

from . import _host
from ._host import SHELL_KEYS, SHELL_OPS

_HANDLE_OPS = ("logs", "wait", "send", "stop")


class Shell(dict):
    """A shell record: every documented key is present; methods act on the same process."""

    def __init__(self, record=None, door="shell"):
        record = record if isinstance(record, dict) else {}
        super().__init__({key: record.get(key) for key in SHELL_KEYS})
        for key, value in record.items():
            self.setdefault(key, value)
        self._door = door

    def _handle(self, opts: dict) -> "Shell":
        if not self.get("id"):
            raise ValueError("this shell record has no process id")
        return _spawn(self._door, dict(opts, id=self["id"]))

    def logs(self, offset=None, limit=None) -> "Shell":
        """Read output; a negative ``offset`` means the last N lines."""
        return self._handle({"op": "logs", "offset": offset, "limit": limit})

    def type(self, text, is_enter=True) -> "Shell":
        """Send text to the child's stdin (followed by Enter unless ``is_enter=False``)."""
        if not isinstance(text, str):
            raise TypeError("Shell.type text must be a string")
        return self._handle({"op": "send", "text": text, "is_enter": bool(is_enter)})

    def stop(self) -> "Shell":
        return self._handle({"op": "stop"})

    def wait(self, seconds=120) -> "Shell":
        """Wait (bounded, in the host) for the child to exit."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            raise ValueError("Shell.wait seconds must be a number >= 0")
        return self._handle({"op": "wait", "seconds": seconds})


def _check_opts(opts) -> dict:
    if not isinstance(opts, dict):
        raise TypeError("shell takes one options map — use shell({'command': 'ls'})")
    op = opts.get("op", "run")
    if op not in SHELL_OPS:
        raise ValueError(f"shell op {op!r} is not supported; use one of {', '.join(SHELL_OPS)}")
    if op in _HANDLE_OPS:
        if not opts.get("id"):
            raise ValueError(f"shell op '{op}' needs the 'id' of a running process")
    else:
        command = opts.get("command")
        is_argv = isinstance(command, list) and command and all(isinstance(c, str) for c in command)
        if not (isinstance(command, str) and command.strip()) and not is_argv:
            raise ValueError(f"shell op '{op}' needs 'command': a string or a list of strings")
    return dict(opts, op=op)


def _spawn(door: str, opts) -> Shell:
    return Shell(_host.call(door, {"opts": _check_opts(opts)}), door)


def shell(opts) -> Shell:
    """Run a child process without the jail."""
    return _spawn("shell", opts)


def jailed_shell(opts) -> Shell:
    """Run a child process under the merged on-disk jail configuration."""
    return _spawn("jailed_shell", opts)


def jailed_shell_session(opts) -> Shell:
    """Run a child process under the invoking session's policy (needs a session)."""
    return _spawn("jailed_shell_session", opts)


def _path(value) -> str:
    """An absolute path: a relative one is taken from the worker's working directory (the
    session's workspace in a session worker), as ordinary ``open()`` would."""
    path = os.fspath(value)
    if not isinstance(path, str):
        raise TypeError("vis.fs paths must be strings or os.PathLike of str")
    if not path:
        raise ValueError("vis.fs paths must not be empty")
    return os.path.abspath(path)


class _Fs:
    """``vis.fs``: filesystem operations with the extension's permissions (any path the
    gateway's user may touch, like ordinary ``open()``); the session's ``fs_access`` gates
    are consulted when a session is being served."""

    __slots__ = ()

    def read(self, path) -> bytes:
        data = _host.call("fs_read", {"path": _path(path)})
        return bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else data

    def read_text(self, path, encoding="utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path, data, append=False) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        elif isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        elif not isinstance(data, bytes):
            raise TypeError("vis.fs.write data must be str or bytes")
        _host.call("fs_write", {"path": _path(path), "data": data, "append": bool(append)})

    def list(self, path) -> list:
        return list(_host.call("fs_list", {"path": _path(path)}) or [])

    def stat(self, path) -> dict:
        return _host.call("fs_stat", {"path": _path(path)})

    def copy(self, src, dst) -> None:
        _host.call("fs_copy", {"src": _path(src), "dst": _path(dst)})

    def move(self, src, dst) -> None:
        _host.call("fs_move", {"src": _path(src), "dst": _path(dst)})

    def remove(self, path) -> bool:
        return bool(_host.call("fs_remove", {"path": _path(path)}))

    def mkdir(self, path) -> bool:
        return bool(_host.call("fs_mkdir", {"path": _path(path)}))

    def exists(self, path) -> bool:
        return bool(_host.call("fs_exists", {"path": _path(path)}))

    def __repr__(self):
        return "<vis.fs>"


fs = _Fs()
