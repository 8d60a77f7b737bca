"""vis.register, the loader and the catalog (docs/decisions.md, E7)."""

import json
import os

import pytest

import blockether.vis.extension as vis
from blockether.vis.extension import _host, _loader, _registry, _runtime

GOOD = '''
import blockether.vis.extension as vis

def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b

def secret() -> str:
    """Hidden helper."""
    return "s"

vis.register(vis.Extension(
    name="calc", alias="calc", description="Arithmetic.", version="1.2",
    symbols=[vis.Symbol(add), vis.Symbol(secret, is_hidden=True)],
    slash_commands=[vis.SlashCommand("sum", lambda ctx: "ok", doc="Sum.", usage="/sum a b")],
    op_hooks=[vis.OpHook(["fs_access"], lambda call: None)],
    network_filters=[vis.NetworkFilter(lambda ctx: None)],
    providers=[vis.Provider("calc", "Calc")],
    prompt="Use calc.add.",
))
'''


# -- register ---------------------------------------------------------------------------

def test_register_refuses_anything_but_an_extension():
    with pytest.raises(TypeError):
        vis.register({"name": "x"})


def test_register_twice_in_one_file_raises_the_once_per_file_error():
    vis.register(vis.Extension(name="first", description="d"))
    with pytest.raises(ValueError) as e:
        vis.register(vis.Extension(name="second", description="d"))
    message = str(e.value)
    assert message.startswith("vis.register() may only be called once per file; extension "
                              "'first' is already registered.")
    assert "Rename the entrypoint (e.g. demo.py -> demo_bridge.py)" in message


def test_register_resolves_declared_env_into_os_environ(bridge):
    os.environ.pop("ACME_API_KEY", None)
    os.environ.pop("ACME_MISSING", None)
    os.environ.pop("PROJECT_NAME", None)
    # The host answers the declared names that resolved and the names the project defines.
    bridge.responses["declare_env"] = lambda p: {"ACME_API_KEY": "k-1", "PROJECT_NAME": "x",
                                                 "BAD": 3}
    vis.register(vis.Extension(name="acme", description="d", env=["ACME_API_KEY", "ACME_MISSING"]))
    assert bridge.calls == [("declare_env", {"names": ["ACME_API_KEY", "ACME_MISSING"],
                                             "extension": None})]
    assert os.environ["ACME_API_KEY"] == "k-1"
    assert os.environ["PROJECT_NAME"] == "x"
    assert "ACME_MISSING" not in os.environ and "BAD" not in os.environ


def test_register_without_env_still_asks_the_gateway_for_the_projects_own_names(bridge):
    os.environ.pop("FROM_DOTENV", None)
    bridge.responses["declare_env"] = {"FROM_DOTENV": "yes"}
    vis.register(vis.Extension(name="plain", description="d"))
    assert bridge.calls == [("declare_env", {"names": [], "extension": None})]
    assert os.environ["FROM_DOTENV"] == "yes"


def test_a_failing_declare_env_leaves_the_file_unregistered(bridge):
    def fail(payload):
        raise RuntimeError("env resolution failed")
    bridge.responses["declare_env"] = fail
    ext = vis.Extension(name="acme", description="d", env=["ACME_API_KEY"])
    with pytest.raises(RuntimeError):
        vis.register(ext)
    assert _registry.registered(__file__) is None
    bridge.responses["declare_env"] = {}
    vis.register(ext)
    assert _registry.registered(__file__) is ext


def test_register_without_env_needs_no_gateway():
    ext = vis.Extension(name="plain", description="d")
    vis.register(ext)
    assert _registry.registered(__file__) is ext
    assert _host.current_extension() == "plain"


def test_the_registration_spec_has_the_documented_keys():
    def ping() -> str:
        """Ping."""
        return "pong"
    ext = vis.Extension(name="x", description="d", alias="a", symbols=[vis.Symbol(ping)],
                        op_hooks=[vis.OpHook(["shell"], print, "after")])
    spec = _registry.spec_of(ext)
    assert set(spec) == {"name", "description", "version", "kind", "alias", "activation",
                         "symbols", "prompt", "slash_commands", "op_hooks", "ctx", "providers",
                         "network_filters", "env"}
    assert spec["kind"] == "python" and spec["symbols"][0]["marker"] == "symbol"
    assert spec["symbols"][0]["fn"] is ping
    assert spec["op_hooks"] == [{"marker": "op_hook", "ops": ["shell"], "fn": print,
                                 "phase": "after"}]


