"""vis.ask forms and vis.live views through the bridge."""

import pytest

import blockether.vis.extension as vis
from blockether.vis.extension import _live


def submitted(values, request_id="r1"):
    return lambda payload: {"status": "submitted", "values": values, "request_id": request_id}


# -- builders ---------------------------------------------------------------------------

def test_form_builders_are_pure_dicts_and_pass_extra_keywords_through():
    assert vis.plaintext("name", "Your name", placeholder="Ada") == {
        "type": "plaintext", "name": "name", "label": "Your name", "placeholder": "Ada"}
    assert vis.slider("level")["type"] == "range"
    assert vis.select("c", ["a", vis.option("b", "Bee")])["options"] == [
        "a", {"value": "b", "label": "Bee"}]
    assert vis.row("g", vis.checkbox("x")) == {
        "type": "group", "direction": "row", "id": "g",
        "fields": [{"type": "checkbox", "name": "x"}]}
    assert vis.column(vis.otp("code"))["direction"] == "column"
    assert vis.heading("Hi") == {"type": "heading", "text": "Hi"}
    assert vis.paragraph("p") == {"type": "paragraph", "text": "p"}
    for build in (vis.password, vis.multiline):
        assert build("f")["name"] == "f"
    assert vis.multiselect("m", ["a"])["type"] == "multiselect"


# -- ask: request shape and validation ------------------------------------------------------

def test_ask_sends_a_normalized_request_without_validators(bridge):
    bridge.responses["request_input"] = submitted({"name": "Ada"})
    answer = vis.ask("Who?", [vis.plaintext("name", validate=lambda v: None),
                              vis.slider("level"), vis.otp("code"),
                              vis.select("color", ["red", {"value": "b", "label": "Blue"}])],
                     submit_label="Go", timeout_ms=0)
    (op, payload), = bridge.calls
    assert op == "request_input"
    request = payload["request"]
    assert request["title"] == "Who?" and request["submit_label"] == "Go"
    assert request["timeout_ms"] == 0
    name, level, code, color = request["fields"]
    assert name == {"type": "plaintext", "name": "name", "id": "name", "label": "name",
                    "is_required": False}
    assert (level["min"], level["max"], level["step"]) == (0, 100, 1)
    assert (code["min_length"], code["max_length"]) == (6, 6)
    assert color["options"] == [{"value": "red", "label": "red"}, {"value": "b", "label": "Blue"}]
    assert payload["validators"] == {"name": [1]}
    assert callable(payload["run_validator"])
    assert answer and answer["name"] == "Ada" and answer.request_id == "r1"


@pytest.mark.parametrize("node, fragment", [
    ({"type": "plaintext", "name": "a", "isRequired": True}, "'is_required'"),
    ({"type": "plaintext", "name": "a", "min-length": 1}, "'min_length'"),
    ({"type": "plaintext", "name": "a", "colour": "red"}, "unknown key 'colour'"),
    ({"type": "plaintext", "name": "a", "direction": "row"}, "layout key"),
    ({"type": "group", "fields": [], "default": 1}, "value key"),
    ({"type": "heading", "text": "x", "placeholder": "y"}, "value key"),
    ({"type": "telepathy", "name": "a"}, "unknown field type"),
    ({"type": "plaintext"}, "needs name"),
    ({"type": "select", "name": "a", "options": []}, "options"),
    ({"type": "otp", "name": "a", "max_length": 13}, "max_length"),
])
def test_ask_refuses_malformed_fields(bridge, node, fragment):
    with pytest.raises(ValueError, match=fragment):
        vis.ask("T", [node])
    assert bridge.calls == []


def test_ask_refuses_duplicate_names_across_groups_and_bad_options(bridge):
    with pytest.raises(ValueError, match="used twice"):
        vis.ask("T", [vis.plaintext("a"), vis.row(vis.checkbox("a"))])
    with pytest.raises(TypeError, match="unknown option"):
        vis.ask("T", [vis.plaintext("a")], colour="red")
    with pytest.raises(ValueError):
        vis.ask("T", [vis.plaintext("a")], timeout_ms=-1)
    with pytest.raises(TypeError):
        vis.ask("T", vis.plaintext("a"))
    with pytest.raises(ValueError):
        vis.ask(" ", [vis.plaintext("a")])


def test_a_validator_with_the_wrong_arity_is_refused_at_ask_time(bridge):
    with pytest.raises(TypeError, match="validator"):
        vis.ask("T", [vis.plaintext("a", validate=lambda a, b, c: None)])
    assert bridge.calls == []


def test_validators_follow_the_documented_verdicts(bridge):
    bridge.responses["request_input"] = submitted({})
    def boom(v):
        raise ValueError("bad input")
    vis.ask("T", [
        vis.plaintext("a", validate=[lambda v: None, lambda v: True, lambda v: False]),
        vis.plaintext("b", validate=lambda v, values: f"{v} clashes with {values['a']}"),
        vis.plaintext("c", validate=boom),
        vis.plaintext("d", validate=[lambda v: "first", lambda v: "second"]),
    ])
    run = bridge.calls[0][1]["run_validator"]
    assert run("a", "x", {}) == "is not valid"
    assert run("b", "y", {"a": "x"}) == "y clashes with x"
    assert run("c", "z", {}) == "could not be validated: bad input"
    assert run("d", "z", {}) == "first"
    assert run("d", "", {}) is None


