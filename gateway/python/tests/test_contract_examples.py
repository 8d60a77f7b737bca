"""The worked contract examples of the Extension API reference and its seed page."""

import json

import blockether.vis.extension as vis

TRACKER_SOURCE = '''
from dataclasses import dataclass
from typing import Annotated, Literal
import blockether.vis.extension as vis

@dataclass(frozen=True)
class Issue:
    """One tracker issue."""
    number: int
    state: Literal["open", "closed"]
    labels: tuple[str, ...] = ()

def find(query: Annotated[str, "Search text."], /, *, limit: int = 20,
         repo: str | None = None) -> list[Issue]:
    """Find issues matching a query."""

class Issues:
    def find(self, query: str) -> Issue:
        """Find one issue by query."""
    @vis.method(tag="mutation")
    def create(self, title: str) -> Issue:
        """Create one issue."""
    def _cache(self): ...

class Tracker:
    def __init__(self):
        self.issues = Issues()

vis.register(vis.Extension(
    name="tracker", alias="tracker", description="Issues.",
    symbols=[vis.Symbol(find), vis.Symbol(Tracker(), name="tracker")],
))
'''

ISSUE = {
    "kind": "record", "name": "Issue", "description": "One tracker issue.", "fields": [
        {"name": "number", "type": {"kind": "scalar", "name": "int"}, "required": True,
         "has_default": False, "default_is_none": False},
        {"name": "state", "type": {"kind": "literal", "name": "Literal",
                                   "values": ["open", "closed"]},
         "required": True, "has_default": False, "default_is_none": False},
        {"name": "labels", "type": {"kind": "generic", "name": "tuple", "variadic": True,
                                    "arguments": [{"kind": "scalar", "name": "str"}]},
         "required": False, "has_default": True, "default_is_none": False}]}

FIND_CONTRACT = {
    "version": 1, "name": "find", "tag": "observation",
    "description": "Find issues matching a query.",
    "signature": "query, /, *, limit=..., repo=None",
    "parameters": [
        {"name": "query", "kind": "positional_only", "required": True, "has_default": False,
         "default_is_none": False,
         "type": {"kind": "scalar", "name": "str", "description": "Search text."}},
        {"name": "limit", "kind": "keyword_only", "required": False, "has_default": True,
         "default_is_none": False, "type": {"kind": "scalar", "name": "int"}},
        {"name": "repo", "kind": "keyword_only", "required": False, "has_default": True,
         "default_is_none": True, "type": {"kind": "union", "name": "union", "arguments": [
             {"kind": "scalar", "name": "str"}, {"kind": "null", "name": "None"}]}}],
    "returns": {"kind": "generic", "name": "list", "arguments": [ISSUE]},
}


def _member(name, tag, description, param):
    return {"version": 1, "name": name, "tag": tag, "description": description,
            "signature": param,
            "parameters": [{"name": param, "kind": "positional_or_keyword", "required": True,
                            "has_default": False, "default_is_none": False,
                            "type": {"kind": "scalar", "name": "str"}}],
            "returns": ISSUE}


TRACKER_CONTRACT = {"version": 1, "name": "tracker", "members": [
    _member("tracker.issues.find", "observation", "Find one issue by query.", "query"),
    _member("tracker.issues.create", "mutation", "Create one issue.", "title"),
]}


def test_the_function_example_produces_exactly_the_documented_contract(load):
    ext = load(TRACKER_SOURCE)
    assert ext.symbols[0].contract == FIND_CONTRACT


def test_the_function_example_has_the_documented_spec_extras(load):
    spec = load(TRACKER_SOURCE).symbols[0].spec
    assert spec["params"] == ["query"]
    assert spec["varargs"] is False
    assert spec["marker"] == "symbol" and spec["name"] == "find" and spec["hidden"] is False


def test_the_namespace_example_produces_exactly_the_documented_contract(load):
    ext = load(TRACKER_SOURCE)
    assert ext.symbols[1].contract == TRACKER_CONTRACT


def test_namespace_member_specs_use_the_path_without_the_root(load):
    spec = load(TRACKER_SOURCE).symbols[1].spec
    assert spec["marker"] == "namespace"
    assert [m["name"] for m in spec["methods"]] == ["issues.find", "issues.create"]
    assert [m["contract"]["name"] for m in spec["methods"]] == [
        "tracker.issues.find", "tracker.issues.create"]


