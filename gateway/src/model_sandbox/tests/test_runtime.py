"""The sandbox runtime, driven over its control socket by a fake gateway (conftest.py)."""

import base64
import time

import pytest

BUILTINS = [{"name": n, "kind": "builtin"}
            for n in ("cat", "grep", "patch", "ls", "shell", "apropos", "doc", "draft_create", "future_tool")]
HELLO = {
    "name": "greet.hello", "kind": "symbol", "doc": "Greet someone by name.",
    "contract": {
        "name": "greet.hello", "signature": "name, punct=...",
        "parameters": [
            {"name": "name", "kind": "positional_or_keyword", "required": True,
             "has_default": False, "type": {"kind": "primitive", "name": "str"}},
            {"name": "punct", "kind": "positional_or_keyword", "required": False,
             "has_default": True, "type": {"kind": "primitive", "name": "str"}},
        ],
        "returns": {"kind": "record", "name": "Greeting"},
    },
}
SEARCH = {
    "name": "github.issues.search", "kind": "mcp", "doc": "Search issues.",
    "contract": {"name": "github.issues.search", "parameters": [
        {"name": "query", "kind": "positional_or_keyword", "required": True, "has_default": False},
        {"name": "labels", "kind": "var_positional", "required": False, "has_default": False},
        {"name": "limit", "kind": "keyword_only", "required": False, "has_default": True},
        {"name": "extra", "kind": "var_keyword", "required": False, "has_default": False},
    ]},
}
FUNCTIONS = BUILTINS + [HELLO, SEARCH]


def record(type_name, **attrs):
    return {"__vis_object__": type_name, "__vis_attrs__": attrs}


def ok(value):
    return lambda call: ("ok", value)


# -- the process and its output --------------------------------------------------------

def test_ready_names_the_process_and_python(host):
    assert host.ready["t"] == "ready"
    assert host.ready["pid"] == host.proc.pid
    import conftest
    if conftest.PYTHON == "/usr/bin/python3":
        assert host.ready["python"].startswith("3.11.")
    assert host.ready["python"].startswith("3.")


def test_print_output(host):
    done, _ = host.run("print('hello')\nprint(1 + 1)")
    assert done == {"t": "done", "id": 1, "output": "hello\n2\n", "output_bytes": 8, "error": None}


def test_stderr_and_child_processes_interleave_in_order(host):
    done, _ = host.run(
        "import os, subprocess, sys\n"
        "print('one')\n"
        "sys.stderr.write('two\\n')\n"
        "os.system('echo three')\n"
        "print('four')\n"
        "subprocess.run(['sh', '-c', 'echo five >&2'])\n"
        "print('six', file=sys.stderr)\n")
    assert done["error"] is None
    assert done["output"] == "one\ntwo\nthree\nfour\nfive\nsix\n"


def test_names_persist_from_block_to_block(host):
    first, _ = host.run("x = 41\nimport json\ndef helper(): return 'h'")
    assert first["error"] is None
    done, _ = host.run("print(x + 1, json.dumps([1]), helper())")
    assert done["output"] == "42 [1] h\n"


def test_the_models_definitions_are_reported_when_they_change(host):
    first, _ = host.run("@staticmethod\ndef f(a, b=2):\n    return a + b\n\nclass P:\n    z = 1\n"
                        "data = [1, 2]\n")
    assert first["defs"] == [
        {"name": "f", "source": "@staticmethod\ndef f(a, b=2):\n    return a + b\n"},
        {"name": "P", "source": "class P:\n    z = 1\n"},
    ]
    same, _ = host.run("print(data)")
    assert "defs" not in same                      # unchanged: not sent again
    again, _ = host.run("def f(a):\n    return a\ndel P")
    assert again["defs"] == [{"name": "f", "source": "def f(a):\n    return a\n"}]


def test_a_def_not_reached_is_not_recorded(host):
    done, _ = host.run("raise ValueError('early')\ndef never(): pass")
    assert "defs" not in done and "ValueError" in done["error"]


