"""Host doors through the bridge: state, log, notify, shells, fs, secrets."""

import pytest

import blockether.vis.extension as vis
from blockether.vis.extension import _host

DOORS = [
    lambda: vis.state.get("k"),
    lambda: vis.state.__setitem__("k", 1),
    lambda: list(vis.state),
    lambda: vis.log("info", "x"),
    lambda: vis.notify("x"),
    lambda: vis.shell({"command": "ls"}),
    lambda: vis.jailed_shell({"command": "ls"}),
    lambda: vis.jailed_shell_session({"command": "ls"}),
    lambda: vis.fs.read("/tmp/x"),
    lambda: vis.fs.write("/tmp/x", "y"),
    lambda: vis.fs.mkdir("/tmp/x"),
    lambda: vis.ask("Title", [vis.plaintext("name")]),
    lambda: vis.live("Job", [vis.status("s")]),
    lambda: vis.reveal("vis-secret:1"),
    lambda: vis.forget("vis-secret:1"),
]


@pytest.mark.parametrize("door", DOORS)
def test_every_door_without_a_bridge_raises_runtime_error_naming_the_gateway(door):
    with pytest.raises(RuntimeError, match="needs the Vis gateway"):
        door()


def test_set_bridge_refuses_an_object_without_call():
    with pytest.raises(TypeError):
        _host.set_bridge(object())


def test_payloads_carry_the_extension_the_call_acts_for(bridge):
    with _host.acting_for("todo"):
        vis.log("warn", "careful")
    vis.log("info", "no owner")
    assert bridge.calls == [
        ("log", {"level": "warn", "message": "careful", "extension": "todo"}),
        ("log", {"level": "info", "message": "no owner", "extension": None}),
    ]


def test_bridge_failures_propagate_as_ordinary_exceptions(bridge):
    def refuse(payload):
        raise PermissionError("available only while handling a session")
    bridge.responses["jailed_shell_session"] = refuse
    with pytest.raises(PermissionError, match="available only while handling a session"):
        vis.jailed_shell_session({"command": "ls"})


# -- state ----------------------------------------------------------------------------

@pytest.fixture
def owned(bridge):
    """A bridge plus a registered owner, as inside a worker call."""
    _host.set_owner("todo")
    return bridge


def test_state_before_register_is_refused_with_a_clear_error(bridge):
    with pytest.raises(RuntimeError, match="call vis.register"):
        vis.state["k"] = 1
    with pytest.raises(RuntimeError, match="call vis.register"):
        vis.state.get("k")
    assert bridge.calls == []


def test_state_ops_carry_the_owning_extension_name(owned):
    vis.state["k"] = 1
    assert owned.calls == [("state_put", {"key": "k", "value": 1, "extension": "todo"})]

def test_state_is_a_mutable_mapping_backed_by_the_state_doors(owned):
    bridge = owned
    from collections.abc import MutableMapping
    assert isinstance(vis.state, MutableMapping)
    vis.state["repo"] = "acme/widgets"
    assert vis.state.get("count", 0) == 0
    assert "repo" in vis.state
    vis.state.update({"repo": "acme/w2", "count": 0})
    assert vis.state["count"] == 0 and vis.state["repo"] == "acme/w2"
    assert sorted(vis.state.items()) == [("count", 0), ("repo", "acme/w2")]
    assert len(vis.state) == 2 and list(vis.state) == ["count", "repo"]
    assert vis.state.setdefault("new", [1]) == [1]
    assert vis.state.pop("new") == [1]
    del vis.state["repo"]
    assert "repo" not in vis.state
    with pytest.raises(KeyError):
        vis.state["repo"]
    with pytest.raises(KeyError):
        del vis.state["repo"]
    assert vis.state == {"count": 0}
    vis.state.clear()
    assert bridge.state == {}


def test_writing_none_removes_the_key(owned):
    bridge = owned
    vis.state["k"] = {"a": 1}
    vis.state["k"] = None
    assert "k" not in vis.state and bridge.state == {}
    assert ("state_del", {"key": "k", "extension": "todo"}) in bridge.calls


def test_state_keys_are_coerced_to_strings_and_values_must_be_plain_data(owned):
    bridge = owned
    vis.state[7] = [1, 2.5, True, {"x": "y"}]
    assert bridge.state == {"7": [1, 2.5, True, {"x": "y"}]}
    for bad in ({1, 2}, object(), {"k": b"bytes"}, {1: "non-string key"}):
        with pytest.raises(TypeError):
            vis.state["bad"] = bad
    with pytest.raises(ValueError):
        vis.state["bad"] = float("nan")
    assert "bad" not in bridge.state


def test_get_is_one_host_call(owned):
    bridge = owned
    vis.state.get("x", 1)
    assert bridge.ops() == ["state_get"]


# -- log and notify ----------------------------------------------------------------------

