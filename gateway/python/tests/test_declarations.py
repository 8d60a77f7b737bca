"""Module surface and declaration validation."""

import dataclasses
import importlib
import inspect

import pytest

import blockether.vis.extension as vis
from blockether.vis.extension import _host


def tool(x: str) -> str:
    """Echo x."""
    return x


def undocumented(x):
    return x


def sym():
    return vis.Symbol(tool)


# -- module surface --------------------------------------------------------------

def test_the_sdk_imports_as_blockether_vis_extension_and_not_as_vis():
    assert importlib.import_module("blockether.vis.extension") is vis
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("vis")


def test_the_retired_lowercase_builders_do_not_exist():
    for name in ("extension", "symbol", "slash", "op_hook", "network_filter", "provider"):
        assert not hasattr(vis, name), name


def test_register_extension_is_the_same_function_as_register():
    assert vis.register_extension is vis.register


def test_every_public_name_of_the_seeds_is_exported():
    names = ["Extension", "Symbol", "method", "SlashCommand", "OpHook", "NetworkFilter",
             "Provider", "ProviderPreset", "ProviderCredential", "ProviderStatus",
             "ProviderModel", "ProviderLimits", "ProviderLimit", "ProviderLimitWindow",
             "ProviderError", "Activity", "ActivityPresentation", "ActivitySection",
             "ActivityHeading", "ActivityText", "ActivityMarkdown", "ActivityCode",
             "ActivityDiff", "ActivityTable", "ActivityProgress", "ActivityImage",
             "ActivityVideo", "ActivityAudio", "ActivityFile", "register", "ok", "err",
             "block", "strings_of", "state", "log", "notify", "ask", "live", "shell",
             "jailed_shell", "jailed_shell_session", "fs", "publish_activity", "host_env",
             "GATE_OPS"]
    missing = [n for n in names if not hasattr(vis, n)]
    assert missing == []
    assert set(names) <= set(vis.__all__)


# -- frozen, slotted, pure -------------------------------------------------------

def _instances():
    fn = lambda ctx: None  # noqa: E731
    return [
        vis.Extension(name="x", description="d"), sym(), vis.SlashCommand("s", fn),
        vis.OpHook(["shell"], fn), vis.NetworkFilter(fn), vis.Provider("p", "P"),
        vis.Activity(), vis.ActivityText("t"), vis.ActivityPresentation("h", "s"),
        vis.ActivitySection("h", "s"), vis.ProviderPreset(), vis.ProviderLimits(),
    ]


def test_every_declaration_is_a_frozen_slotted_dataclass():
    for item in _instances():
        assert dataclasses.is_dataclass(item)
        assert not hasattr(item, "__dict__"), type(item).__name__
        field = dataclasses.fields(item)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(item, field, None)


def test_extension_with_a_positional_argument_raises_type_error():
    with pytest.raises(TypeError):
        vis.Extension("x", "d")


def test_construction_performs_no_host_call(bridge):
    vis.Extension(name="x", description="d", alias="a", symbols=[sym()], env=["ACME_KEY"])
    assert bridge.calls == []


def test_mutating_a_list_passed_to_extension_changes_nothing():
    symbols, env = [sym()], ["A"]
    ext = vis.Extension(name="x", description="d", alias="a", symbols=symbols, env=env)
    symbols.append(vis.Symbol(tool, name="other"))
    env.append("B")
    assert ext.symbols == (symbols[0],)
    assert ext.env == ("A",)
    for key in ("symbols", "slash_commands", "op_hooks", "network_filters", "providers", "env"):
        assert isinstance(getattr(ext, key), tuple)


# -- Extension messages -----------------------------------------------------------

def test_extension_without_name_raises_type_error():
    with pytest.raises(TypeError):
        vis.Extension(description="d")


@pytest.mark.parametrize("kwargs, exc, fragment", [
    ({"name": " ", "description": "d"}, ValueError, "requires name"),
    ({"name": 3, "description": "d"}, ValueError, "requires name"),
    ({"name": "x", "description": ""}, ValueError, "requires description"),
    ({"name": "x", "description": "d", "symbols": "SYM"}, ValueError, "requires alias"),
    ({"name": "x", "description": "d", "ctx": 1}, ValueError, "must be a callable"),
    ({"name": "x", "description": "d", "activation": "yes"}, ValueError, "must be a callable"),
    ({"name": "x", "description": "d", "env": "X"}, ValueError, "must be a list"),
    ({"name": "x", "description": "d", "env": ["1X"]}, ValueError, "1X"),
    ({"name": "x", "description": "d", "alias": 3}, TypeError, "alias"),
    ({"name": "x", "description": "d", "prompt": 3}, TypeError, "prompt"),
    ({"name": "x", "description": "d", "kind": 3}, TypeError, "kind"),
    ({"name": "x", "description": "d", "version": 1.0}, TypeError, "version"),
])
def test_extension_validation_messages(kwargs, exc, fragment):
    if kwargs.get("symbols") == "SYM":
        kwargs = dict(kwargs, symbols=[sym()])
    with pytest.raises(exc, match=fragment):
        vis.Extension(**kwargs)