def test_restored_definitions_run_first_and_failures_are_named(host):
    restore = [{"name": "g", "source": "def g(x):\n    return x * 2\n"},
               {"name": "bad", "source": "@missing\ndef bad(): pass\n"}]
    done, _ = host.run("print(g(21))", restore=restore)
    assert done["output"] == "42\n"
    assert done["restore_failed"] == ["bad: NameError: name 'missing' is not defined"]
    assert "defs" not in done                      # g is known already


def test_defs_lists_functions_classes_and_other_names(host):
    host.run("import json\ndef area(w, h=1):\n    'Area of a box.'\n    return w * h\n"
             "class Box: pass\nrows = {'a': 1}\n")
    done, _ = host.run("print(defs())", functions=FUNCTIONS)
    assert done["output"] == ("def area(w, h=1)  # Area of a box.\nclass Box()\n"
                              "rows: dict (1 items)\nimported: json\n"), done


def test_a_name_the_model_rebinds_keeps_its_value_across_blocks(host):
    host.run("cat = 'my cat'", functions=FUNCTIONS)
    done, _ = host.run("print(cat, type(grep).__name__)", functions=FUNCTIONS)
    assert done["output"] == "my cat GrepFunction\n"


def test_a_background_shell_returns_a_job_handle(host):
    info = {"id": 3, "cmd": "sleep 9", "pid": 77, "state": "running", "alive": True,
            "exit_code": None, "seconds": 0.1, "log": "/w/.vis/scratch/j.log", "log_bytes": 0}

    def answer(call):
        if call["fn"] == "shell":
            return ("ok", info)
        if call["args"].get("op") == "logs":
            return ("ok", {"text": "line\n", "start": 0, "end": 5, "size": 5})
        return ("ok", {**info, "state": "stopped", "alive": False})
    done, calls = host.run("j = shell('sleep 9', background=True)\nprint(j)\n"
                           "l = j.logs(tail=5)\nprint(repr(l), l.end)\nprint(j.stop(), j.alive)",
                           FUNCTIONS + [{"name": "jobs", "kind": "builtin"}], answer)
    assert done["error"] is None, done
    assert done["output"].splitlines() == [
        "<job 3 running pid=77 0.1s log=/w/.vis/scratch/j.log: sleep 9>",
        "line\n 5".splitlines()[0], " 5", "stopped False"]
    assert calls[0]["args"] == {"cmd": "sleep 9", "background": True}
    assert calls[1]["args"] == {"op": "logs", "id": 3, "tail": 5}


def test_apropos_hits_go_to_doc_and_no_argument_groups_by_namespace(host):
    hits = [{"name": "greet.hello", "kind": "symbol", "summary": "Greet someone."},
            {"name": "cat", "kind": "builtin", "summary": "Read a file."}]

    def answer(call):
        if call["fn"] == "apropos":
            return ("ok", hits)
        return ("ok", f"doc of {call['args']['name']}")
    done, calls = host.run("h = apropos()\nprint(h)\nprint(doc(h[0]))\nprint(doc(greet.hello))\n"
                           "print(apropos('sorted')[-1])",
                           FUNCTIONS, answer)
    assert done["error"] is None, done
    out = done["output"]
    assert "greet:\n  greet.hello — Greet someone.\nsandbox built-ins:\n  cat — Read a file." in out
    assert "doc of greet.hello" in out
    assert "sorted — " in out                       # Python's own built-ins are searched too
    assert calls[0]["args"] == {"text": None}


def test_doc_of_a_python_builtin_or_a_model_function_is_answered_locally(host):
    host.run("def mine(a):\n    'Mine.'\n    return a\n", FUNCTIONS)

    def answer(call):
        return ("error", "LookupError", "nothing named")
    done, _ = host.run("print(doc('mine'))\nprint(doc('len').splitlines()[0])", FUNCTIONS, answer)
    assert done["output"] == "def mine(a):\n    'Mine.'\n    return a\nlen(obj, /)\n", done


def test_only_prints_and_the_last_expressions_value_come_back(host):
    done, _ = host.run("1 + 1\n'a value'")
    assert done["output"] == "'a value'\n" and done["error"] is None
    done, _ = host.run("x = 3\nprint('p')\nNone")
    assert done["output"] == "p\n"
    done, _ = host.run("async def f():\n    return [1]\nawait f()")
    assert done["output"] == "[1]\n" and done["error"] is None


