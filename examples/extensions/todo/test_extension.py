"""Tests for the todo example: run ``python3 -m pytest examples/extensions`` from the repo root.

No gateway is needed: pure functions are called directly, host-backed code runs against
the SDK's ``RecordingBridge`` test double, and ``_loader.load_file`` loads the entry file
the way a gateway worker does.
"""

import os
import sys

import pytest

from blockether.vis.extension import _host, _loader, _runtime

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY = os.path.join(HERE, "extension.py")


@pytest.fixture
def loaded():
    """The entry file loaded like a worker loads it: (LoadResult, module)."""
    result = _loader.load_file(ENTRY)
    assert result.ok, result.error and result.error.traceback
    yield result, sys.modules[result.module_name]
    sys.modules.pop(result.module_name, None)


@pytest.fixture
def ext(loaded):
    return loaded[1]


@pytest.fixture
def bridge():
    """A fake gateway: vis.state lives in bridge.state, every host call is recorded."""
    recording = _host.RecordingBridge()
    _host.set_bridge(recording)
    with _host.acting_for("todo"):
        yield recording


# -- registration and contract ------------------------------------------------------------

def test_the_file_registers_one_extension_with_every_piece(loaded):
    result, _ = loaded
    extension = result.extension
    assert extension.name == "todo"
    assert [m.full_name for m in extension.members] == ["todo.add", "todo.done", "todo.list"]
    assert [c.name for c in extension.slash_commands] == ["todos"]
    assert [h.ops for h in extension.op_hooks] == [("shell",)]
    assert len(extension.network_filters) == 1
    catalog = _loader.catalog(extension)  # what `vis-gateway extension list` is built from
    assert [t["name"] for t in catalog["tools"]] == ["todo__add", "todo__done", "todo__list"]


def test_the_contract_documents_the_typed_signature(loaded):
    symbol = loaded[0].extension.symbols[0]
    contract = symbol.contract
    add = next(m for m in contract["members"] if m["name"] == "todo.add")
    assert add["tag"] == "mutation"
    assert [(p["name"], p["type"]["name"], p["required"]) for p in add["parameters"]] == [
        ("text", "str", True)]
    assert add["returns"]["kind"] == "record" and add["returns"]["name"] == "Todo"
    assert [f["name"] for f in add["returns"]["fields"]] == ["id", "text", "done"]
    listing = next(m for m in symbol.members if m.full_name == "todo.list")
    text = listing.doc()
    assert text.startswith("The todo items in creation order.")
    assert "Returns: list[Todo]" in text
    assert "default: False" in text  # defaults are withheld from the contract; say them in prose


# -- pure functions -----------------------------------------------------------------------

def test_add_and_complete_never_reuse_ids(ext):
    items, first = ext.add_item([], "  write   docs ")
    assert first == {"id": 1, "text": "write docs", "done": False}
    items, _ = ext.add_item(items, "ship")
    items, done = ext.complete_item(items, 1)
    assert done["done"] is True
    assert [i["id"] for i in ext.open_items(items)] == [2]
    assert ext.add_item(items, "later")[1]["id"] == 3
    with pytest.raises(ValueError):
        ext.add_item(items, "   ")
    with pytest.raises(LookupError):
        ext.complete_item(items, 99)


def test_render_is_a_markdown_checklist(ext):
    assert ext.render([]) == "_No todos._"
    items = [{"id": 1, "text": "a", "done": True}, {"id": 2, "text": "b", "done": False}]
    assert ext.render(items) == "- [x] #1 a\n- [ ] #2 b"


# -- op hook ----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["git push", "cd x && git push origin main",
                                     "git -c a=b push --force"])
def test_the_hook_blocks_git_push_while_todos_are_open(ext, bridge, command):
    bridge.state["items"] = [{"id": 4, "text": "fix tests", "done": False}]
    verdict = ext.shell_hook({"op": "shell", "args": [{"command": command}]})
    assert _runtime.is_block(verdict)
    assert "#4 fix tests" in verdict["reason"]


def test_the_hook_allows_other_commands_and_pushes_with_nothing_open(ext, bridge):
    bridge.state["items"] = [{"id": 1, "text": "x", "done": False}]
    assert ext.shell_hook({"op": "shell", "args": [{"command": "git status"}]}) is None
    assert ext.shell_hook({"op": "shell", "args": [{"command": "echo git pushed"}]}) is None
    bridge.state["items"] = [{"id": 1, "text": "x", "done": True}]
    assert ext.shell_hook({"op": "shell", "args": [{"command": "git push"}]}) is None


# -- network filter -----------------------------------------------------------------------

def _req(method, host, phase="http"):
    return {"phase": phase, "method": method, "host": host, "port": 8080, "path": "/x",
            "headers": {}, "body": None, "status": None}


def test_the_filter_blocks_delete_to_the_todo_service(ext):
    verdict = ext.delete_filter(_req("DELETE", "127.0.0.1"))
    assert _runtime.is_block(verdict)
    assert verdict["reason"] == "DELETE to 127.0.0.1 is not allowed (todo extension)"
    assert _runtime.is_block(ext.delete_filter(_req("delete", "todo.internal", "https")))


@pytest.mark.parametrize("ctx", [_req("GET", "127.0.0.1"), _req("DELETE", "example.com"),
                                 _req("DELETE", "127.0.0.1", "http-response"),
                                 {"phase": "socks", "method": None, "host": "127.0.0.1"}])
def test_the_filter_allows_everything_else(ext, ctx):
    assert ext.delete_filter(ctx) is None


def test_the_registered_filter_is_the_delete_filter(loaded):
    result, module = loaded
    assert result.extension.network_filters[0].fn is module.delete_filter


# -- tools and slash command through the SDK runtime (as the worker calls them) ------------

def test_tools_persist_in_vis_state(loaded, bridge):
    extension = loaded[0].extension
    added = _runtime.call_tool(extension, "todo__add", {"text": "write the guide"})
    assert added.text == "write the guide"
    # what crosses to the sandbox / the model: a frozen data record
    assert _runtime.to_portable(added) == {"__vis_object__": "Todo", "__vis_attrs__": {
        "id": 1, "text": "write the guide", "done": False}}
    _runtime.call_tool(extension, "todo.add", {"text": "benchmark"})
    _runtime.call_tool(extension, "todo.done", {"id": 1})
    assert bridge.state["items"] == [{"id": 1, "text": "write the guide", "done": True},
                                     {"id": 2, "text": "benchmark", "done": False}]
    listed = _runtime.call_tool(extension, "todo.list", {})
    assert [t.id for t in listed] == [2]
    assert ("log", {"level": "info", "message": "todo #1 added", "extension": "todo"}) \
        in bridge.calls


def test_the_slash_command(loaded, bridge):
    run = loaded[0].extension.slash_commands[0].run

    def slash(line):  # the ctx the gateway passes for "/todos <line>"
        return run({"channel": "web", "session_id": "s1", "args": line.split(),
                    "raw": f"/todos {line}".strip()})

    assert _runtime.slash_result(slash(""), "todo")["title"] == "0 open todo(s)"
    added = _runtime.slash_result(slash("add buy  milk"), "todo")
    assert added == {"status": "ok", "title": "Added #1", "body": "- [ ] #1 buy milk"}
    assert slash("done 1")["status"] == "ok"
    assert slash("done nope")["status"] == "error"
    assert slash("add")["status"] == "error"
    assert slash("frobnicate")["status"] == "error"
    assert bridge.state["items"][0]["done"] is True
