"""``vis.live``: non-blocking live views (docs/extension-api.md, "Live views").

Envelopes sent through the ``live`` door (payload ``{"envelope": …}``):

* ``{"op": "open", "title", "nodes": [node], "description"?, "source"?, "session_id"?,
  "channel_ids"?, "flush_ms"?}`` -> ``{"view_id": str, "seq": int}``
* ``{"op": "patch", "view_id", "ops": [{"op": set|append|clear|remove|add-node|remove-node,
  "node_id", …}]}`` -> ``{"seq": int, "interrupted"?: bool, "reason"?, "note"?}``
* ``{"op": "state", "view_id", "after_seq"?, "timeout_ms"?}`` -> ``{"seq", "changed"?,
  "interrupted"?, "is_from_human"?, "note"?, "nodes"?, …}``
* ``{"op": "close", "view_id", "reason", "summary"?, "error"?, "artifact_id"?,
  "model_result"?, …}`` -> ignored
"""

from __future__ import annotations

from . import _host

TONES = ("idle", "running", "ok", "warn", "error")
CLOSE_REASONS = ("completed", "failed", "interrupted", "superseded", "timeout", "undeliverable")
_OPEN_OPTIONS = ("description", "source", "session_id", "channel_ids", "flush_ms")
_MAX_STATE_TIMEOUT_MS = 86_400_000


class Interrupted(Exception):
    """Raised on a push after the human stopped the view."""

    def __init__(self, view_id, reason="interrupted", note=None):
        super().__init__(f"live view {view_id} was stopped: {reason}")
        self.view_id, self.reason, self.note = view_id, reason, note


def _tone(tone):
    if tone is not None and tone not in TONES:
        raise ValueError(f"vis.live tone must be one of {', '.join(TONES)}; got {tone!r}")
    return tone


def _node(kind, node_id, **fields):
    if not isinstance(node_id, str) or not node_id.strip():
        raise ValueError(f"vis.live {kind} needs an id")
    _tone(fields.get("tone"))
    return dict({"type": kind, "id": node_id}, **{k: v for k, v in fields.items() if v is not None})


def status(node_id, text="", tone="idle", detail=None, label=None):
    return _node("status", node_id, text=text, tone=tone, detail=detail, label=label)


def progress(node_id, value=None, total=None, label=None):
    return _node("progress", node_id, value=value, total=total, label=label)


def stat(node_id, label=None, items=()):
    return _node("stat", node_id, label=label, items=list(items))


def steps(node_id, items=(), label=None):
    return _node("steps", node_id, items=list(items), label=label)


def output(node_id, lines=(), label=None):
    """A log node (wire type ``log``)."""
    return _node("log", node_id, lines=list(lines), label=label)


def table_column(column_id, label=None):
    return {"id": column_id, "label": label if label is not None else column_id}


def table_row(row_id, cells, tone=None, branch=None):
    _tone(tone)
    return {k: v for k, v in {"id": row_id, "cells": cells, "tone": tone,
                              "branch": branch}.items() if v is not None}


def table(node_id, columns, rows=(), label=None):
    return _node("table", node_id, columns=list(columns), rows=list(rows), label=label)


def link(node_id, items=(), label=None):
    return _node("link", node_id, items=list(items), label=label)


class _Handle:
    def __init__(self, view, node_id):
        self._view, self.id = view, node_id

    def _push(self, op, **fields):
        self._view._patch([dict({"op": op, "node_id": self.id},
                                **{k: v for k, v in fields.items() if v is not None})])
        return self


class StatusHandle(_Handle):
    def set(self, text=None, tone=None, detail=None, label=None):
        return self._push("set", text=text, tone=_tone(tone), detail=detail, label=label)


class ProgressHandle(_Handle):
    def set(self, value=None, total=None, done=None):
        return self._push("set", value=value, total=total, done=done)


class StatHandle(_Handle):
    def set(self, item_id, value_text, label=None, tone=None):
        return self._push("set", item_id=item_id, value_text=value_text, label=label,
                          tone=_tone(tone))


class StepsHandle(_Handle):
    def set(self, item_id, tone=None, label=None, detail=None, value=None):
        return self._push("set", item_id=item_id, tone=_tone(tone), label=label, detail=detail,
                          value=value)


class LogHandle(_Handle):
    def write(self, *lines, tone=None):
        return self._push("append", lines=[str(x) for x in lines], tone=_tone(tone))

    def clear(self):
        return self._push("clear")


class TableHandle(_Handle):
    def upsert(self, row_id, cells, tone=None, branch=None):
        return self._push("set", row=table_row(row_id, cells, tone, branch))

    def remove(self, row_id):
        return self._push("remove", item_id=row_id)

    def clear(self):
        return self._push("clear")


class LinkHandle(_Handle):
    def add(self, item_id, label, target, target_kind=None, tone=None):
        return self._push("append", item={k: v for k, v in {
            "id": item_id, "label": label, "target": target, "target_kind": target_kind,
            "tone": _tone(tone)}.items() if v is not None})