def test_top_level_await(host):
    done, _ = host.run("import asyncio\nawait asyncio.sleep(0.01)\nprint('slept')")
    assert done["error"] is None and done["output"] == "slept\n"


def test_syntax_error_names_its_line(host):
    done, _ = host.run("x = 1\nprint(x\ny = 2 +\n")
    assert done["output"] == ""
    if host.ready["python"].startswith("3.9."):     # the old parser points past the paren
        assert 'File "<block>", line 3' in done["error"], done["error"]
    else:
        assert 'File "<block>", line 2' in done["error"]
        assert "print(x" in done["error"]
    assert "^" in done["error"]
    assert "SyntaxError" in done["error"].splitlines()[-1]
    assert "Traceback" not in done["error"]


def test_traceback_shows_only_block_frames(host):
    done, _ = host.run("def f(n):\n    return 10 / n\n\nprint('before')\nf(0)\n")
    assert done["output"] == "before\n"
    error = done["error"]
    assert error.startswith("Traceback (most recent call last):")
    assert 'File "<block>", line 5, in <module>' in error
    assert 'File "<block>", line 2, in f' in error and "return 10 / n" in error
    assert error.splitlines()[-1] == "ZeroDivisionError: division by zero"
    assert "<string>" not in error and "_run_block" not in error


def test_system_exit_ends_the_block_not_the_process(host):
    done, _ = host.run("print('bye')\nexit(3)")
    assert done["output"] == "bye\n"
    assert done["error"].splitlines()[-1] == "SystemExit: 3"
    done, _ = host.run("import sys\nsys.exit()")
    assert done["error"].splitlines()[-1] == "SystemExit"
    done, _ = host.run("print('still here')")
    assert done["output"] == "still here\n"


def test_stdin_is_empty(host):
    done, _ = host.run("try:\n    input()\nexcept EOFError:\n    print('eof')")
    assert done["output"] == "eof\n"


def test_hermetic_no_site_packages(host):
    done, _ = host.run("import pytest")
    assert done["error"].splitlines()[-1] == "ModuleNotFoundError: No module named 'pytest'"
    done, _ = host.run("import sys\nprint([p for p in sys.path if 'packages' in p])")
    assert done["output"] == "[]\n"


def test_one_mebibyte_is_truncated_with_a_notice(host):
    done, _ = host.run("for i in range(65536):\n    print(f'line {i:09d}')")
    line_bytes = len("line 000000000\n")
    assert done["output_bytes"] == 65536 * line_bytes
    output = done["output"]
    notice = [line for line in output.splitlines() if "output truncated" in line]
    assert notice == [f"… [output truncated: {65536 * line_bytes:,} bytes printed; "
                      "the first 49,152 and the last 16,384 are shown]"]
    assert len(output.encode()) <= 64 * 1024 + len(notice[0].encode()) + 2
    assert output.startswith("line 000000000\nline 000000001\n")
    assert output.endswith("line 000065534\nline 000065535\n")


def test_output_just_under_the_cap_is_whole(host):
    done, _ = host.run("import sys\n_ = sys.stdout.write('é' * 32767 + 'x\\n')")
    assert done["output_bytes"] == 65536
    assert done["output"] == "é" * 32767 + "x\n"


def test_hundred_mebibytes_cost_only_time(host):
    started = time.monotonic()
    done, _ = host.run("import sys\nchunk = 'z' * (1 << 20)\n"
                       "for _ in range(100):\n    sys.stdout.write(chunk)\nprint('end')")
    assert time.monotonic() - started < 10
    assert done["output_bytes"] == 100 * (1 << 20) + 4
    assert done["output"].endswith("zzzend\n")
    with open(f"/proc/{host.proc.pid}/status") as status:
        peak_kib = int(status.read().split("VmHWM:")[1].split()[0])
    assert peak_kib < 80 * 1024                  # nowhere near the 100 MiB printed


# -- host functions --------------------------------------------------------------------

