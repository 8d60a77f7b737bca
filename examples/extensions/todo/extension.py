"""todo — a small todo list for Vis sessions (example extension).

Shows the main pieces of the extension API in one file:

* a Symbol namespace ``todo`` with typed, documented tools (``todo.add``,
  ``todo.done``, ``todo.list``) returning frozen dataclasses;
* ``vis.state`` for the list itself (it survives ``/reload`` and restarts);
* a ``/todos`` slash command for the user;
* an op hook that blocks ``git push`` in the ``shell`` tool while todos are open;
* a network filter that blocks ``DELETE`` requests to the local todo service.

The logic lives in plain functions (``add_item``, ``complete_item``, ``render``,
``push_guard``, ``delete_filter`` …) so ``test_extension.py`` can test it without a
gateway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

import blockether.vis.extension as vis

NAME = "todo"
STATE_KEY = "items"
# Hosts of the (pretend) local todo service. Sandbox processes may read from it but
# never DELETE. 127.0.0.1 is in the list so `/net-probe DELETE http://127.0.0.1:8080/x`
# shows the filter at work.
PROTECTED_HOSTS = frozenset({"127.0.0.1", "localhost", "todo.internal"})
_PUSH = re.compile(r"\bgit\s+(?:-[Cc]\s+\S+\s+|-\S+\s+)*push\b")  # git [-c k=v | -opts] push


@dataclass(frozen=True)
class Todo:
    """One todo item."""

    id: Annotated[int, "stable number, used by todo.done and /todos done"]
    text: Annotated[str, "what to do"]
    done: Annotated[bool, "True once completed"]


# -- pure functions (no host calls) -------------------------------------------------

def to_todo(item: dict) -> Todo:
    return Todo(id=int(item["id"]), text=str(item["text"]), done=bool(item["done"]))


def add_item(items: list[dict], text: str) -> tuple[list[dict], dict]:
    """A new list with ``text`` appended (ids are never reused), and the new item."""
    text = " ".join(str(text).split())
    if not text:
        raise ValueError("a todo needs some text")
    item = {"id": max((i["id"] for i in items), default=0) + 1, "text": text, "done": False}
    return [*items, item], item


def complete_item(items: list[dict], todo_id: int) -> tuple[list[dict], dict]:
    """A new list with item ``todo_id`` marked done, and that item."""
    for i, item in enumerate(items):
        if item["id"] == todo_id:
            updated = dict(item, done=True)
            return [*items[:i], updated, *items[i + 1:]], updated
    raise LookupError(f"there is no todo #{todo_id}")


def open_items(items: list[dict]) -> list[dict]:
    return [i for i in items if not i["done"]]


def render(items: list[dict]) -> str:
    """Markdown checklist of the items."""
    if not items:
        return "_No todos._"
    return "\n".join(f"- [{'x' if i['done'] else ' '}] #{i['id']} {i['text']}" for i in items)


def push_guard(call: dict, items: list[dict]) -> dict | None:
    """Op hook decision: block ``git push`` in a shell command while todos are open."""
    if call.get("op") != "shell":
        return None
    if not any(_PUSH.search(s) for s in vis.strings_of(call.get("args"))):
        return None
    pending = open_items(items)
    if not pending:
        return None
    names = ", ".join(f"#{i['id']} {i['text']}" for i in pending[:3])
    return vis.block(f"{len(pending)} open todo(s) before pushing: {names}. "
                     f"Finish them (todo.done) or ask the user.")


def delete_filter(ctx: dict) -> dict | None:
    """Network filter decision: no DELETE to the todo service from the sandbox."""
    if ctx.get("phase") not in ("http", "https"):
        return None  # response phases and SOCKS: nothing to decide here
    if (ctx.get("method") or "").upper() != "DELETE":
        return None
    if (ctx.get("host") or "").lower() not in PROTECTED_HOSTS:
        return None
    return vis.block(f"DELETE to {ctx['host']} is not allowed (todo extension)")


# -- host-backed glue ---------------------------------------------------------------

def load_items() -> list[dict]:
    return list(vis.state.get(STATE_KEY, []))


def save_items(items: list[dict]) -> None:
    vis.state[STATE_KEY] = items


class TodoTools:
    """The ``todo`` namespace offered to the model."""

    @vis.method(tag="mutation")
    def add(self, text: str) -> Todo:
        """Add a todo item and return it.

        Args:
            text: what to do, one line; surrounding whitespace is collapsed.
        """
        items, item = add_item(load_items(), text)
        save_items(items)
        vis.log("info", f"todo #{item['id']} added")
        return to_todo(item)

    @vis.method(tag="mutation")
    def done(self, id: int) -> Todo:
        """Mark todo ``id`` as done and return it. Raises LookupError for an unknown id."""
        items, item = complete_item(load_items(), id)
        save_items(items)
        return to_todo(item)

    def list(self, include_done: bool = False) -> list[Todo]:
        """The todo items in creation order.

        Args:
            include_done: also return completed items (default: False, open items only).
        """
        items = load_items()
        return [to_todo(i) for i in (items if include_done else open_items(items))]


def todos_command(ctx: dict):
    """``/todos``, ``/todos add <text>``, ``/todos done <id>``.

    ``ctx`` is ``{"channel", "args", "raw", "session_id"}``; ``args`` is the list of
    whitespace-separated words after the command name, ``raw`` the whole line.
    """
    argv = list(ctx.get("args") or [])
    verb, rest = (argv[0], " ".join(argv[1:])) if argv else ("", "")
    items = load_items()
    if verb == "add":
        try:
            items, item = add_item(items, rest)
        except ValueError as exc:
            return vis.err(str(exc), "usage: `/todos add <text>`")
        save_items(items)
        return vis.ok(f"Added #{item['id']}", render(items))
    if verb == "done":
        try:
            items, _ = complete_item(items, int(rest))
        except (ValueError, LookupError) as exc:
            return vis.err(f"cannot complete {rest!r}: {exc}", "usage: `/todos done <id>`")
        save_items(items)
        return vis.ok(f"Completed #{rest}", render(items))
    if verb:
        return vis.err(f"unknown sub-command {verb!r}", "usage: `/todos [add <text> | done <id>]`")
    return vis.ok(f"{len(open_items(items))} open todo(s)", render(items))


def shell_hook(call: dict) -> dict | None:
    """Before every ``shell`` tool call (``call`` = ``{"op", "args"}``)."""
    return push_guard(call, load_items())


def _ctx(env: dict) -> dict:
    return {"session_env": {"todo": {"open": len(open_items(load_items()))}}}


vis.register(vis.Extension(
    name=NAME,
    alias=NAME,
    description="A todo list shared by the user (/todos) and the model (todo.*).",
    prompt=("Use todo.add, todo.done and todo.list to track multi-step work. "
            "Discover them with apropos(r\"^todo\\.\") and read doc(\"todo.add\")."),
    symbols=[vis.Symbol(TodoTools(), name="todo")],
    slash_commands=[vis.SlashCommand("todos", todos_command, doc="List or edit the todo list",
                                     usage="/todos [add <text> | done <id>]")],
    op_hooks=[vis.OpHook(["shell"], shell_hook)],
    network_filters=[vis.NetworkFilter(delete_filter)],
    ctx=_ctx,
))