def test_worked_example_contracts_round_trip_through_json(load):
    ext = load(TRACKER_SOURCE)
    for symbol in ext.symbols:
        assert json.loads(json.dumps(symbol.contract)) == symbol.contract


TIMING = '''
import functools

def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper
'''

REPORTS = '''
from __future__ import annotations
from dataclasses import dataclass
from timing import timed
import blockether.vis.extension as vis

@dataclass(frozen=True)
class Line:
    text: str

class Reports:
    @timed
    def lines(self, prefix: str = "all") -> tuple[Line, ...]:
        """List report lines without changing anything."""
        return (Line(prefix),)

vis.register(vis.Extension(name="reports", alias="reports", description="Reports.",
                           symbols=[vis.Symbol(Reports(), name="reports")]))
'''

LINE_TUPLE = {"kind": "generic", "name": "tuple", "variadic": True, "arguments": [
    {"kind": "record", "name": "Line", "fields": [
        {"name": "text", "type": {"kind": "scalar", "name": "str"}, "required": True,
         "has_default": False, "default_is_none": False}]}]}


def test_the_cross_module_wrapper_example_resolves_in_the_wrapped_module(write, load):
    write("timing.py", TIMING)
    contract = load(REPORTS, "reports.py").symbols[0].contract
    assert contract == {"version": 1, "name": "reports", "members": [{
        "version": 1, "name": "reports.lines", "tag": "observation",
        "description": "List report lines without changing anything.",
        "signature": "prefix=...",
        "parameters": [{"name": "prefix", "kind": "positional_or_keyword", "required": False,
                        "has_default": True, "default_is_none": False,
                        "type": {"kind": "scalar", "name": "str"}}],
        "returns": LINE_TUPLE}]}


def test_the_wrapped_namespace_method_still_runs_with_its_default(write, load):
    write("timing.py", TIMING)
    member = load(REPORTS, "reports.py").symbols[0].members[0]
    (line,) = member.fn()
    assert line.text == "all"


DECORATORS = '''
from functools import wraps


def traced(fn):
    @wraps(fn)
    def call(*args, **kwargs):
        return fn(*args, **kwargs)
    return call
'''

SEED_TOOLS = '''
from __future__ import annotations
from dataclasses import dataclass
from decorators import traced


@dataclass(frozen=True)
class Result:
    text: str


class Tools:
    @traced
    def read(self, text: str = "ready") -> tuple[Result, ...]:
        """Read one result without changing state."""
        return (Result(text),)
'''


def test_the_seed_cross_module_example_expands_result_text_beneath_the_variadic_tuple(write):
    write("decorators.py", DECORATORS)
    path = write("tools.py", SEED_TOOLS)
    import importlib
    import sys
    sys.path.insert(0, str(path.parent))
    tools = importlib.import_module("tools")
    contract = vis.Symbol(tools.Tools(), name="tools").contract
    assert contract == {"version": 1, "name": "tools", "members": [{
        "version": 1, "name": "tools.read", "tag": "observation",
        "description": "Read one result without changing state.",
        "signature": "text=...",
        "parameters": [{"name": "text", "kind": "positional_or_keyword", "required": False,
                        "has_default": True, "default_is_none": False,
                        "type": {"kind": "scalar", "name": "str"}}],
        "returns": {"kind": "generic", "name": "tuple", "variadic": True, "arguments": [
            {"kind": "record", "name": "Result", "fields": [
                {"name": "text", "type": {"kind": "scalar", "name": "str"}, "required": True,
                 "has_default": False, "default_is_none": False}]}]}}]}
    assert tools.Tools().read() == (tools.Result("ready"),)


GREETER = '''
from dataclasses import dataclass
from typing import Annotated
import blockether.vis.extension as vis

@dataclass(frozen=True)
class Greeting:
    """A greeting and who it is for."""
    text: Annotated[str, "The greeting text."]
    name: Annotated[str, "Who is greeted."]

class Greeter:
    def hello(self, name: str, *, uppercase: bool = False) -> Greeting:
        """Generate greeting text; it never sends messages."""
        text = f"Hello, {name}!"
        return Greeting(text.upper() if uppercase else text, name)

vis.register(vis.Extension(name="vis-greeter", alias="greet", description="Greetings.",
                           prompt="Use greet.hello to generate greeting text.",
                           symbols=[vis.Symbol(Greeter(), name="greet")]))
'''