def test_builtin_returns_the_host_value(host):
    done, calls = host.run("print(cat('src/main.rs', 10))\nprint(ls()['entries'])",
                           BUILTINS, answer=lambda c: ("ok", "10:ab│ fn main() {}")
                           if c["fn"] == "cat" else ("ok", {"entries": ["a", "b"]}))
    assert done["error"] is None
    assert done["output"] == "10:ab│ fn main() {}\n['a', 'b']\n"
    assert [(c["fn"], c["args"]) for c in calls] == [
        ("cat", {"path": "src/main.rs", "start": 10}), ("ls", {})]
    assert calls[0]["id"] < calls[1]["id"]


def test_unknown_builtin_takes_keywords_only(host):
    done, calls = host.run("print(future_tool(name='spike'))\nfuture_tool('spike')",
                           BUILTINS, answer=ok("created"))
    assert done["output"] == "created\n"
    assert calls[0]["fn"] == "future_tool" and calls[0]["args"] == {"name": "spike"}
    assert done["error"].splitlines()[-1] == "TypeError: future_tool() takes keyword arguments only"


def test_draft_create_takes_its_label_by_position_or_keyword(host):
    done, calls = host.run("draft_create('spike')\ndraft_create(label='two')",
                           BUILTINS, answer=ok("created"))
    assert done["error"] is None
    assert [(c["fn"], c["args"]) for c in calls] == [
        ("draft_create", {"label": "spike"}), ("draft_create", {"label": "two"})]


def test_doc_accepts_a_function_object(host):
    done, calls = host.run("print(doc(greet.hello))\nprint(doc('patch'))",
                           FUNCTIONS, answer=lambda c: ("ok", "doc of " + c["args"]["name"]))
    assert done["output"] == "doc of greet.hello\ndoc of patch\n"


def test_record_with_nested_records_is_frozen(host):
    value = record("Greeting", text="hi", to=record("Person", name="Ann"),
                   tags=[record("Tag", label="x")],
                   raw={"__vis_bytes__": base64.b64encode(b"\x00\xff").decode()})
    code = (
        "g = await greet.hello('Ann')\n"
        "print(g.text, g.to.name, g.tags[0].label, g.raw)\n"
        "print(repr(g.to), type(g).__name__)\n"
        "try:\n    g.text = 'bye'\nexcept AttributeError as e:\n    print('frozen:', e)\n"
        "try:\n    g.to.name = 'Bob'\nexcept AttributeError:\n    print('nested frozen')\n"
        "print(g._asdict()['to'] == {'name': 'Ann'}, g.to == g.to, g.to != g)\n"
        "try:\n    g.missing\nexcept AttributeError as e:\n    print(e)\n")
    done, _ = host.run(code, FUNCTIONS, answer=ok(value))
    assert done["error"] is None, done["error"]
    assert done["output"].splitlines() == [
        "hi Ann x b'\\x00\\xff'",
        "Person(name='Ann') Greeting",
        "frozen: Greeting is a frozen record; cannot set 'text'",
        "nested frozen",
        "True True True",
        "Greeting record has no field 'missing'",
    ]


def test_function_objects_expose_contract_doc_and_repr(host):
    done, _ = host.run(
        "f = greet.hello\n"
        "print(type(f.contract).__name__, f.contract['name'], f.__name__)\n"
        "print(f.__doc__)\n"
        "print(repr(f))\n"
        "print(repr(cat))\n"
        "print(github.issues.search.contract['parameters'][0]['name'])", FUNCTIONS)
    assert done["error"] is None, done["error"]
    assert done["output"].splitlines() == [
        "dict greet.hello hello",
        "Greet someone by name.",
        "<symbol greet.hello(name, punct=...) -> Greeting>",
        '<builtin cat(path, start=None, end=None)>',
        "query",
    ]


def test_an_unavailable_name_raises_its_reason_on_any_use(host):
    why = "the MCP server web needs a sign-in"
    done, calls = host.run(
        "try:\n"
        "    await web.echo(text='x')\n"
        "except PermissionError as e:\n"
        "    print('refused:', e)\n"
        "print('web' in dir(), repr(web).startswith('<unavailable web'))",
        FUNCTIONS + [{"name": "web", "kind": "unavailable", "doc": why}])
    assert done["error"] is None, done["error"]
    assert done["output"].splitlines() == [f"refused: {why}", "True True"]
    assert calls == []


