"""Discovery helpers and the worker boundary: sealing, __vis_call__, portable results."""

import dataclasses
import enum
import json

import pytest

import blockether.vis.extension as vis
from blockether.vis.extension import _registry, _runtime


class Issues:
    def find(self, query: str) -> list:
        """Find issues by query.

        Longer explanation on later lines.
        """
        return []

    @vis.method(is_hidden=True)
    def purge(self) -> None:
        """Delete everything."""


class Tracker:
    def __init__(self):
        self.issues = Issues()


def ping() -> str:
    """Check the connection."""
    return "pong"


@pytest.fixture
def extensions():
    return [vis.Extension(name="tracker", alias="tracker", description="d",
                          symbols=[vis.Symbol(Tracker(), name="tracker")]),
            vis.Extension(name="net", alias="net", description="d", symbols=[vis.Symbol(ping)])]


def test_apropos_filters_public_names_by_regular_expression(extensions):
    assert _runtime.apropos(extensions, r"^tracker\.") == [
        {"name": "tracker.issues.find", "tag": "observation", "signature": "query",
         "summary": "Find issues by query."}]
    assert [h["name"] for h in _runtime.apropos(extensions, "")] == ["tracker.issues.find", "ping"]


def test_doc_reads_the_complete_document_by_name_or_hit(extensions):
    (hit,) = _runtime.apropos(extensions, "find")
    text = _runtime.doc(extensions, hit)
    assert text == _runtime.doc(extensions, "tracker.issues.find")
    assert "Longer explanation on later lines." in text and "Effect: observation" in text


def test_hidden_tools_are_absent_from_discovery_but_remain_members(extensions):
    assert _runtime.apropos(extensions, "purge") == []
    with pytest.raises(LookupError):
        _runtime.doc(extensions, "tracker.issues.purge")
    assert _runtime.find_member(extensions[0], "tracker__issues__purge").is_hidden


def test_sealing_replaces_callables_and_call_answers_json_envelopes(extensions):
    sealer = _runtime.Sealer()
    spec = sealer.seal(_registry.spec_of(extensions[1]))
    json.dumps(spec)  # nothing callable is left
    cid = spec["symbols"][0]["fn"]["__vis_callable__"]
    assert json.loads(sealer.call(cid, "[]", "{}")) == {"ok": True, "value": "pong"}


def test_vis_call_passes_keyword_arguments_natively_and_reports_errors_by_class_name():
    def tool(a, options=None, *, flag=False):
        if flag:
            raise ValueError("flag set")
        return {"a": a, "options": options}
    sealer = _runtime.Sealer()
    cid = sealer.seal(tool)["__vis_callable__"]
    assert json.loads(sealer.call(cid, '[1, {"x": 2}]', "{}"))["value"] == {
        "a": 1, "options": {"x": 2}}
    failure = json.loads(sealer.call(cid, "[1]", '{"flag": true}'))
    assert failure["ok"] is False and failure["error"] == "ValueError: flag set"
    assert "Traceback" in failure["traceback"]
    assert sealer.seal(tool) == {"__vis_callable__": cid}


def test_results_cross_as_portable_data_with_public_fields_only():
    class Color(enum.Enum):
        RED = "red"

    @dataclasses.dataclass(frozen=True)
    class Inner:
        n: int
        _hidden: int = 0

    class Plain:
        def __init__(self):
            self.name = "p"
            self._secret = "s"
            self.method = lambda: None

    out = _runtime.to_portable({"inner": Inner(1), "plain": Plain(), "tags": ("a",),
                                "color": Color.RED, 3: b"\x00\x01"})
    assert out == {"inner": {"__vis_object__": "Inner", "__vis_attrs__": {"n": 1}},
                   "plain": {"__vis_object__": "Plain", "__vis_attrs__": {"name": "p"}},
                   "tags": ["a"], "color": "red", "3": {"__vis_bytes__": "AAE="}}
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError):
        _runtime.to_portable(loop)
    with pytest.raises(TypeError):
        _runtime.to_portable(print)
    shared = {"x": 1}
    assert _runtime.to_portable([shared, shared]) == [{"x": 1}, {"x": 1}]
