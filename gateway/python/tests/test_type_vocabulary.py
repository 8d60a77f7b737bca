"""The contract type vocabulary and how annotations are read (docs/decisions.md, E3)."""

import functools
import json

import pytest

import blockether.vis.extension as vis
from blockether.vis.extension import _contract

STR = {"kind": "scalar", "name": "str"}
INT = {"kind": "scalar", "name": "int"}
NULL = {"kind": "null", "name": "None"}


def returns(mod, fn="f"):
    return vis.Symbol(getattr(mod, fn)).contract["returns"]


def params(mod, fn="f"):
    return vis.Symbol(getattr(mod, fn)).contract["parameters"]


@pytest.fixture(params=[True, False], ids=["postponed", "runtime"])
def both(request, module):
    """Run a source with and without postponed annotations."""
    return lambda source: module(source, future=request.param)


def test_missing_and_any_annotations_are_any(both):
    mod = both('''
        from typing import Any
        def f(a, b: Any):
            """f"""
    ''')
    assert [p["type"] for p in params(mod)] == [{"kind": "any", "name": "Any"}] * 2
    assert returns(mod) == {"kind": "any", "name": "Any"}


def test_none_is_null_and_scalars_are_scalars(both):
    mod = both('''
        def f(a: str, b: int, c: float, d: bool, e: bytes) -> None:
            """f"""
    ''')
    assert [p["type"]["name"] for p in params(mod)] == ["str", "int", "float", "bool", "bytes"]
    assert {p["type"]["kind"] for p in params(mod)} == {"scalar"}
    assert returns(mod) == NULL


def test_a_known_class_that_is_not_a_record_is_opaque(both):
    mod = both('''
        import pathlib
        class Client: ...
        def f(c: Client, p: pathlib.Path) -> Client:
            """f"""
    ''')
    assert [p["type"] for p in params(mod)] == [
        {"kind": "opaque", "name": "Client"}, {"kind": "opaque", "name": "Path"}]


def test_optional_int_ends_with_null(both):
    mod = both('''
        from typing import Optional, Union
        def f(a: Optional[int], b: Union[str, int, None], c: int | None) -> str | None:
            """f"""
    ''')
    ps = params(mod)
    assert ps[0]["type"] == {"kind": "union", "name": "union", "arguments": [INT, NULL]}
    assert ps[1]["type"]["arguments"] == [STR, INT, NULL]
    assert ps[2]["type"]["arguments"] == [INT, NULL]
    assert returns(mod)["arguments"] == [STR, NULL]


def test_literal_keeps_only_str_int_bool_and_none_values(module):
    mod = module('''
        from typing import Literal
        def f(a: Literal["a", 1, True, None, 1.5, b"x"]):
            """f"""
    ''')
    assert params(mod)[0]["type"] == {"kind": "literal", "name": "Literal",
                                      "values": ["a", 1, True, None]}


def test_literal_in_runtime_annotations_keeps_only_portable_values(module):
    mod = module('''
        from typing import Literal
        def f(a: Literal["a", 2, 1.5]):
            """f"""
    ''', future=False)
    assert params(mod)[0]["type"]["values"] == ["a", 2]


def test_annotated_strings_become_the_description_and_other_metadata_is_ignored(both):
    mod = both('''
        from typing import Annotated
        def f(a: Annotated[int, "Count.", 42, "At least one."], b: Annotated[str, 3]):
            """f"""
    ''')
    ps = params(mod)
    assert ps[0]["type"] == {"kind": "scalar", "name": "int",
                             "description": "Count.\nAt least one."}
    assert ps[1]["type"] == STR


def test_variadic_and_fixed_tuples(both):
    mod = both('''
        def f(a: tuple[int, ...], b: tuple[int, str]):
            """f"""
    ''')
    a, b = (p["type"] for p in params(mod))
    assert a == {"kind": "generic", "name": "tuple", "variadic": True, "arguments": [INT]}
    assert b == {"kind": "generic", "name": "tuple", "arguments": [INT, STR]}
    assert "variadic" not in b


