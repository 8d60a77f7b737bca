"""``doc()`` text, provider tool schemas (docs/decisions.md, E9) and argument binding."""

import pytest

import blockether.vis.extension as vis
from blockether.vis.extension import _contract

SOURCE = '''
from dataclasses import dataclass
from typing import Annotated, Literal
import blockether.vis.extension as vis

@dataclass(frozen=True)
class Author:
    login: Annotated[str, "GitHub login."]

@dataclass(frozen=True)
class Issue:
    """One tracker issue."""
    number: int
    state: Literal["open", "closed"]
    author: Author

def find(query: Annotated[str, "Search text."], /, *, limit: int = 20,
         repo: str | None = None, **filters: str) -> list[Issue]:
    """Find issues matching a query."""
    return []

def ping() -> None:
    """Check the connection."""

vis.register(vis.Extension(name="t", alias="t", description="T.",
                           symbols=[vis.Symbol(find), vis.Symbol(ping, is_hidden=True)]))
'''


def test_doc_text_starts_with_the_description_then_effect_parameters_and_nested_fields(load):
    symbol = load(SOURCE).symbols[0]
    assert symbol.doc() == "\n".join([
        "Find issues matching a query.",
        "",
        "Effect: observation",
        "",
        "Parameters:",
        "- query: str — Search text. (positional_only; required)",
        "- limit: int (keyword_only; default omitted)",
        "- repo: str | None (keyword_only; default None)",
        "- filters: str (var_keyword; variadic)",
        "",
        "Returns: list[Issue]",
        "- number: int",
        "- state: Literal['open', 'closed']",
        "- author: Author",
        "- author.login: str — GitHub login.",
    ])


def test_doc_text_of_a_function_without_parameters_says_none(load):
    ext = load(SOURCE)
    text = ext.symbols[1].doc()
    assert "Parameters: none" in text and text.endswith("Returns: None")


def test_the_spec_doc_field_is_the_rendered_contract(load):
    symbol = load(SOURCE).symbols[0]
    assert symbol.spec["doc"] == symbol.doc()


def test_type_text_renders_every_kind():
    t = _contract.type_text
    assert t({"kind": "unresolved", "name": "X"}) == "X (unresolved)"
    assert t({"kind": "opaque", "name": "Client"}) == "Client (opaque)"
    assert t({"kind": "literal", "name": "Literal", "values": ["a", 1, None]}) == \
        "Literal['a', 1, None]"
    assert t({"kind": "generic", "name": "tuple", "variadic": True,
              "arguments": [{"kind": "scalar", "name": "int"}]}) == "tuple[int, ...]"
    assert t({"kind": "generic", "name": "dict"}) == "dict"
    assert t({"kind": "any", "name": "Any"}) == "Any"


# -- tool schema -----------------------------------------------------------------------

def test_the_tool_schema_is_derived_from_the_contract(load):
    member = load(SOURCE).symbols[0].members[0]
    assert member.tool_schema() == {
        "name": "find",
        "description": "Find issues matching a query.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Search text."},
                "limit": {"type": "integer"},
                "repo": {"type": ["string", "null"]},
            },
            "required": ["query"],
            "additionalProperties": {"type": "string"},
        },
    }


def test_the_tool_name_replaces_dots_with_double_underscores():
    class Issues:
        def find(self, q: str) -> str:
            """Find."""

    class Tracker:
        def __init__(self):
            self.issues = Issues()
    (member,) = vis.Symbol(Tracker(), name="tracker").members
    assert member.tool_schema()["name"] == "tracker__issues__find"
    assert _contract.tool_name("a.b.c") == "a__b__c"


def test_record_parameters_become_objects_with_their_fields(module):
    mod = module('''
        from dataclasses import dataclass
        from typing import Annotated, Literal, Optional
        @dataclass
        class Filter:
            """Which issues to match."""
            labels: set[str]
            state: Literal["open", "closed"] | None = None
            window: tuple[int, int] = (0, 10)
        def f(flt: Filter, tags: list[str], meta: dict[str, int], pick: Literal[1, 2],
              maybe: Optional[Filter] = None, mixed: int | str = 0, *rest: int):
            """Search."""
    ''')
    props = vis.Symbol(mod.f).members[0].tool_schema()["parameters"]["properties"]
    flt = {"type": "object", "description": "Which issues to match.",
           "properties": {
               "labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
               "state": {"enum": ["open", "closed", None], "type": ["string", "null"]},
               "window": {"type": "array", "prefixItems": [{"type": "integer"}] * 2,
                          "minItems": 2, "maxItems": 2}},
           "required": ["labels"]}
    assert props["flt"] == flt
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["meta"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["pick"] == {"enum": [1, 2], "type": "integer"}
    assert props["maybe"] == dict(flt, type=["object", "null"])
    assert props["mixed"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert props["rest"] == {"type": "array", "items": {"type": "integer"}}


def test_opaque_unresolved_and_reference_types_get_descriptive_schemas():
    s = _contract.type_schema
    assert s({"kind": "opaque", "name": "Client"}) == {"description": "Client (opaque)"}
    assert s({"kind": "unresolved", "name": "X"}) == {"description": "X (unresolved)"}
    assert s({"kind": "reference", "name": "Node"})["type"] == "object"
    assert s({"kind": "any", "name": "Any"}) == {}
    assert s({"kind": "scalar", "name": "bytes", "description": "Raw."}) == {
        "type": "string", "description": "Raw."}


def test_tool_schema_refuses_a_namespace_contract():
    with pytest.raises(ValueError):
        _contract.tool_schema({"version": 1, "name": "x", "members": []})


# -- binding arguments ---------------------------------------------------------------

def _contract_of(source_fn):
    return vis.Symbol(source_fn).contract


def test_positional_only_parameters_bind_by_position_and_keyword_only_by_name():
    def f(a, b=2, /, c=3, *, d, **rest):
        """f"""
        return a, b, c, d, rest
    args, kwargs = _contract.bind_arguments(_contract_of(f), {"d": 4, "a": 1, "c": 5, "z": 9})
    assert (args, kwargs) == ([1], {"c": 5, "d": 4, "z": 9})
    assert f(*args, **kwargs) == (1, 2, 5, 4, {"z": 9})


def test_var_positional_arguments_bind_from_their_array_property():
    def f(head, *tail):
        """f"""
        return head, tail
    args, kwargs = _contract.bind_arguments(_contract_of(f), {"head": 0, "tail": [1, 2]})
    assert f(*args, **kwargs) == (0, (1, 2))


def test_binding_refuses_unknown_arguments_and_gaps():
    def f(a, b, /, *, c=None):
        """f"""
    with pytest.raises(TypeError, match="unexpected"):
        _contract.bind_arguments(_contract_of(f), {"a": 1, "b": 2, "zzz": 3})
    with pytest.raises(TypeError, match="positional arguments before it"):
        _contract.bind_arguments(_contract_of(f), {"b": 2})
    with pytest.raises(TypeError):
        _contract.bind_arguments(_contract_of(f), ["not", "a", "dict"])