def test_positional_arguments_are_bound_by_the_contract(host):
    done, calls = host.run(
        "await greet.hello('Ann', '!')\n"
        "await github.issues.search('bug', 'p1', 'p2', limit=5, sort='new')",
        FUNCTIONS, answer=ok(None))
    assert done["error"] is None, done["error"]
    assert calls[0]["fn"] == "greet.hello"
    assert calls[0]["args"] == {"name": "Ann", "punct": "!"}
    assert calls[1]["fn"] == "github.issues.search"
    assert calls[1]["args"] == {"query": "bug", "labels": ["p1", "p2"], "limit": 5, "sort": "new"}


def test_bad_arguments_raise_type_error_before_any_host_call(host):
    done, calls = host.run(
        "for attempt in (lambda: greet.hello(), lambda: greet.hello('Ann', mood='x'),\n"
        "                lambda: greet.hello('a', 'b', 'c'), lambda: cat(),\n"
        "                lambda: greet.hello('Ann', name='Bob')):\n"
        "    try:\n"
        "        attempt()\n"
        "    except TypeError as e:\n"
        "        print(e)\n", FUNCTIONS)
    assert calls == []
    assert done["output"].splitlines() == [
        "greet.hello() missing required argument(s): 'name'",
        "greet.hello() got an unexpected keyword argument 'mood'",
        "greet.hello() takes 2 positional argument(s) but 3 were given",
        "cat() missing required argument(s): 'path'",
        "greet.hello() got multiple values for argument 'name'",
    ]


def test_arguments_cross_as_json(host):
    done, calls = host.run(
        "import pathlib\n"
        "r = await greet.hello('x')\n"
        "await greet.hello({'t': (1, 2), 's': {3}, 'b': b'hi', 'r': r, 'p': pathlib.Path('a/b')})\n"
        "try:\n    await greet.hello(object())\nexcept TypeError as e:\n    print(e)\n"
        "try:\n    await greet.hello(float('nan'))\nexcept TypeError as e:\n    print('nan refused')\n",
        FUNCTIONS, answer=ok(record("Greeting", text="hi", to=record("Person", name="A"))))
    assert done["error"] is None, done["error"]
    assert len(calls) == 2
    assert calls[1]["args"] == {"name": {
        "t": [1, 2], "s": [3], "b": {"__vis_bytes__": base64.b64encode(b"hi").decode()},
        "r": {"text": "hi", "to": {"name": "A"}}, "p": "a/b"}}
    lines = done["output"].splitlines()
    assert lines[0].startswith("greet.hello(): arguments must be JSON data")
    assert "a value of type object cannot be sent as JSON" in lines[0]
    assert lines[1] == "nan refused"


def test_gather_matches_replies_arriving_in_reverse_order(host):
    host.start("a, b, c = await gather(greet.hello('A'), greet.hello('B'), greet.hello('C'))\n"
               "print(a, b, c)", FUNCTIONS)
    calls = [host.recv() for _ in range(3)]
    assert [c["args"]["name"] for c in calls] == ["A", "B", "C"]
    assert len({c["id"] for c in calls}) == 3
    for call in reversed(calls):
        host.reply(call, ok="hello " + call["args"]["name"])
    done = host.recv()
    assert done["error"] is None, done["error"]
    assert done["output"] == "hello A hello B hello C\n"


def test_sync_builtin_waits_past_an_unrelated_async_reply(host):
    host.start(
        "import asyncio\n"
        "pending = asyncio.ensure_future(greet.hello('Ann'))\n"
        "await asyncio.sleep(0)\n"          # let the symbol call go out first
        "text = cat('notes.txt')\n"
        "print(text, (await pending)['to'])", FUNCTIONS)
    symbol_call, cat_call = host.recv(), host.recv()
    assert (symbol_call["fn"], cat_call["fn"]) == ("greet.hello", "cat")
    host.reply(symbol_call, ok={"to": "Ann"})       # the unrelated reply comes first
    host.reply(cat_call, ok="file text")
    done = host.recv()
    assert done["error"] is None, done["error"]
    assert done["output"] == "file text Ann\n"