# -- loader -------------------------------------------------------------------------------

def test_a_good_file_loads_and_registers(write):
    result = _loader.load_file(write("calc.py", GOOD))
    assert result.ok and result.error is None
    assert result.extension.name == "calc"
    assert result.module_name.startswith("vis_ext_") and result.module_name.endswith("_calc")


def test_entry_files_get_postponed_annotations(write):
    result = _loader.load_file(write("late.py", '''
        import blockether.vis.extension as vis

        def f(x: Undefined, y: "list[AlsoUndefined]") -> Nowhere.Thing:
            """Uses names that do not exist."""

        vis.register(vis.Extension(name="late", alias="late", description="d",
                                   symbols=[vis.Symbol(f)]))
    '''))
    assert result.ok, result.error
    contract = result.extension.symbols[0].contract
    assert contract["parameters"][0]["type"] == {"kind": "unresolved", "name": "Undefined"}
    assert contract["returns"] == {"kind": "unresolved", "name": "Nowhere.Thing"}


def test_a_broken_file_reports_file_message_and_traceback(write):
    path = write("broken.py", '''
        import blockether.vis.extension as vis

        def helper():
            raise KeyError("missing-config")

        helper()
    ''')
    result = _loader.load_file(path)
    assert not result.ok and result.extension is None
    err = result.error
    assert err.file == os.path.realpath(path)
    assert err.type == "KeyError" and err.message == "KeyError: 'missing-config'"
    assert "broken.py" in err.traceback and "in helper" in err.traceback
    assert "_loader.py" not in err.traceback
    assert json.loads(json.dumps(err.to_dict()))["type"] == "KeyError"
    assert result.module_name not in __import__("sys").modules


def test_a_syntax_error_is_reported_with_its_line(write):
    result = _loader.load_file(write("syntax.py", "def f(:\n    pass\n"))
    assert result.error.type == "SyntaxError"
    assert "line 1" in result.error.traceback


def test_a_symbol_without_docstring_fails_the_load(write):
    result = _loader.load_file(write("nodoc.py", '''
        import blockether.vis.extension as vis
        def f(): pass
        vis.register(vis.Extension(name="n", alias="n", description="d",
                                   symbols=[vis.Symbol(f)]))
    '''))
    assert result.error.type == "ValueError" and "needs a docstring" in result.error.message


def test_a_file_that_calls_register_twice_fails_and_stays_unregistered(write):
    path = write("twice.py", '''
        import blockether.vis.extension as vis
        vis.register(vis.Extension(name="one", description="d"))
        vis.register(vis.Extension(name="two", description="d"))
    ''')
    result = _loader.load_file(path)
    assert not result.ok and "only be called once per file" in result.error.message
    assert "'one' is already registered" in result.error.message
    assert _registry.registered(os.path.realpath(path)) is None


def test_a_file_that_imports_itself_as_a_module_hits_the_once_per_file_error(write):
    path = write("selfish.py", '''
        import blockether.vis.extension as vis
        vis.register(vis.Extension(name="selfish", description="d"))
        import selfish  # the entry shadows a module of the same name
    ''')
    result = _loader.load_file(path)
    assert not result.ok and "only be called once per file" in result.error.message


def test_a_file_that_never_registers_is_reported(write):
    path = write("lazy.py", "x = 1\n")
    result = _loader.load_file(path)
    assert result.error.message == \
        f"{os.path.realpath(path)} never called vis.register(vis.Extension(...))"


def test_sys_exit_at_load_is_a_load_failure_not_a_worker_exit(write):
    result = _loader.load_file(write("exits.py", "import sys\nsys.exit(3)\n"))
    assert result.error.type == "SystemExit"


def test_reloading_the_same_file_registers_again(write):
    path = write("calc.py", GOOD)
    first = _loader.load_file(path)
    second = _loader.load_file(path)
    assert first.ok and second.ok and first.module_name != second.module_name


def test_a_package_entry_imports_its_sibling_modules(write):
    write("pkg/helpers.py", "GREETING = 'hi'\n")
    result = _loader.load_file(write("pkg/extension.py", '''
        import blockether.vis.extension as vis
        from helpers import GREETING
        vis.register(vis.Extension(name="pkg", description=GREETING))
    '''))
    assert result.ok and result.extension.description == "hi"
    assert result.module_name.endswith("_pkg")