def test_common_containers_are_generics_named_by_their_origin(both):
    mod = both('''
        import os
        from typing import Dict, List, Mapping, Sequence
        def f(a: list[int], b: dict[str, int], c: set[str], d: frozenset[int],
              e: Sequence[str], g: Mapping[str, int], h: os.PathLike[str], i: List[int],
              j: Dict[str, str], k: dict, m: List, n: Sequence):
            """f"""
    ''')
    names = [(p["type"]["kind"], p["type"]["name"]) for p in params(mod)]
    assert names == [("generic", n) for n in (
        "list", "dict", "set", "frozenset", "Sequence", "Mapping", "PathLike", "list", "dict",
        "dict", "list", "Sequence")]
    assert params(mod)[1]["type"]["arguments"] == [STR, INT]
    for bare in params(mod)[-3:]:
        assert "arguments" not in bare["type"]


def test_a_dataclass_is_a_record_with_public_fields_defaults_described_not_exported(both):
    mod = both('''
        from dataclasses import dataclass, field
        @dataclass
        class Page:
            """A page of results."""
            items: list[str]
            cursor: str | None = None
            size: int = 20
            tags: list[str] = field(default_factory=list)
            _private: int = 0
        def f() -> Page:
            """f"""
    ''')
    assert returns(mod) == {"kind": "record", "name": "Page", "description": "A page of results.",
                            "fields": [
        {"name": "items", "type": {"kind": "generic", "name": "list", "arguments": [STR]},
         "required": True, "has_default": False, "default_is_none": False},
        {"name": "cursor", "type": {"kind": "union", "name": "union", "arguments": [STR, NULL]},
         "required": False, "has_default": True, "default_is_none": True},
        {"name": "size", "type": INT, "required": False, "has_default": True,
         "default_is_none": False},
        {"name": "tags", "type": {"kind": "generic", "name": "list", "arguments": [STR]},
         "required": False, "has_default": True, "default_is_none": False}]}


def test_the_generated_dataclass_docstring_is_not_a_description(module):
    mod = module('''
        from dataclasses import dataclass
        @dataclass
        class Point:
            x: int
        def f() -> Point:
            """f"""
    ''')
    assert "description" not in returns(mod)


def test_a_self_referencing_dataclass_yields_a_reference_node(module):
    mod = module('''
        from dataclasses import dataclass
        @dataclass
        class Node:
            name: str
            children: list[Node]
            parent: Node | None = None
        def f() -> Node:
            """f"""
    ''')
    out = returns(mod)
    ref = {"kind": "reference", "name": "Node"}
    assert out["fields"][1]["type"] == {"kind": "generic", "name": "list", "arguments": [ref]}
    assert out["fields"][2]["type"]["arguments"] == [ref, NULL]


def test_a_recursive_string_alias_yields_a_reference_node(module):
    mod = module('''
        Tree = "dict[str, Tree]"
        def f() -> Tree:
            """f"""
    ''')
    assert returns(mod) == {"kind": "generic", "name": "dict", "arguments": [
        STR, {"kind": "reference", "name": "Tree"}]}


def test_typed_dict_and_named_tuple_are_records(module):
    mod = module('''
        from typing import NamedTuple, TypedDict, NotRequired
        class Options(TypedDict):
            """Search options."""
            query: str
            limit: NotRequired[int]
        class Pair(NamedTuple):
            left: int
            right: str | None = None
        def f(o: Options) -> Pair:
            """f"""
    ''')
    assert params(mod)[0]["type"] == {"kind": "record", "name": "Options",
                                      "description": "Search options.", "fields": [
        {"name": "query", "type": STR, "required": True, "has_default": False,
         "default_is_none": False},
        {"name": "limit", "type": INT, "required": False, "has_default": False,
         "default_is_none": False}]}
    assert returns(mod)["fields"] == [
        {"name": "left", "type": INT, "required": True, "has_default": False,
         "default_is_none": False},
        {"name": "right", "type": {"kind": "union", "name": "union", "arguments": [STR, NULL]},
         "required": False, "has_default": True, "default_is_none": True}]