def test_the_seed_greeter_exports_greet_hello_with_annotated_field_descriptions(load):
    contract = load(GREETER).symbols[0].contract
    (hello,) = contract["members"]
    assert hello["name"] == "greet.hello"
    assert hello["signature"] == "name, *, uppercase=..."
    assert [p["kind"] for p in hello["parameters"]] == ["positional_or_keyword", "keyword_only"]
    assert hello["returns"] == {
        "kind": "record", "name": "Greeting", "description": "A greeting and who it is for.",
        "fields": [
            {"name": "text", "type": {"kind": "scalar", "name": "str",
                                      "description": "The greeting text."},
             "required": True, "has_default": False, "default_is_none": False},
            {"name": "name", "type": {"kind": "scalar", "name": "str",
                                      "description": "Who is greeted."},
             "required": True, "has_default": False, "default_is_none": False}]}


def test_the_minimal_todo_example_from_section_11_loads(load):
    ext = load('''
        import blockether.vis.extension as vis

        def add(text: str) -> dict:
            """Add one todo item and return the new count."""
            items = vis.state.get("items", [])
            items.append(text)
            vis.state["items"] = items
            return {"count": len(items)}

        def no_force_push(call):
            if "--force" in vis.strings_of(call["args"]):
                return vis.block("force push needs the user's approval")

        def no_delete(ctx):
            if ctx["phase"] in ("http", "https") and ctx["method"] == "DELETE":
                return vis.block(f"no DELETE to {ctx['host']}")

        vis.register(vis.Extension(
            name="todo", alias="todo", description="A small todo list.",
            symbols=[vis.Symbol(add, tag="mutation")],
            slash_commands=[vis.SlashCommand("todos", lambda ctx: vis.ok(
                f"{len(vis.state.get('items', []))} open"))],
            op_hooks=[vis.OpHook(["shell"], no_force_push)],
            network_filters=[vis.NetworkFilter(no_delete)],
            ctx=lambda env: {"session_env": {"todo": {"open": len(vis.state.get("items", []))}}},
        ))
    ''')
    contract = ext.symbols[0].contract
    assert contract["signature"] == "text"
    assert contract["tag"] == "mutation"
    assert contract["returns"] == {"kind": "generic", "name": "dict"}
    hook = ext.op_hooks[0].fn
    assert hook({"op": "shell", "args": [{"argv": ["git", "push", "--force"]}]}) == {
        "marker": "block", "reason": "force push needs the user's approval"}
    assert hook({"op": "shell", "args": [{"argv": ["git", "push"]}]}) is None
    assert ext.network_filters[0].fn({"phase": "https", "method": "DELETE", "host": "x.io"}) == \
        vis.block("no DELETE to x.io")


def test_the_seed_session_context_example_reads_state_of_its_extension(load, bridge):
    ext = load('''
        import blockether.vis.extension as vis

        def _ctx(env):
            return {"session_env": {"todo": {"open": len(vis.state.get("todos", []))}}}

        vis.register(vis.Extension(name="todo", description="Todo list.", ctx=_ctx))
    ''')
    bridge.state["todos"] = ["a", "b"]
    from blockether.vis.extension import _host
    with _host.acting_for(ext.name):
        assert ext.ctx({"cwd": "/w", "session_id": "s1", "channel": None}) == {
            "session_env": {"todo": {"open": 2}}}
    assert bridge.calls[-1] == ("state_get", {"key": "todos", "extension": "todo"})


def test_the_seed_environment_example_reads_the_key_after_registration(load, bridge):
    import os
    os.environ.pop("ACME_API_KEY", None)
    bridge.responses["declare_env"] = {"ACME_API_KEY": "k-123"}
    load('''
        import os
        import blockether.vis.extension as vis

        vis.register(vis.Extension(
            name="acme",
            description="Acme integration.",
            env=["ACME_API_KEY"],
        ))

        key = os.environ.get("ACME_API_KEY")   # absent when nothing resolves it
        assert key == "k-123"
    ''')