def test_answer_values_are_coerced_by_field_type(bridge):
    bridge.responses["request_input"] = submitted({
        "ok": 1, "many": ["c", "a", "zzz"], "n": 5.0, "f": 2.5, "pw": "vis-secret:9"})
    answer = vis.ask("T", [vis.checkbox("ok"), vis.multiselect("many", ["a", "b", "c"]),
                           vis.slider("n"), vis.slider("f", step=0.5), vis.password("pw"),
                           vis.plaintext("missing")])
    assert answer.values == {"ok": True, "many": ["a", "c"], "n": 5, "f": 2.5,
                             "pw": "vis-secret:9", "missing": None}
    assert isinstance(answer["n"], int) and isinstance(answer["f"], float)
    bridge.responses["reveal_secret"] = "hunter2"
    assert answer.reveal("pw") == "hunter2"
    assert "pw" in answer and answer.get("nope", 1) == 1


@pytest.mark.parametrize("status", ["cancelled", "timeout", "undeliverable"])
def test_a_refused_form_is_a_falsey_answer_with_a_reason(bridge, status):
    bridge.responses["request_input"] = {"status": status, "request_id": "r"}
    answer = vis.ask("T", [vis.plaintext("a")])
    assert not answer and answer.reason == status and answer.values == {}
    assert answer.is_submitted is False


def test_an_answer_defaults_to_cancelled():
    assert vis.Answer().reason == "cancelled" and not vis.Answer()


# -- live -------------------------------------------------------------------------------

@pytest.fixture
def opened(bridge):
    bridge.responses["live"] = lambda p: {"view_id": "v1", "seq": 1} \
        if p["envelope"]["op"] == "open" else {"seq": 2}
    return bridge


def test_live_opens_a_view_with_the_nodes_and_options(opened):
    view = vis.live("Deploy", [vis.status("s", "starting"), vis.output("log")],
                    description="d", flush_ms=50)
    assert isinstance(view, vis.LiveView) and view.id == "v1"
    envelope = opened.calls[0][1]["envelope"]
    assert envelope == {"op": "open", "title": "Deploy", "description": "d", "flush_ms": 50,
                        "nodes": [{"type": "status", "id": "s", "text": "starting",
                                   "tone": "idle"},
                                  {"type": "log", "id": "log", "lines": []}]}


def test_live_node_handles_push_patches(opened):
    view = vis.live("Job", [vis.status("s"), vis.output("log"), vis.table("t", [
        vis.table_column("name")]), vis.progress("p"), vis.steps("st"), vis.stat("k"),
        vis.link("l")])
    view.node("s").set("running", tone="running")
    view.only("log").write("line 1", "line 2", tone="warn")
    view.node("t").upsert("r1", {"name": "a"})
    view.node("p").set(1, 3)
    view.node("st").set("build", tone="ok")
    view.node("k").set("count", "3")
    view.node("l").add("doc", "Docs", "https://example.test")
    ops = [c[1]["envelope"]["ops"][0] for c in opened.calls[1:]]
    assert ops[0] == {"op": "set", "node_id": "s", "text": "running", "tone": "running"}
    assert ops[1] == {"op": "append", "node_id": "log", "lines": ["line 1", "line 2"],
                      "tone": "warn"}
    assert ops[2] == {"op": "set", "node_id": "t", "row": {"id": "r1", "cells": {"name": "a"}}}
    assert [o["node_id"] for o in ops] == ["s", "log", "t", "p", "st", "k", "l"]
    assert all(c[1]["envelope"]["view_id"] == "v1" for c in opened.calls[1:])
    with pytest.raises(ValueError):
        view.node("s").set(tone="purple")
    with pytest.raises(KeyError):
        view.node("nope")


def test_a_push_after_the_human_stopped_the_view_raises_interrupted(opened):
    view = vis.live("Job", [vis.output("log")])
    opened.responses["live"] = {"interrupted": True, "reason": "interrupted", "note": "stop"}
    with pytest.raises(vis.Interrupted) as e:
        view.only("log").write("x")
    assert (e.value.view_id, e.value.note) == ("v1", "stop")
    assert view.is_interrupted


def test_live_view_closes_once_and_as_a_context_manager(opened):
    with vis.live("Job", [vis.status("s")]) as view:
        pass
    view.close()
    closes = [c for c in opened.calls if c[1]["envelope"]["op"] == "close"]
    assert len(closes) == 1 and closes[0][1]["envelope"]["reason"] == "completed"
    with pytest.raises(RuntimeError):
        with vis.live("Job2", [vis.status("s")]):
            raise RuntimeError("boom")
    last = opened.calls[-1][1]["envelope"]
    assert last["reason"] == "failed" and last["error"] == "RuntimeError: boom"


def test_live_refuses_bad_input(opened):
    with pytest.raises(ValueError):
        vis.live("", [])
    with pytest.raises(TypeError):
        vis.live("T", [], colour="red")
    with pytest.raises(ValueError):
        vis.live("T", [{"type": "hologram", "id": "h"}])
    view = vis.live("T", [vis.status("s")])
    with pytest.raises(ValueError):
        view.close("exploded")


def test_live_state_and_sleep(opened):
    view = vis.live("T", [vis.status("s")])
    opened.responses["live"] = {"seq": 5, "changed": True}
    assert view.sleep(0.5) is True
    envelope = opened.calls[-1][1]["envelope"]
    assert envelope == {"op": "state", "after_seq": 1, "timeout_ms": 500, "view_id": "v1"}
    view.state(timeout_ms=10 ** 12)
    assert opened.calls[-1][1]["envelope"]["timeout_ms"] == _live._MAX_STATE_TIMEOUT_MS