def test_extension_exact_messages_follow_the_spec():
    with pytest.raises(ValueError) as e:
        vis.Extension(name="", description="d")
    assert str(e.value) == "vis.Extension requires name=<non-empty string>"
    with pytest.raises(ValueError) as e:
        vis.Extension(name="x", description="d", symbols=[sym()])
    assert str(e.value) == "vis.Extension requires alias=<string> when symbols are declared"
    with pytest.raises(ValueError) as e:
        vis.Extension(name="x", description="d", ctx="no")
    assert str(e.value) == "vis.Extension ctx must be a callable"


def test_alias_is_checked_before_the_types_of_symbols():
    with pytest.raises(ValueError, match="requires alias"):
        vis.Extension(name="x", description="d", symbols=[{"raw": "dict"}])


@pytest.mark.parametrize("key", ["symbols", "slash_commands", "op_hooks", "network_filters",
                                 "providers"])
def test_a_raw_dict_in_any_collection_raises_type_error(key):
    with pytest.raises(TypeError, match="must contain"):
        vis.Extension(name="x", description="d", alias="a", **{key: [{"name": "raw"}]})


def test_symbols_must_contain_exactly_symbol_declarations():
    with pytest.raises(TypeError) as e:
        vis.Extension(name="x", description="d", alias="a", symbols=[tool])
    assert str(e.value) == "vis.Extension symbols must contain Symbol declarations"


def test_extension_refuses_async_callbacks():
    async def ctx(env):
        return {}
    with pytest.raises(TypeError, match="synchronous"):
        vis.Extension(name="x", description="d", ctx=ctx)


def test_extension_refuses_two_tools_with_the_same_name():
    with pytest.raises(ValueError, match="'tool' more than once"):
        vis.Extension(name="x", description="d", alias="a", symbols=[sym(), sym()])


def test_extension_accepts_every_documented_argument():
    ext = vis.Extension(
        name="acme", description="Acme.", alias="acme", symbols=[sym()],
        prompt=lambda env: None, activation=lambda env: True,
        slash_commands=[vis.SlashCommand("a", lambda c: "ok")],
        op_hooks=[vis.OpHook(["shell"], lambda c: None)],
        network_filters=[vis.NetworkFilter(lambda c: None)],
        providers=[vis.Provider("acme", "Acme")], ctx=lambda env: {}, env=["ACME_KEY"],
        kind="python", version="1.0")
    assert ext.members[0].full_name == "tool"


# -- Symbol --------------------------------------------------------------------------

def test_symbol_of_a_function_without_docstring_needs_a_docstring():
    with pytest.raises(ValueError) as e:
        vis.Symbol(undocumented)
    assert "needs a docstring - it becomes the model-facing doc()" in str(e.value)


@pytest.mark.parametrize("name", ["_x", "bad-name", "1a", ""])
def test_symbol_names_must_be_public_identifiers(name):
    with pytest.raises(ValueError, match="vis.Symbol name must be a public Python identifier"):
        vis.Symbol(tool, name=name)


def test_symbol_tag_must_be_observation_or_mutation():
    with pytest.raises(ValueError, match="tag"):
        vis.Symbol(tool, tag="write")


def test_symbol_is_hidden_must_be_exactly_bool():
    with pytest.raises(TypeError):
        vis.Symbol(tool, is_hidden=1)


def test_symbol_activity_must_be_an_activity():
    with pytest.raises(TypeError):
        vis.Symbol(tool, activity={"presenter": "tests"})


def test_symbol_name_defaults_to_the_function_name_and_accepts_positional_arguments():
    s = vis.Symbol(tool, "echo", "mutation", True)
    assert (s.name, s.tag, s.is_hidden) == ("echo", "mutation", True)
    assert vis.Symbol(tool).name == "tool"


def test_an_async_tool_is_refused_at_declaration_naming_the_function():
    async def fetch(url: str) -> str:
        """Fetch a URL."""
    with pytest.raises(TypeError) as e:
        vis.Symbol(fetch)
    assert "fetch is async; tool functions must be synchronous" in str(e.value)