_HANDLES = {"status": StatusHandle, "progress": ProgressHandle, "stat": StatHandle,
            "steps": StepsHandle, "log": LogHandle, "table": TableHandle, "link": LinkHandle}


def _walk(nodes):
    for node in nodes:
        if not isinstance(node, dict):
            raise TypeError("vis.live nodes must be dicts from the vis live builders")
        if node.get("type") == "group":
            yield from _walk(node.get("fields", []))
        else:
            yield node


class LiveView:
    """A live view handle; use it as a context manager to close it automatically."""

    def __init__(self, view_id, nodes):
        self.id = view_id
        self._types = {n["id"]: n["type"] for n in _walk(nodes) if "id" in n}
        self._seq = 0
        self.is_interrupted = False
        self.is_from_human = False
        self.note = None
        self.is_closed = False

    def _send(self, envelope):
        reply = _host.call("live", {"envelope": dict(envelope, view_id=self.id)})
        reply = reply if isinstance(reply, dict) else {}
        self._seq = reply.get("seq", self._seq)
        if reply.get("interrupted"):
            self.is_interrupted = True
            self.is_from_human = bool(reply.get("is_from_human", True))
            self.note = reply.get("note")
        return reply

    def _patch(self, ops):
        if self.is_closed:
            raise RuntimeError(f"live view {self.id} is closed")
        reply = self._send({"op": "patch", "ops": ops})
        if reply.get("interrupted"):
            raise Interrupted(self.id, reply.get("reason", "interrupted"), reply.get("note"))

    def node(self, node_id):
        """The handle of one node, by id."""
        if node_id not in self._types:
            raise KeyError(f"live view has no node {node_id!r}")
        return _HANDLES[self._types[node_id]](self, node_id)

    def only(self, kind):
        """The handle of the view's single node of ``kind`` (e.g. ``"log"``)."""
        ids = [i for i, t in self._types.items() if t == kind]
        if len(ids) != 1:
            raise LookupError(f"live view has {len(ids)} nodes of type {kind!r}, not exactly one")
        return self.node(ids[0])

    def add(self, node, after=None):
        nodes = list(_walk([node]))
        self._patch([{"op": "add-node", "node": node, "after": after}])
        self._types.update({n["id"]: n["type"] for n in nodes if "id" in n})
        return self.node(nodes[0]["id"]) if len(nodes) == 1 else None

    def drop(self, node_id):
        self._patch([{"op": "remove-node", "node_id": node_id}])
        self._types.pop(node_id, None)

    def state(self, after_seq=None, timeout_ms=None) -> dict:
        envelope = {"op": "state"}
        if after_seq is not None:
            envelope["after_seq"] = after_seq
        if timeout_ms is not None:
            envelope["timeout_ms"] = min(int(timeout_ms), _MAX_STATE_TIMEOUT_MS)
        return self._send(envelope)

    def sleep(self, seconds) -> bool:
        """Wait up to ``seconds`` for a change from the human; ``True`` on change."""
        before = self._seq
        reply = self.state(after_seq=before, timeout_ms=max(0, int(seconds * 1000)))
        return bool(reply.get("changed", reply.get("seq", before) != before))

    def close(self, reason="completed", summary=None, error=None, artifact_id=None,
              model_result=None, **extra):
        if self.is_closed:
            return None
        if reason not in CLOSE_REASONS:
            raise ValueError(f"vis.live close reason must be one of {', '.join(CLOSE_REASONS)}")
        envelope = {"op": "close", "reason": reason}
        envelope.update({k: v for k, v in dict(summary=summary, error=error,
                                               artifact_id=artifact_id,
                                               model_result=model_result, **extra).items()
                         if v is not None})
        self.is_closed = True
        return self._send(envelope)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        reason = "completed" if exc_type is None else (
            "interrupted" if isinstance(exc, Interrupted) else "failed")
        self.close(reason,
                   error=None if exc is None else f"{exc_type.__name__}: {exc}")
        return False


def live(title, nodes, **options) -> LiveView:
    """Open a live view the extension updates while a job runs."""
    if not isinstance(title, str) or not title.strip():
        raise ValueError("vis.live requires a non-empty title")
    if not isinstance(nodes, (list, tuple)):
        raise TypeError("vis.live nodes must be a list")
    for key in options:
        if key not in _OPEN_OPTIONS:
            raise TypeError(f"vis.live got an unknown option {key!r}")
    for node in _walk(nodes):
        if node.get("type") not in _HANDLES:
            raise ValueError(f"vis.live unknown node type {node.get('type')!r}")
    reply = _host.call("live", {"envelope": dict(options, op="open", title=title,
                                                 nodes=list(nodes))})
    view_id = reply.get("view_id") if isinstance(reply, dict) else None
    if not view_id:
        raise RuntimeError("the host did not open the live view (no view_id)")
    view = LiveView(view_id, nodes)
    view._seq = reply.get("seq", 0)
    return view
