"""What an extension author written from the reference page expects: per-extension
environment, porting hints for the older API, named non-finite results, ``vis.fs`` paths."""

import math
import os
import subprocess
import sys
import threading

import pytest

import blockether.vis.extension as vis
from blockether.vis.extension import _environ, _host, _legacy, _loader, _runtime


@pytest.fixture
def owner_environ():
    environ = _environ.install()
    try:
        yield environ
    finally:
        _environ.uninstall()


# -- os.environ per extension -------------------------------------------------------------

def test_two_extensions_in_one_worker_see_only_their_own_names(owner_environ, write, bridge):
    os.environ.pop("A_TOKEN", None)
    os.environ.pop("B_TOKEN", None)
    answers = iter([{"A_TOKEN": "a-1"}, {"B_TOKEN": "b-2"}])
    bridge.responses["declare_env"] = lambda payload: next(answers)
    a = _loader.load_file(write("a.py", '''
        import os
        import blockether.vis.extension as vis
        vis.register(vis.Extension(name="a", description="d", env=["A_TOKEN"]))
        SEEN = (os.environ.get("A_TOKEN"), os.environ.get("B_TOKEN"))
    '''))
    b = _loader.load_file(write("b.py", '''
        import os
        import blockether.vis.extension as vis
        vis.register(vis.Extension(name="b", description="d", env=["B_TOKEN"]))
        SEEN = (os.environ.get("A_TOKEN"), os.environ.get("B_TOKEN"))
    '''))
    assert a.ok and b.ok
    assert sys.modules[a.module_name].SEEN == ("a-1", None)
    assert sys.modules[b.module_name].SEEN == (None, "b-2")
    with _host.acting_for("a", a.file):
        assert os.environ.get("A_TOKEN") == "a-1" and "B_TOKEN" not in os.environ
        assert os.getenv("A_TOKEN") == "a-1"
    with _host.acting_for("b", b.file):
        assert os.environ.get("B_TOKEN") == "b-2" and "A_TOKEN" not in os.environ
    # Code acting for no extension sees the base environment, without either name.
    assert "A_TOKEN" not in os.environ and "B_TOKEN" not in os.environ
    assert "PATH" in os.environ


def test_writes_stay_in_the_extensions_view_and_children_inherit_it(owner_environ):
    owner_environ.install("/x/a.py", {"A_TOKEN": "a-1"})
    with _host.acting_for("a", "/x/a.py"):
        os.environ["A_EXTRA"] = "more"
        out = subprocess.run([sys.executable, "-c",
                              "import os; print(os.environ.get('A_TOKEN'), "
                              "os.environ.get('A_EXTRA'))"],
                             capture_output=True, text=True, check=True).stdout
        assert out.split() == ["a-1", "more"]
        assert os.system("test \"$A_TOKEN\" = a-1") == 0
        assert os.system("exit 3") == 3 << 8
        del os.environ["A_EXTRA"]
        assert "A_EXTRA" not in os.environ
    assert "A_EXTRA" not in os.environ and "A_TOKEN" not in os.environ
    out = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('A_TOKEN'))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "None"


def test_a_thread_started_by_an_extension_acts_for_it(owner_environ):
    owner_environ.install("/x/a.py", {"A_TOKEN": "a-1"})
    seen = []
    with _host.acting_for("a", "/x/a.py"):
        t = threading.Thread(target=lambda: seen.append((_host.current_extension(),
                                                        os.environ.get("A_TOKEN"))))
        t.start()
        t.join(5)
    assert seen == [("a", "a-1")]


# -- the older API -------------------------------------------------------------------------