def test_an_async_generator_tool_is_refused():
    async def stream():
        """Stream."""
        yield 1
    with pytest.raises(TypeError, match="is async"):
        vis.Symbol(stream)


def test_an_object_with_an_async_method_is_refused():
    class Api:
        async def get(self):
            """Get."""
    with pytest.raises(TypeError, match="get is async"):
        vis.Symbol(Api(), name="api")


def test_an_async_function_behind_a_wraps_wrapper_is_refused():
    import functools

    async def inner():
        """Inner."""

    @functools.wraps(inner)
    def outer():
        return inner()
    with pytest.raises(TypeError, match="is async"):
        vis.Symbol(outer)


# -- object namespaces ------------------------------------------------------------------

class Labels:
    def add(self, name: str) -> None:
        """Add a label."""


class Repo:
    def __init__(self):
        self.labels = Labels()

    def show(self) -> str:
        """Show the repo."""

    def _secret(self):
        """Never exported."""


def test_nested_attribute_objects_become_dotted_members_and_private_methods_are_excluded():
    s = vis.Symbol(Repo(), name="repo")
    assert [m.full_name for m in s.members] == ["repo.show", "repo.labels.add"]
    assert [m.path for m in s.members] == ["show", "labels.add"]


@pytest.mark.parametrize("value, type_name", [
    (3, "int"), ("x", "str"), (inspect, "module"), (Labels, "type"), ([1], "list")])
def test_a_public_unsupported_attribute_is_rejected_with_its_path(value, type_name):
    repo = Repo()
    repo.extra = value
    with pytest.raises(ValueError) as e:
        vis.Symbol(repo, name="repo")
    assert f"public attribute 'repo.extra' has unsupported value of type {type_name}" in str(e.value)
    assert "make the attribute private" in str(e.value)


def test_a_repeated_object_is_rejected_with_both_paths():
    repo = Repo()
    repo.again = repo.labels
    with pytest.raises(ValueError) as e:
        vis.Symbol(repo, name="repo")
    assert "'repo.again' repeats the object already exposed at 'repo.labels'" in str(e.value)


def test_a_cycle_is_rejected_with_its_path():
    repo = Repo()
    repo.labels.parent = repo
    with pytest.raises(ValueError) as e:
        vis.Symbol(repo, name="repo")
    assert "'repo.labels.parent' repeats the object already exposed at 'repo'" in str(e.value)


def test_a_namespace_without_public_methods_is_rejected():
    class Empty:
        def _hidden(self):
            """x"""
    with pytest.raises(ValueError, match="requires at least one public method"):
        vis.Symbol(Empty(), name="empty")


def test_activity_on_a_namespace_is_rejected():
    with pytest.raises(ValueError) as e:
        vis.Symbol(Repo(), name="repo", activity=vis.Activity())
    assert str(e.value) == "declare object Activity on each vis.method(), not its namespace"


@pytest.mark.parametrize("name", [None, "_repo", "re po"])
def test_a_namespace_needs_a_public_name(name):
    with pytest.raises(ValueError) as e:
        vis.Symbol(Repo(), name=name)
    assert str(e.value) == "vis.Symbol(object, ...) requires name=<public Python identifier>"


def test_a_namespace_method_without_docstring_is_rejected():
    class Api:
        def get(self):
            return 1
    with pytest.raises(ValueError, match="needs a docstring"):
        vis.Symbol(Api(), name="api")


def test_vis_method_changes_the_member_tag_without_changing_the_signature():
    class Api:
        def create(self, title: str, *, draft: bool = False) -> None:
            """Create."""
    before = inspect.signature(Api.create)
    Api.create = vis.method(tag="mutation", is_hidden=True)(Api.create)
    assert inspect.signature(Api.create) == before
    (member,) = vis.Symbol(Api(), name="api").members
    assert (member.tag, member.is_hidden) == ("mutation", True)
    assert member.contract["tag"] == "mutation"


def test_vis_method_works_bare_and_validates_its_options():
    def f():
        """f"""
    assert vis.method(f) is f
    with pytest.raises(ValueError):
        vis.method(tag="write")
    with pytest.raises(TypeError):
        vis.method(activity="x")
    with pytest.raises(ValueError):
        vis.method(3)


def test_vis_method_unwraps_staticmethod_and_classmethod():
    class Api:
        @vis.method(tag="mutation")
        @staticmethod
        def reset() -> None:
            """Reset."""
    (member,) = vis.Symbol(Api(), name="api").members
    assert member.tag == "mutation"
    assert member.contract["signature"] == ""