def test_grep_pages_itself(host):
    pages = {0: {"text": "a.rs (1)\n  1:aa│ one\n", "hits": 3, "files": 2, "next": 1},
             1: {"text": "b.rs (1)\n  2:bb│ two\n", "hits": 3, "files": 2, "next": 2},
             2: {"text": "b.rs (1)\n  9:cc│ three\n", "hits": 3, "files": 2, "next": None}}
    code = (
        "g = grep('needle', paths=['src'])\n"
        "print(g.hits, g.files)\n"
        "print(g)\n"
        "print(next(g), end='')\n"
        "print(g.all(), end='')\n"
        "print(next(g, 'done'))\n"
        "print(len(list(g)), grep('x').all().count('│'))\n")
    done, calls = host.run(code, BUILTINS, answer=lambda c: ("ok", pages[c["args"]["cursor"]]))
    assert done["error"] is None, done["error"]
    assert calls[0]["args"] == {"query": "needle", "paths": ["src"], "cursor": 0}
    assert calls[1]["args"] == {"query": "needle", "paths": ["src"], "cursor": 1}
    assert done["output"] == (
        "3 2\n"
        "a.rs (1)\n  1:aa│ one\n… more hits: next(g) or g.all()\n"
        "b.rs (1)\n  2:bb│ two\n"
        "b.rs (1)\n  9:cc│ three\n"
        "done\n"
        "3 3\n")


def test_permission_error_reply_raises_permission_error(host):
    done, _ = host.run(
        "try:\n    patch('/etc/passwd', [])\nexcept PermissionError as e:\n    print('caught', e)\n"
        "patch('/etc/passwd', [])",
        BUILTINS, answer=lambda c: ("error", "PermissionError", "outside the workspace: /etc"))
    assert done["output"] == "caught outside the workspace: /etc\n"
    error = done["error"]
    assert error.splitlines()[-1] == "PermissionError: outside the workspace: /etc"
    assert 'File "<block>", line 5, in <module>' in error
    assert "<string>" not in error


def test_unknown_error_type_raises_tool_error(host):
    done, _ = host.run(
        "try:\n    await greet.hello('Ann')\n"
        "except ToolError as e:\n"
        "    print(isinstance(e, RuntimeError), e.type, '|', e.message, '|', e)\n",
        FUNCTIONS, answer=lambda c: ("error", "RateLimited", "slow down"))
    assert done["error"] is None, done["error"]
    assert done["output"] == "True RateLimited | slow down | RateLimited: slow down\n"


def test_process_survives_many_blocks_quickly(host):
    timings = []
    for _ in range(50):
        started = time.perf_counter()
        done, _ = host.run("print(1)")
        timings.append(time.perf_counter() - started)
        assert done["output"] == "1\n"
    assert sorted(timings)[25] < 0.02


@pytest.mark.parametrize("code, last", [
    ("import asyncio\nawait asyncio.sleep(0)\nraise SystemExit(2)", "SystemExit: 2"),
    ("async def f():\n    raise KeyError('k')\nawait f()", "KeyError: 'k'"),
])
def test_errors_inside_awaited_code(host, code, last):
    done, _ = host.run(code)
    assert done["error"].splitlines()[-1] == last
    assert "asyncio" not in done["error"]
    done, _ = host.run("print('ok')")
    assert done["output"] == "ok\n"


# -- process hygiene -------------------------------------------------------------------

def test_block_state_of_the_process_is_reset(host, tmp_path):
    done, _ = host.run("import os, sys, io\nos.chdir('/')\nsys.stdout = io.StringIO()\n"
                       "os.close(2)\nprint('swallowed')")
    assert done["error"] is None and done["output"] == ""
    done, _ = host.run("import os, sys\nprint(os.getcwd())\nprint('err', file=sys.stderr)")
    assert done["output"] == f"{tmp_path}\nerr\n"