def test_an_undefined_name_is_unresolved_and_imports_nothing(module):
    import sys
    mod = module('''
        def f(a: Missing, b: "list[AlsoMissing]", c: json_not_imported.Thing) -> Missing:
            """f"""
    ''')
    before = set(sys.modules)
    ps = params(mod)
    assert ps[0]["type"] == {"kind": "unresolved", "name": "Missing"}
    assert ps[1]["type"] == {"kind": "generic", "name": "list", "arguments": [
        {"kind": "unresolved", "name": "AlsoMissing"}]}
    assert ps[2]["type"] == {"kind": "unresolved", "name": "json_not_imported.Thing"}
    assert set(sys.modules) == before


def test_an_annotation_expression_with_a_side_effect_is_never_evaluated(module):
    mod = module('''
        calls = []
        def boom():
            calls.append(1)
            return int
        def f(a: boom(), b: "boom()", c: [boom() for _ in range(3)]):
            """f"""
    ''')
    types = [p["type"] for p in params(mod)]
    assert types[0] == {"kind": "unresolved", "name": "boom()"}
    assert types[1] == {"kind": "unresolved", "name": "boom()"}
    assert types[2]["kind"] == "unresolved"
    assert mod.calls == []


def test_an_unparsable_annotation_is_unresolved_with_its_raw_text(module):
    mod = module('''
        def f(a: "list[int"):
            """f"""
    ''')
    assert params(mod)[0]["type"] == {"kind": "unresolved", "name": "list[int"}


def test_qualified_names_resolve_only_through_modules_and_classes(module):
    mod = module('''
        import dataclasses, typing
        class Outer:
            @dataclasses.dataclass
            class Inner:
                x: int
        obj = object()
        def f(a: typing.Optional[int], b: Outer.Inner, c: obj.attr):
            """f"""
    ''')
    a, b, c = (p["type"] for p in params(mod))
    assert a["arguments"] == [INT, NULL]
    assert b["kind"] == "record" and b["name"] == "Inner"
    assert c == {"kind": "unresolved", "name": "obj.attr"}


def test_opaque_and_unresolved_labels_appear_in_record_fields(module):
    mod = module('''
        from dataclasses import dataclass
        class Handle: ...
        @dataclass
        class Box:
            handle: Handle
            other: Nowhere
        def f() -> Box:
            """f"""
    ''')
    fields = returns(mod)["fields"]
    assert fields[0]["type"] == {"kind": "opaque", "name": "Handle"}
    assert fields[1]["type"] == {"kind": "unresolved", "name": "Nowhere"}


def test_a_local_forward_reference_absent_from_the_module_stays_unresolved(module):
    mod = module('''
        def make():
            class Local: ...
            def f(x: Local) -> Local:
                """f"""
            return f
        f = make()
    ''')
    assert params(mod)[0]["type"] == {"kind": "unresolved", "name": "Local"}


def test_a_non_type_runtime_annotation_is_unresolved_by_its_type_name(module):
    mod = module('''
        def f(a: 42):
            """f"""
    ''', future=False)
    assert params(mod)[0]["type"] == {"kind": "unresolved", "name": "int"}


# -- defaults and reads -------------------------------------------------------------

def test_defaults_are_never_repr_called_and_factories_never_run(module):
    mod = module('''
        from dataclasses import dataclass, field
        class Secret:
            def __repr__(self):
                raise RuntimeError("repr called")
        def explode():
            raise RuntimeError("factory ran")
        @dataclass
        class Conf:
            items: list = field(default_factory=explode)
        def f(token=Secret(), flag=False, conf: Conf | None = None, *args, **kw) -> Conf:
            """f"""
    ''')
    contract = vis.Symbol(mod.f).contract
    assert contract["signature"] == "token=..., flag=..., conf=None, *args, **kw"
    assert contract["returns"]["fields"][0]["has_default"] is True
    args, kw = contract["parameters"][3:]
    assert (args["kind"], args["required"], args["has_default"]) == ("var_positional", False, False)
    assert (kw["kind"], kw["required"], kw["has_default"]) == ("var_keyword", False, False)


