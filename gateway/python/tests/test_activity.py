"""Activity declarations, presentations, blocks and publish_activity."""

import pytest

import blockether.vis.extension as vis


def test_activity_presenter_must_be_in_the_vocabulary():
    with pytest.raises(ValueError, match="presenter"):
        vis.Activity(presenter="x")
    for presenter in ("generic", "shell", "tests", "patch", "observation", "lint", "repl",
                      "format", "list"):
        assert vis.Activity(presenter=presenter).presenter == presenter


@pytest.mark.parametrize("label", ["two\nlines", "x" * 97, " ", 3])
def test_activity_label_must_be_one_nonblank_line_of_at_most_96_chars(label):
    with pytest.raises(ValueError, match="label"):
        vis.Activity(label=label)


def test_activity_accepts_a_96_char_label_and_has_a_wire_form():
    a = vis.Activity(presenter="tests", label="x" * 96, show_start=False)
    assert a.to_wire() == {"presenter": "tests", "show_start": False, "label": "x" * 96}
    assert vis.Activity().to_wire() == {"presenter": "generic", "show_start": True}


def test_an_async_render_raises_type_error():
    async def render(**kw):
        return None
    with pytest.raises(TypeError, match="synchronous"):
        vis.Activity(render=render)
    with pytest.raises(TypeError):
        vis.Activity(render="not callable")


def test_unknown_activity_keywords_and_non_bool_show_start_raise_type_error():
    with pytest.raises(TypeError):
        vis.Activity(state="running")
    with pytest.raises(TypeError):
        vis.Activity(show_start=1)


# -- blocks --------------------------------------------------------------------------

def test_blocks_have_typed_wire_forms_without_none_fields():
    assert vis.ActivityHeading("H").to_wire() == {"type": "heading", "text": "H"}
    assert vis.ActivityText("t").to_wire() == {"type": "text", "text": "t"}
    assert vis.ActivityMarkdown("*m*").to_wire() == {"type": "markdown", "text": "*m*"}
    assert vis.ActivityCode("x = 1", "python").to_wire() == {
        "type": "code", "text": "x = 1", "language": "python"}
    assert vis.ActivityDiff("-a\n+b").to_wire() == {"type": "diff", "text": "-a\n+b"}
    assert vis.ActivityTable(["a", "b"], [["1", "2"]]).to_wire() == {
        "type": "table", "columns": ["a", "b"], "rows": [["1", "2"]]}
    assert vis.ActivityProgress("build", 1, 4).to_wire() == {
        "type": "progress", "label": "build", "value": 1, "total": 4}
    assert vis.ActivityProgress("wait").to_wire() == {"type": "progress", "label": "wait"}
    for cls, kind in ((vis.ActivityImage, "image"), (vis.ActivityVideo, "video"),
                      (vis.ActivityAudio, "audio"), (vis.ActivityFile, "file")):
        assert cls("att_1", "shot").to_wire() == {"type": kind, "attachment_id": "att_1",
                                                  "label": "shot"}


def test_text_blocks_are_limited_to_16384_chars():
    vis.ActivityText("x" * 16384)
    with pytest.raises(ValueError):
        vis.ActivityText("x" * 16385)
    with pytest.raises(ValueError):
        vis.ActivityCode("x", "l" * 257)


def test_table_limits_are_enforced_and_rows_are_copied_to_tuples():
    with pytest.raises(ValueError):
        vis.ActivityTable([str(i) for i in range(17)], [])
    with pytest.raises(ValueError):
        vis.ActivityTable([], [])
    with pytest.raises(ValueError):
        vis.ActivityTable(["a"], [["x"]] * 201)
    with pytest.raises(ValueError):
        vis.ActivityTable(["a", "b"], [["only one"]])
    with pytest.raises(TypeError):
        vis.ActivityTable(["a"], [[1]])
    rows = [["1"]]
    table = vis.ActivityTable(["a"], rows)
    rows[0].append("2")
    assert table.rows == (("1",),) and table.columns == ("a",)


@pytest.mark.parametrize("value, total", [(5, 4), (True, 4), (1, None), (-1, 4), (0, 0),
                                          (float("nan"), 1)])