def test_state_used_at_module_level_after_register_acts_for_the_extension(write, bridge):
    result = _loader.load_file(write("stateful.py", '''
        import blockether.vis.extension as vis
        vis.register(vis.Extension(name="stateful", description="d"))
        vis.state["loaded"] = True
    '''))
    assert result.ok
    assert bridge.calls == [("declare_env", {"names": [], "extension": None}),
                            ("state_put", {"key": "loaded", "value": True,
                                           "extension": "stateful"})]
    assert _host.current_extension() is None  # the load context does not leak


# -- catalog ------------------------------------------------------------------------------

def test_catalog_describes_the_registration_as_json_data(write):
    ext = _loader.load_file(write("calc.py", GOOD)).extension
    cat = _loader.catalog(ext)
    assert json.loads(json.dumps(cat)) == cat
    assert (cat["name"], cat["description"], cat["version"], cat["kind"]) == (
        "calc", "Arithmetic.", "1.2", "python")
    assert cat["prompt"] == "Use calc.add." and cat["has_prompt_fn"] is False
    add, secret = (s["members"][0] for s in cat["symbols"])
    assert add["name"] == "add" and add["is_hidden"] is False
    assert add["contract"]["signature"] == "a, b=..."
    assert add["doc"].startswith("Add two numbers.\n\nEffect: ")
    assert add["tool"]["parameters"]["required"] == ["a"]
    assert secret["is_hidden"] is True
    assert [t["name"] for t in cat["tools"]] == ["add"]
    assert cat["slash_commands"] == [{"name": "sum", "doc": "Sum.", "usage": "/sum a b"}]
    assert cat["op_hooks"] == [{"ops": ["fs_access"], "phase": "before", "is_gate": True}]
    assert cat["network_filters"] == [{"index": 0}]
    assert cat["providers"][0]["id"] == "calc"


# -- runtime helpers -----------------------------------------------------------------------

def test_call_tool_binds_json_arguments_by_tool_name(write):
    ext = _loader.load_file(write("calc.py", GOOD)).extension
    assert _runtime.call_tool(ext, "add", {"a": 2, "b": 3}) == 5
    assert _runtime.call_tool(ext, "secret", {}) == "s"
    with pytest.raises(LookupError):
        _runtime.call_tool(ext, "nope", {})


def test_a_tool_with_render_gets_start_then_success_and_publishes_presentations(bridge):
    phases = []

    def render(*, phase, args, kwargs, result, error):
        phases.append((phase, args, kwargs, result, error))
        return vis.ActivityPresentation(phase, "")

    def work(n: int) -> int:
        """Double n."""
        return n * 2
    member = vis.Symbol(work, activity=vis.Activity(render=render)).members[0]
    assert _runtime.invoke(member, (4,), {}) == 8
    assert phases == [("start", (4,), {}, None, None), ("success", (4,), {}, 8, None)]
    assert [p["presentation"]["headline"] for op, p in bridge.calls] == ["start", "success"]


def test_a_failing_tool_renders_failure_and_reraises_the_original_error():
    phases = []

    def fail() -> None:
        """Fail."""
        raise KeyError("k")
    activity = vis.Activity(render=lambda **kw: phases.append(kw["phase"]) or None,
                            show_start=False)
    member = vis.Symbol(fail, activity=activity).members[0]
    with pytest.raises(KeyError):
        _runtime.invoke(member)
    assert phases == ["failure"]


def test_a_raising_render_leaves_the_tool_result_unchanged():
    def render(**kw):
        raise RuntimeError("render broke")

    def ok_tool() -> str:
        """Return ok."""
        return "ok"
    member = vis.Symbol(ok_tool, activity=vis.Activity(render=render)).members[0]
    assert _runtime.invoke(member) == "ok"


def test_slash_results_normalize_strings_none_ok_and_err():
    assert _runtime.slash_result("hello", "ext") == {"status": "ok", "title": "hello"}
    assert _runtime.slash_result(None, "ext") == {"status": "ok", "title": "ext: done"}
    assert _runtime.slash_result(vis.ok("Fine", "**b**"), "ext") == {
        "status": "ok", "title": "Fine", "body": "**b**"}
    assert _runtime.slash_result(vis.err("Bad", data={"x": 1}), "ext") == {
        "status": "error", "title": "Bad", "data": {"x": 1}}
    assert _runtime.slash_result(42, "ext") == {"status": "ok", "title": "42"}


def test_only_vis_block_denies():
    assert _runtime.is_block(vis.block("no"))
    for allow in (None, False, "no", {"reason": "no"}):
        assert not _runtime.is_block(allow)
