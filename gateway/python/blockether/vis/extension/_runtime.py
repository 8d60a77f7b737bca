"""Helpers the worker uses to call into a registered extension (§4, §5)."""

from __future__ import annotations

from . import _contract
from ._activity import ActivityPresentation, publish_activity


def find_member(extension, name: str):
    """The tool named ``name`` (full dotted name or its provider tool name)."""
    for member in extension.members:
        if name in (member.full_name, _contract.tool_name(member.full_name)):
            return member
    raise LookupError(f"extension '{extension.name}' has no tool {name!r}")


def _present(render, **kwargs) -> None:
    try:
        presentation = render(**kwargs)
        if isinstance(presentation, ActivityPresentation):
            publish_activity(presentation)
    except Exception:
        pass  # presentation errors never change a tool's result


def invoke(member, args=(), kwargs=None):
    """Call a tool with its activity ``render`` phases (start, success or failure)."""
    kwargs = dict(kwargs or {})
    render = member.activity.render if member.activity is not None else None
    if render is not None and member.activity.show_start:
        _present(render, phase="start", args=tuple(args), kwargs=kwargs, result=None, error=None)
    try:
        result = member.fn(*args, **kwargs)
    except BaseException as exc:
        if render is not None:
            _present(render, phase="failure", args=tuple(args), kwargs=kwargs, result=None,
                     error=exc)
        raise
    if render is not None:
        _present(render, phase="success", args=tuple(args), kwargs=kwargs, result=result,
                 error=None)
    return result


def call_tool(extension, name: str, arguments: dict):
    """Bind a provider tool call's JSON arguments and invoke the tool."""
    member = find_member(extension, name)
    args, kwargs = _contract.bind_arguments(member.contract, arguments)
    return invoke(member, args, kwargs)


def slash_result(value, extension_name: str) -> dict:
    """Normalize what a slash command's ``run`` returned (§5.4)."""
    if isinstance(value, dict) and value.get("marker") == "slash_result":
        out = {"status": value.get("status", "ok"), "title": str(value.get("title", ""))}
        if isinstance(value.get("body"), str):
            out["body"] = value["body"]
        if value.get("data") is not None:
            out["data"] = value["data"]
        return out
    if value is None:
        return {"status": "ok", "title": f"{extension_name}: done"}
    return {"status": "ok", "title": value if isinstance(value, str) else str(value)}


def is_block(value) -> bool:
    """True only for ``vis.block(reason)``; anything else allows."""
    return isinstance(value, dict) and value.get("marker") == "block"