def test_progress_refuses_inconsistent_values(value, total):
    with pytest.raises(ValueError):
        vis.ActivityProgress("p", value, total)


def test_attachments_need_a_nonblank_id():
    with pytest.raises(ValueError):
        vis.ActivityImage(" ", "l")
    with pytest.raises(ValueError):
        vis.ActivityFile("a" * 257, "l")


# -- presentations -----------------------------------------------------------------

def test_presentation_accepts_its_third_argument_as_blocks_or_content():
    blocks = [vis.ActivityText("t")]
    positional = vis.ActivityPresentation("H", "S", blocks)
    by_blocks = vis.ActivityPresentation("H", "S", blocks=blocks)
    by_content = vis.ActivityPresentation("H", "S", content=blocks)
    assert positional == by_blocks == by_content
    assert by_content.blocks == by_content.content == (vis.ActivityText("t"),)
    assert by_content.to_wire() == {"headline": "H", "summary": "S",
                                    "content": [{"type": "text", "text": "t"}]}
    with pytest.raises(TypeError):
        vis.ActivityPresentation("H", "S", blocks=blocks, content=blocks)


def test_presentation_headline_limits():
    with pytest.raises(ValueError):
        vis.ActivityPresentation("é" * 257, "s")  # 514 UTF-8 bytes
    with pytest.raises(ValueError):
        vis.ActivityPresentation("a\x07b", "s")
    with pytest.raises(ValueError):
        vis.ActivityPresentation("a\u2028b", "s")
    with pytest.raises(ValueError):
        vis.ActivityPresentation("", "s")
    with pytest.raises(ValueError):
        vis.ActivityPresentation("h", "x" * 513)
    vis.ActivityPresentation("x" * 512, "")


def test_presentation_section_and_block_counts_are_limited():
    section = vis.ActivitySection("s", "", [vis.ActivityText("t")])
    with pytest.raises(ValueError):
        vis.ActivityPresentation("h", "s", [], [section] * 9)
    with pytest.raises(ValueError):
        vis.ActivityPresentation("h", "s", [vis.ActivityText("t")] * 33)
    with pytest.raises(ValueError):
        vis.ActivityPresentation("h", "s", [vis.ActivityText("t")] * 30, [section] * 3)
    with pytest.raises(TypeError):
        vis.ActivityPresentation("h", "s", [], [{"headline": "raw"}])
    with pytest.raises(TypeError):
        vis.ActivityPresentation("h", "s", [{"type": "text"}])
    with pytest.raises(ValueError):
        vis.ActivitySection("s", "", [vis.ActivityText("t")] * 33)


def test_presentation_compact_json_is_limited_to_32768_bytes():
    with pytest.raises(ValueError, match="bytes as JSON"):
        vis.ActivityPresentation("h", "s", [vis.ActivityText("x" * 16000)] * 3)


def test_presentation_with_sections_has_a_wire_form():
    p = vis.ActivityPresentation("h", "s", [], [vis.ActivitySection("a", "b")])
    assert p.to_wire() == {"headline": "h", "summary": "s", "content": [],
                           "sections": [{"headline": "a", "summary": "b", "content": []}]}


# -- publish_activity ------------------------------------------------------------------

def test_publish_activity_of_a_non_presentation_is_false_and_never_raises(bridge):
    assert vis.publish_activity("x") is False
    assert vis.publish_activity({"headline": "h"}) is False
    assert bridge.calls == []


def test_publish_activity_sends_the_wire_form_through_the_activity_door(bridge):
    bridge.responses["activity"] = True
    p = vis.ActivityPresentation("h", "s", [vis.ActivityText("t")])
    assert vis.publish_activity(p) is True
    assert bridge.calls == [("activity", {"presentation": p.to_wire(), "extension": None})]


def test_publish_activity_returns_false_when_the_host_fails_or_is_absent(bridge):
    def fail(payload):
        raise RuntimeError("host down")
    bridge.responses["activity"] = fail
    p = vis.ActivityPresentation("h", "s")
    assert vis.publish_activity(p) is False
    from blockether.vis.extension import _host
    _host.set_bridge(None)
    assert vis.publish_activity(p) is False