def test_the_signature_marks_positional_only_and_keyword_only_boundaries(module):
    mod = module('''
        def f(target, /, *labels, timeout_s=None, **options):
            """f"""
        def g(a, b=1, /, c=2, *, d, e=None):
            """g"""
        def h(*, only):
            """h"""
    ''')
    assert vis.Symbol(mod.f).contract["signature"] == "target, /, *labels, timeout_s=None, **options"
    assert vis.Symbol(mod.g).contract["signature"] == "a, b=..., /, c=..., *, d, e=None"
    assert vis.Symbol(mod.h).contract["signature"] == "*, only"


def test_two_reads_of_contract_are_equal_but_distinct_and_mutation_does_not_leak(module):
    mod = module('''
        def f(a: int) -> list[int]:
            """f"""
    ''')
    s = vis.Symbol(mod.f)
    first, second = s.contract, s.contract
    assert first == second and first is not second
    first["parameters"][0]["type"]["name"] = "changed"
    first["returns"]["arguments"].clear()
    assert s.contract == second


def test_contracts_round_trip_through_json(module):
    mod = module('''
        from typing import Annotated, Literal
        def f(a: Annotated[int, "x"], b: Literal["q", None] = None) -> dict[str, tuple[int, ...]]:
            """f"""
    ''')
    contract = vis.Symbol(mod.f).contract
    assert json.loads(json.dumps(contract)) == contract


# -- wrappers ------------------------------------------------------------------------

def test_a_cyclic_wrapped_chain_raises_value_error():
    def f():
        """f"""
    f.__wrapped__ = f
    with pytest.raises(ValueError, match="cyclic __wrapped__"):
        vis.Symbol(f)


def test_annotations_are_read_from_the_wraps_target_in_its_defining_module(module):
    models = module('''
        from dataclasses import dataclass
        @dataclass
        class Result:
            text: str
    ''')
    tools = module(f'''
        import functools
        import {models.__name__} as models
        def logged(fn):
            @functools.wraps(fn)
            def inner(*a, **k):
                return fn(*a, **k)
            return inner
        class Api:
            @logged
            def get(self, key: str, *, fresh: bool = False) -> models.Result:
                """Get one result."""
    ''')
    (member,) = vis.Symbol(tools.Api(), name="api").contract["members"]
    assert member["signature"] == "key, *, fresh=..."
    assert member["returns"]["kind"] == "record" and member["returns"]["name"] == "Result"


def test_an_explicit_signature_stops_unwrapping():
    import inspect

    def inner(a: int, b: int):
        """inner"""

    @functools.wraps(inner)
    def outer(*args):
        return inner(*args)
    outer.__signature__ = inspect.Signature([inspect.Parameter("x", inspect.Parameter.POSITIONAL_ONLY)])
    assert vis.Symbol(outer, name="outer").contract["signature"] == "x, /"


def test_on_deferred_annotation_pythons_a_function_without_the_future_import_is_unresolved(
        module, monkeypatch):
    monkeypatch.setattr(_contract, "_DEFERRED_ANNOTATIONS", True)
    plain = module('''
        def f(a: int, b=None) -> str:
            """f"""
    ''', future=False)
    postponed = module('''
        def f(a: int) -> str:
            """f"""
    ''')
    text = "deferred annotation; use from __future__ import annotations"
    contract = vis.Symbol(plain.f).contract
    assert [p["type"] for p in contract["parameters"]] == [{"kind": "unresolved", "name": text}] * 2
    assert contract["returns"] == {"kind": "unresolved", "name": text}
    assert contract["signature"] == "a, b=None"
    assert vis.Symbol(postponed.f).contract["parameters"][0]["type"] == INT


def test_a_new_type_is_described_as_its_supertype(both):
    mod = both('''
        from typing import NewType
        UserId = NewType("UserId", int)
        def f(user: UserId) -> list[UserId]:
            """f"""
    ''')
    assert params(mod)[0]["type"] == INT
    assert returns(mod) == {"kind": "generic", "name": "list", "arguments": [INT]}
