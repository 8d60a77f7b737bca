"""Activity declarations, presentations and typed blocks (docs/extension-api.md, "Activity presentation")."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from typing import ClassVar

from ._util import is_async_callable

PRESENTERS = ("generic", "shell", "tests", "patch", "observation", "lint", "repl",
              "format", "list")
_TEXT_MAX = 16384
_SHORT_MAX = 256
_LINE_MAX = 512
_MAX_SECTIONS = 8
_MAX_BLOCKS = 32
_MAX_WIRE_BYTES = 32768
_FORBIDDEN = {127, 0x2028, 0x2029}


def _short(owner: str, name: str, value, *, nonblank=False, optional=False, limit=_SHORT_MAX):
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise TypeError(f"{owner} {name} must be a string")
    if nonblank and not value.strip():
        raise ValueError(f"{owner} {name} must be a non-empty string")
    if len(value) > limit:
        raise ValueError(f"{owner} {name} must be at most {limit} characters")


def _line(owner: str, name: str, value, *, required: bool):
    if not isinstance(value, str):
        raise TypeError(f"{owner} {name} must be a string")
    if required and not value.strip():
        raise ValueError(f"{owner} {name} must be a non-empty line")
    if len(value) > _LINE_MAX or len(value.encode("utf-8")) > _LINE_MAX:
        raise ValueError(f"{owner} {name} must be at most {_LINE_MAX} characters and "
                         f"{_LINE_MAX} UTF-8 bytes")
    if any(ord(c) < 32 or ord(c) in _FORBIDDEN for c in value):
        raise ValueError(f"{owner} {name} must be one line without control characters")


@dataclass(frozen=True, slots=True)
class Activity:
    """How a running tool is shown in the TUI and the Companion app."""

    presenter: str = "generic"
    label: str | None = None
    render: object = None
    show_start: bool = True

    def __post_init__(self):
        if self.presenter not in PRESENTERS:
            raise ValueError(f"vis.Activity presenter must be one of {', '.join(PRESENTERS)}; "
                             f"got {self.presenter!r}")
        if self.label is not None:
            if (not isinstance(self.label, str) or not self.label.strip()
                    or "\n" in self.label or "\r" in self.label or len(self.label) > 96):
                raise ValueError("vis.Activity label must be one nonblank line of at most "
                                 "96 characters")
        if self.render is not None and (not callable(self.render)
                                        or is_async_callable(self.render)):
            raise TypeError("vis.Activity render must be a synchronous callable")
        if type(self.show_start) is not bool:
            raise TypeError("vis.Activity show_start must be a bool")

    def to_wire(self) -> dict:
        out = {"presenter": self.presenter, "show_start": self.show_start}
        if self.label is not None:
            out["label"] = self.label
        return out


class _Block:
    __slots__ = ()
    TYPE: ClassVar[str] = ""

    def to_wire(self) -> dict:
        out = {"type": self.TYPE}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = [list(r) for r in value] if f.name == "rows" else (
                    list(value) if isinstance(value, tuple) else value)
        return out


def _text_block(type_name: str, doc: str):
    @dataclass(frozen=True, slots=True)
    class Block(_Block):
        text: str
        TYPE: ClassVar[str] = type_name

        def __post_init__(self):
            _short(f"vis.{type(self).__name__}", "text", self.text, limit=_TEXT_MAX)

    Block.__doc__ = doc
    return Block


ActivityHeading = _text_block("heading", "A heading line.")
ActivityHeading.__name__ = ActivityHeading.__qualname__ = "ActivityHeading"
ActivityText = _text_block("text", "Plain text.")
ActivityText.__name__ = ActivityText.__qualname__ = "ActivityText"
ActivityMarkdown = _text_block("markdown", "Markdown text.")
ActivityMarkdown.__name__ = ActivityMarkdown.__qualname__ = "ActivityMarkdown"


def _source_block(type_name: str, doc: str):
    @dataclass(frozen=True, slots=True)
    class Block(_Block):
        text: str
        language: str | None = None
        TYPE: ClassVar[str] = type_name

        def __post_init__(self):
            owner = f"vis.{type(self).__name__}"
            _short(owner, "text", self.text, limit=_TEXT_MAX)
            _short(owner, "language", self.language, optional=True)

    Block.__doc__ = doc
    return Block


ActivityCode = _source_block("code", "Source code, optionally with a language.")
ActivityCode.__name__ = ActivityCode.__qualname__ = "ActivityCode"
ActivityDiff = _source_block("diff", "A diff, optionally with a language.")
ActivityDiff.__name__ = ActivityDiff.__qualname__ = "ActivityDiff"


@dataclass(frozen=True, slots=True)
class ActivityTable(_Block):
    """A small table: 1-16 columns, at most 200 rows of strings."""

    columns: tuple
    rows: tuple = ()
    TYPE: ClassVar[str] = "table"

    def __post_init__(self):
        owner = "vis.ActivityTable"
        if not isinstance(self.columns, (list, tuple)) or not isinstance(self.rows, (list, tuple)):
            raise TypeError(f"{owner} columns and rows must be lists or tuples")
        if not 1 <= len(self.columns) <= 16:
            raise ValueError(f"{owner} needs 1 to 16 columns")
        if len(self.rows) > 200:
            raise ValueError(f"{owner} allows at most 200 rows")
        for column in self.columns:
            _short(owner, "column", column)
        rows = []
        for row in self.rows:
            if not isinstance(row, (list, tuple)) or len(row) != len(self.columns):
                raise ValueError(f"{owner} every row must have {len(self.columns)} cells")
            for cell in row:
                _short(owner, "cell", cell)
            rows.append(tuple(row))
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "rows", tuple(rows))


def _finite(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


@dataclass(frozen=True, slots=True)
class ActivityProgress(_Block):
    """Progress: both value and total, or neither (indeterminate)."""

    label: str
    value: float | None = None
    total: float | None = None
    TYPE: ClassVar[str] = "progress"

    def __post_init__(self):
        owner = "vis.ActivityProgress"
        _short(owner, "label", self.label)
        if self.value is None and self.total is None:
            return
        if not (_finite(self.value) and _finite(self.total)):
            raise ValueError(f"{owner} value and total must both be finite numbers or both None")
        if not (self.total > 0 and 0 <= self.value <= self.total):
            raise ValueError(f"{owner} needs 0 <= value <= total and total > 0")


def _attachment_block(type_name: str, doc: str):
    @dataclass(frozen=True, slots=True)
    class Block(_Block):
        attachment_id: str
        label: str | None = None
        TYPE: ClassVar[str] = type_name

        def __post_init__(self):
            owner = f"vis.{type(self).__name__}"
            _short(owner, "attachment_id", self.attachment_id, nonblank=True)
            _short(owner, "label", self.label, optional=True)

    Block.__doc__ = doc
    return Block


ActivityImage = _attachment_block("image", "An image attachment (never a URL).")
ActivityImage.__name__ = ActivityImage.__qualname__ = "ActivityImage"
ActivityVideo = _attachment_block("video", "A video attachment (never a URL).")
ActivityVideo.__name__ = ActivityVideo.__qualname__ = "ActivityVideo"
ActivityAudio = _attachment_block("audio", "An audio attachment (never a URL).")
ActivityAudio.__name__ = ActivityAudio.__qualname__ = "ActivityAudio"
ActivityFile = _attachment_block("file", "A file attachment (never a URL).")
ActivityFile.__name__ = ActivityFile.__qualname__ = "ActivityFile"

BLOCK_TYPES = (ActivityHeading, ActivityText, ActivityMarkdown, ActivityCode, ActivityDiff,
               ActivityTable, ActivityProgress, ActivityImage, ActivityVideo, ActivityAudio,
               ActivityFile)


def _blocks(owner: str, value) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{owner} content must be a list or tuple of activity blocks")
    for block in value:
        if type(block) not in BLOCK_TYPES:
            raise TypeError(f"{owner} content must contain activity blocks, got "
                            f"{type(block).__name__}")
    if len(value) > _MAX_BLOCKS:
        raise ValueError(f"{owner} allows at most {_MAX_BLOCKS} blocks")
    return tuple(value)


@dataclass(frozen=True, slots=True)
class ActivitySection:
    """A titled group of blocks inside a presentation."""

    headline: str
    summary: str
    content: tuple = ()

    def __post_init__(self):
        _line("vis.ActivitySection", "headline", self.headline, required=True)
        _line("vis.ActivitySection", "summary", self.summary, required=False)
        object.__setattr__(self, "content", _blocks("vis.ActivitySection", self.content))

    def to_wire(self) -> dict:
        return {"headline": self.headline, "summary": self.summary,
                "content": [b.to_wire() for b in self.content]}


@dataclass(frozen=True, slots=True, init=False)
class ActivityPresentation:
    """What the render callback returns; ``blocks`` and ``content`` are one argument (docs/decisions.md, E10)."""

    headline: str
    summary: str
    blocks: tuple
    sections: tuple

    def __init__(self, headline, summary, blocks=None, sections=(), *, content=None):
        if blocks is not None and content is not None:
            raise TypeError("vis.ActivityPresentation takes blocks or content, not both")
        chosen = content if content is not None else (blocks if blocks is not None else ())
        owner = "vis.ActivityPresentation"
        _line(owner, "headline", headline, required=True)
        _line(owner, "summary", summary, required=False)
        chosen = _blocks(owner, chosen)
        if not isinstance(sections, (list, tuple)):
            raise TypeError(f"{owner} sections must be a list or tuple")
        if len(sections) > _MAX_SECTIONS:
            raise ValueError(f"{owner} allows at most {_MAX_SECTIONS} sections")
        for section in sections:
            if type(section) is not ActivitySection:
                raise TypeError(f"{owner} sections must contain ActivitySection declarations")
        total = len(chosen) + sum(len(s.content) for s in sections)
        if total > _MAX_BLOCKS:
            raise ValueError(f"{owner} allows at most {_MAX_BLOCKS} blocks in total")
        object.__setattr__(self, "headline", headline)
        object.__setattr__(self, "summary", summary)
        object.__setattr__(self, "blocks", chosen)
        object.__setattr__(self, "sections", tuple(sections))
        size = len(json.dumps(self.to_wire(), separators=(",", ":")).encode("utf-8"))
        if size > _MAX_WIRE_BYTES:
            raise ValueError(f"{owner} is {size} bytes as JSON; the limit is {_MAX_WIRE_BYTES}")

    @property
    def content(self) -> tuple:
        return self.blocks

    def to_wire(self) -> dict:
        out = {"headline": self.headline, "summary": self.summary,
               "content": [b.to_wire() for b in self.blocks]}
        if self.sections:
            out["sections"] = [s.to_wire() for s in self.sections]
        return out


def publish_activity(presentation) -> bool:
    """Replace the running tool's presentation; never raises."""
    if type(presentation) is not ActivityPresentation:
        return False
    from . import _host
    try:
        return bool(_host.call("activity", {"presentation": presentation.to_wire()}))
    except Exception:
        return False