@pytest.mark.parametrize("name,new", [
    ("extension", "vis.register(vis.Extension("), ("symbol", "vis.Symbol(fn"),
    ("slash", "vis.SlashCommand(name, run"), ("op_hook", "vis.OpHook(ops, fn"),
    ("network_filter", "vis.NetworkFilter(fn)"), ("provider", "vis.Provider(id, label"),
])
def test_a_legacy_builder_names_its_replacement(name, new):
    with pytest.raises(AttributeError) as e:
        getattr(vis, name)
    message = str(e.value)
    assert message.startswith(f"vis.{name}(...) belongs to the older Vis extension API")
    assert new in message and "Porting from the older API" in message
    assert not hasattr(vis, name)
    with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
        vis.nonsense


def test_import_vis_fails_with_the_legacy_calls_of_the_file_and_their_new_form(tmp_path):
    source = ("import vis\n\n"
              "def hi(name):\n    '''Say hi.'''\n    return name\n\n"
              "vis.extension(name='g', description='d', alias='g',\n"
              "              symbols=[vis.symbol(hi)], slash_commands=[vis.slash('hi', hi)])\n")
    message = _legacy.import_message(source)
    assert message.startswith("'import vis' is the older Vis extension API")
    assert "'import blockether.vis.extension as vis'" in message
    assert "line 7: vis.extension(...) -> vis.register(vis.Extension(...))" in message
    assert "line 8: vis.slash(...) -> vis.SlashCommand(name, run" in message
    assert "line 8: vis.symbol(...) -> vis.Symbol(fn" in message
    # The finder turns a bare `import vis` into that error, unless a real `vis` exists.
    finder = _legacy.LegacyFinder()
    with pytest.raises(ModuleNotFoundError, match="older Vis extension API"):
        finder.find_spec("vis")
    assert finder.find_spec("vision") is None
    _legacy.install_finder()
    try:
        with pytest.raises(ModuleNotFoundError, match="older Vis extension API"):
            import vis  # noqa: F401
        (tmp_path / "vis.py").write_text("VALUE = 7\n")
        sys.path.insert(0, str(tmp_path))
        import vis as local
        assert local.VALUE == 7
    finally:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _legacy.LegacyFinder)]
        sys.modules.pop("vis", None)


# -- non-finite numbers ---------------------------------------------------------------------

def test_a_nan_or_infinity_in_a_result_is_named_with_its_place():
    with pytest.raises(ValueError) as e:
        _runtime.to_portable({"stats": [1.0, float("nan")]})
    assert str(e.value).startswith("the result['stats'][1] is nan, which JSON cannot carry")
    with pytest.raises(ValueError, match=r"the result is inf"):
        _runtime.to_portable(math.inf)

    class Box:
        def __init__(self):
            self.ratio = -math.inf
    with pytest.raises(ValueError, match=r"the result\.ratio is -inf"):
        _runtime.to_portable(Box())
    with pytest.raises(ValueError, match=r"the slash command's data\['x'\] is nan"):
        _runtime.slash_result(vis.ok("t", data={"x": float("nan")}), "e")
    assert _runtime.find_not_finite({"a": [1, {"b": float("inf")}]}).args[0].startswith(
        "the result['a'][1]['b'] is inf")
    assert _runtime.find_not_finite({"a": 1.5}) is None


def test_slash_data_is_kept_as_portable_data():
    assert _runtime.slash_result(vis.ok("Done", "body", data={"n": (1, 2)}), "e") == {
        "status": "ok", "title": "Done", "body": "body", "data": {"n": [1, 2]}}


# -- vis.fs ------------------------------------------------------------------------------------

def test_fs_paths_are_absolute_from_the_working_directory(bridge, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bridge.responses["fs_exists"] = True
    vis.fs.exists("notes/a.txt")
    vis.fs.exists("/etc/hostname")
    vis.fs.copy("a", "../b")
    assert bridge.calls[0][1]["path"] == str(tmp_path / "notes" / "a.txt")
    assert bridge.calls[1][1]["path"] == "/etc/hostname"
    assert bridge.calls[2][1]["src"] == str(tmp_path / "a")
    assert bridge.calls[2][1]["dst"] == str(tmp_path.parent / "b")
