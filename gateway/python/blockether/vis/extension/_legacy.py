"""Help for files written against the older Vis extension API (``import vis`` and its
lowercase dict builders): name the legacy calls and their replacements instead of failing
with a bare ``ModuleNotFoundError`` / ``AttributeError``.

This SDK does not provide the older API (docs/decisions.md, E1); it only explains how to port it.
"""

from __future__ import annotations

import ast
import importlib.abc
import sys

# legacy name -> the form that replaces it
PORTS = {
    "extension": "vis.register(vis.Extension(...)) (keyword arguments as before)",
    "symbol": "vis.Symbol(fn, name=None, tag=\"observation\", is_hidden=False)",
    "slash": "vis.SlashCommand(name, run, doc=None, usage=None)",
    "op_hook": "vis.OpHook(ops, fn, phase=\"before\")",
    "network_filter": "vis.NetworkFilter(fn)",
    "provider": ("vis.Provider(id, label, preset=vis.ProviderPreset(...)) with callbacks "
                 "returning vis.ProviderCredential / vis.ProviderStatus records"),
}

IMPORT_FORM = "import blockether.vis.extension as vis"
WHERE = "see 'Porting from the older API' in the extension guide (docs/extensions.md)"


def attribute_error(name: str) -> AttributeError:
    """The ``AttributeError`` for ``vis.<legacy name>`` on the SDK module."""
    return AttributeError(
        f"vis.{name}(...) belongs to the older Vis extension API, which this gateway does not "
        f"provide; write {PORTS[name]} instead ({WHERE})")


def legacy_calls(source) -> list:
    """``[(line, legacy name)]`` of ``vis.<legacy>(...)`` calls in a file's source."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "vis"
                and node.func.attr in PORTS):
            found.append((node.lineno, node.func.attr))
    return sorted(set(found))


def import_message(source=None) -> str:
    """Why ``import vis`` failed and how to port the file (naming the legacy calls of
    ``source`` when given)."""
    lines = [f"'import vis' is the older Vis extension API, which this gateway does not "
             f"provide; write '{IMPORT_FORM}' instead and port the calls"]
    calls = legacy_calls(source) if source is not None else []
    if calls:
        for line, name in calls:
            lines.append(f"  line {line}: vis.{name}(...) -> {PORTS[name]}")
    else:
        for name, port in PORTS.items():
            lines.append(f"  vis.{name}(...) -> {port}")
    lines.append(f"({WHERE})")
    return "\n".join(lines)


class LegacyImport(ModuleNotFoundError):
    """``import vis`` in an extension file: the older API."""


class LegacyFinder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: when nothing else provides a top-level ``vis`` module (an
    extension's own ``vis`` package still wins), the import fails with the porting hint."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "vis":
            raise LegacyImport(import_message(), name="vis")
        return None


def install_finder() -> None:
    if not any(isinstance(f, LegacyFinder) for f in sys.meta_path):
        sys.meta_path.append(LegacyFinder())