def test_children_do_not_inherit_the_control_socket(host):
    done, _ = host.run(f"import os\n_ = os.system('[ -e /proc/$$/fd/{host.control_fd} ] "
                       "&& echo leaked || echo sealed')")
    assert done["output"] == "sealed\n"


def test_invalid_utf8_output_is_replaced(host):
    done, _ = host.run("import os\n_ = os.write(1, b'a\\xffb\\n')")
    assert done["output"] == "a\ufffdb\n" and done["output_bytes"] == 4


def test_plain_symbol_and_namespace_repr(host):
    todo = {"name": "todo_add", "kind": "symbol", "doc": "Add a todo.",
            "contract": {"name": "todo_add", "parameters": [
                {"name": "text", "kind": "positional_or_keyword", "required": True}],
                "returns": {"kind": "generic", "name": "list",
                            "arguments": [{"kind": "primitive", "name": "str"}]}}}
    done, calls = host.run("print(await todo_add('milk'))\nprint(todo_add)\nprint(github.issues)",
                           FUNCTIONS + [todo], answer=ok(["milk"]))
    assert done["error"] is None, done["error"]
    assert calls[0]["fn"] == "todo_add" and calls[0]["args"] == {"text": "milk"}
    assert done["output"].splitlines() == [
        "['milk']", "<symbol todo_add(text) -> list[str]>", "<namespace github.issues: search>"]


def test_sync_builtins_from_threads_get_their_own_replies(host):
    host.start("from concurrent.futures import ThreadPoolExecutor\n"
               "with ThreadPoolExecutor(2) as pool:\n"
               "    print(list(pool.map(cat, ['a', 'b'])))", FUNCTIONS)
    calls = [host.recv(), host.recv()]
    for call in reversed(calls):
        host.reply(call, ok="text of " + call["args"]["path"])
    done = host.recv()
    assert done["error"] is None, done["error"]
    assert done["output"] == "['text of a', 'text of b']\n"


def test_idle_process_preloads_and_still_answers(host):
    time.sleep(0.4)                              # long enough for the idle imports
    done, _ = host.run("import sys\nprint([m for m in ('traceback', 'asyncio') if m in sys.modules])\n"
                       "import asyncio\nawait asyncio.sleep(0)\n1/0")
    assert done["output"] == "['traceback', 'asyncio']\n"
    assert done["error"].splitlines()[-1] == "ZeroDivisionError: division by zero"


def test_nonblocking_control_socket_is_accepted(make_host):
    fake = make_host(nonblocking=True)
    time.sleep(0.1)                              # the runtime must wait, not see EOF
    done, _ = fake.run("print('ok')")
    assert done["output"] == "ok\n"


def test_control_socket_may_arrive_as_stdin_and_stdout(make_host):
    fake = make_host(on_stdio=True)
    done, calls = fake.run("import os\nos.system('echo child')\nprint(cat('a'))\n"
                           "try:\n    input()\nexcept EOFError:\n    print('stdin is empty')",
                           BUILTINS, answer=ok("text"))
    assert done["output"] == "child\ntext\nstdin is empty\n", done["error"]
    assert calls[0]["args"] == {"path": "a"}


def test_runtime_exits_when_the_gateway_goes_away(make_host):
    fake = make_host()
    fake.reader.close()
    fake.sock.close()
    assert fake.proc.wait(timeout=5) == 0


def test_sync_blocks_may_drive_their_own_event_loop(host):
    done, _ = host.run("import asyncio\nprint(asyncio.run(greet.hello('a')))",
                       FUNCTIONS, answer=ok("A"))
    assert done["output"] == "A\n", done["error"]
    done, _ = host.run("import asyncio\n"
                       "print(asyncio.get_event_loop().run_until_complete(greet.hello('b')))",
                       FUNCTIONS, answer=ok("B"))
    assert done["output"] == "B\n", done["error"]


def test_forgotten_await_is_reported_by_name(host):
    done, calls = host.run("greet.hello('Ann')\nprint('on')", FUNCTIONS)
    assert calls == []
    assert "coroutine 'greet.hello' was never awaited" in done["output"]
    assert done["output"].endswith("on\n")