def test_log_and_notify_levels_fall_back_to_info(bridge):
    vis.log("trace", "t")
    vis.log("loud", 42)
    vis.notify("Rules reloaded", "success")
    vis.notify("x", "shout")
    assert [p for _, p in bridge.calls] == [
        {"level": "trace", "message": "t", "extension": None},
        {"level": "info", "message": "42", "extension": None},
        {"text": "Rules reloaded", "level": "success", "extension": None},
        {"text": "x", "level": "info", "extension": None},
    ]


# -- shells --------------------------------------------------------------------------------

def test_shell_takes_one_options_map():
    with pytest.raises(TypeError) as e:
        vis.shell("ls")
    assert str(e.value) == "shell takes one options map — use shell({'command': 'ls'})"


def test_shell_refuses_unknown_ops_and_missing_commands(bridge):
    with pytest.raises(ValueError, match="'explode'"):
        vis.shell({"op": "explode", "command": "ls"})
    with pytest.raises(ValueError, match="command"):
        vis.shell({"op": "run"})
    with pytest.raises(ValueError, match="id"):
        vis.shell({"op": "wait"})
    assert bridge.calls == []


def test_a_shell_result_has_every_documented_key(bridge):
    bridge.responses["shell"] = {"id": "p1", "status": "exited", "exit": 0, "out": "hi\n"}
    result = vis.shell({"command": ["echo", "hi"]})
    assert isinstance(result, dict) and isinstance(result, vis.Shell)
    assert set(_host.SHELL_KEYS) <= set(result)
    assert (result["exit"], result["out"], result["pid"]) == (0, "hi\n", None)
    assert bridge.calls[0] == ("shell", {"opts": {"command": ["echo", "hi"], "op": "run"},
                                         "extension": None})


def test_shell_handle_methods_send_handle_ops_through_the_same_door(bridge):
    bridge.responses["jailed_shell"] = lambda p: {"id": "p9", "status": "running"}
    handle = vis.jailed_shell({"op": "background", "command": "sleep 9"})
    handle.logs(offset=-20)
    handle.type("yes")
    handle.wait(5)
    handle.stop()
    sent = [p["opts"] for op, p in bridge.calls]
    assert [op for op, _ in bridge.calls] == ["jailed_shell"] * 5
    assert sent[1:] == [
        {"op": "logs", "offset": -20, "limit": None, "id": "p9"},
        {"op": "send", "text": "yes", "is_enter": True, "id": "p9"},
        {"op": "wait", "seconds": 5, "id": "p9"},
        {"op": "stop", "id": "p9"},
    ]
    with pytest.raises(ValueError):
        handle.wait(-1)


# -- fs -----------------------------------------------------------------------------------

def test_fs_operations_map_to_fs_doors(bridge, tmp_path):
    bridge.responses.update({"fs_read": b"caf\xc3\xa9", "fs_list": ["a", "b"],
                             "fs_stat": {"size": 5}, "fs_remove": True, "fs_mkdir": False,
                             "fs_exists": True})
    assert vis.fs.read(tmp_path / "f") == b"caf\xc3\xa9"
    assert vis.fs.read_text("/f") == "café"
    vis.fs.write("/f", "é", append=True)
    vis.fs.write("/g", b"\x00")
    assert vis.fs.list("/") == ["a", "b"]
    assert vis.fs.stat("/f") == {"size": 5}
    vis.fs.copy("/a", "/b")
    vis.fs.move("/b", "/c")
    assert vis.fs.remove("/c") is True
    assert vis.fs.mkdir("/d") is False
    assert vis.fs.exists("/d") is True
    ops = bridge.ops()
    assert ops == ["fs_read", "fs_read", "fs_write", "fs_write", "fs_list", "fs_stat", "fs_copy",
                   "fs_move", "fs_remove", "fs_mkdir", "fs_exists"]
    assert bridge.calls[0][1]["path"] == str(tmp_path / "f")
    assert bridge.calls[2][1] == {"path": "/f", "data": "é".encode(), "append": True,
                                  "extension": None}
    assert bridge.calls[6][1] == {"src": "/a", "dst": "/b", "extension": None}


def test_fs_refuses_bad_paths_and_data(bridge):
    with pytest.raises(TypeError):
        vis.fs.write("/f", 3)
    with pytest.raises(TypeError):
        vis.fs.read(b"/bytes/path")
    with pytest.raises(ValueError):
        vis.fs.read("")
    assert bridge.calls == []


# -- secrets ---------------------------------------------------------------------------------

def test_reveal_and_forget(bridge):
    bridge.responses.update({"reveal_secret": "hunter2", "forget_secret": True})
    assert vis.reveal("vis-secret:abc") == "hunter2"
    assert vis.forget("vis-secret:abc") is True
    assert vis.reveal("") is None and vis.forget(None) is False
    assert bridge.ops() == ["reveal_secret", "forget_secret"]