def test_a_hidden_member_stays_a_member():
    class Api:
        @vis.method(is_hidden=True)
        def internal(self) -> None:
            """Internal."""

        def public(self) -> None:
            """Public."""
    members = vis.Symbol(Api(), name="api").members
    assert [(m.full_name, m.is_hidden) for m in members] == [
        ("api.internal", True), ("api.public", False)]


# -- SlashCommand, OpHook, NetworkFilter ------------------------------------------------

def test_slash_command_validation():
    with pytest.raises(ValueError):
        vis.SlashCommand(" ", lambda c: None)
    with pytest.raises(ValueError):
        vis.SlashCommand("x", "not callable")
    with pytest.raises(TypeError):
        vis.SlashCommand("x", lambda c: None, doc=3)
    with pytest.raises(TypeError):
        vis.SlashCommand("x", lambda c: None, usage=["u"])
    cmd = vis.SlashCommand("x", print, "Doc.", "/x <arg>")
    assert (cmd.name, cmd.doc, cmd.usage) == ("x", "Doc.", "/x <arg>")


@pytest.mark.parametrize("ops, phase", [
    ("shell", "before"), ([], "before"), (["fs_access", "shell"], "before"),
    (["fs_access"], "after"), (["shell"], "around"), ([""], "before")])
def test_op_hook_refusals(ops, phase):
    with pytest.raises(ValueError):
        vis.OpHook(ops, lambda c: None, phase=phase)


def test_op_hook_requires_a_callable_and_stores_ops_as_a_tuple():
    with pytest.raises(ValueError, match="callable"):
        vis.OpHook(["shell"], None)
    ops = ["shell", "patch"]
    hook = vis.OpHook(ops, lambda c: None, phase="after")
    ops.append("x")
    assert hook.ops == ("shell", "patch") and hook.phase == "after" and not hook.is_gate
    assert vis.OpHook(["fs_access"], lambda c: None).is_gate
    assert vis.GATE_OPS == ("fs_access",)


def test_network_filter_requires_a_synchronous_callable():
    with pytest.raises(ValueError):
        vis.NetworkFilter("x")

    async def f(ctx):
        return None
    with pytest.raises(TypeError):
        vis.NetworkFilter(f)


# -- result values ----------------------------------------------------------------

def test_ok_err_and_block_values():
    assert vis.ok("Done", "**b**", {"n": 1}) == {
        "marker": "slash_result", "status": "ok", "title": "Done", "body": "**b**",
        "data": {"n": 1}}
    assert vis.err(404) == {"marker": "slash_result", "status": "error", "title": "404",
                            "body": None, "data": None}
    assert vis.block(ValueError("no")) == {"marker": "block", "reason": "no"}


def test_strings_of_returns_every_string_leaf_keys_included():
    assert vis.strings_of({"a": ["b", ("c",)], "d": {"e"}}) == ["a", "b", "c", "d", "e"]
    assert vis.strings_of([1, None, {"k": 2}]) == ["k"]


def test_host_env_reads_os_environ_with_a_default(monkeypatch):
    monkeypatch.setenv("VIS_SDK_TEST_VALUE", "v")
    assert vis.host_env("VIS_SDK_TEST_VALUE") == "v"
    assert vis.host_env("VIS_SDK_TEST_ABSENT", "d") == "d"
    assert vis.host_env("VIS_SDK_TEST_ABSENT") is None


def test_no_bridge_call_happens_for_any_constructor(bridge):
    _instances()
    assert bridge.calls == [] and _host.get_bridge() is bridge


def test_a_callable_without_a_readable_signature_is_refused_clearly():
    with pytest.raises(ValueError, match="cannot read the signature of next"):
        vis.Symbol(next)


def test_a_bound_method_symbol_excludes_self():
    class Api:
        def get(self, key: str, /) -> str:
            """Get a key."""
            return key
    s = vis.Symbol(Api().get)
    assert s.name == "get"
    assert s.contract["signature"] == "key, /"
    assert s.spec["params"] == ["key"]


def test_a_vis_method_activity_is_kept_on_the_member_and_its_spec():
    activity = vis.Activity(presenter="tests", label="Run checks")

    class Checks:
        @vis.method(activity=activity)
        def run(self) -> None:
            """Run the checks."""
    s = vis.Symbol(Checks(), name="checks")
    assert s.members[0].activity is activity
    assert s.spec["methods"][0]["activity"] == {"presenter": "tests", "show_start": True,
                                                "label": "Run checks"}


@pytest.mark.parametrize("value", [42, "text", None, [1], inspect, Labels])
def test_a_scalar_builtin_module_or_class_is_not_a_namespace(value):
    with pytest.raises(ValueError, match="cannot export a value of type"):
        vis.Symbol(value, name="thing")
