"""The process behind the model's single tool, ``python_execution(code)``.

The gateway starts one of these per session, hermetic (standard library only):

    /usr/bin/python3 -I -S -c <this file> <FD>

FD is a connected Unix stream socket: the control channel. Every message on it
is one JSON object on one line (UTF-8, no embedded newlines).

Gateway -> runtime
  {"t":"run","id":R,"code":SRC,"functions":[FN...]}  run one block
      FN is {"name","kind"} with kind "builtin", or {"name","kind","contract","doc"}
      with kind "symbol" or "mcp"; a dotted name becomes nested attributes; kind
      "unavailable" names a prefix whose every use raises PermissionError(doc).
  {"t":"reply","id":C,"ok":VALUE}                     a host call succeeded
  {"t":"reply","id":C,"error":{"type":T,"message":M}} a host call failed
Runtime -> gateway
  {"t":"ready","pid":P,"python":"3.11.x"}             once, when set up
  {"t":"call","id":C,"run":R,"fn":NAME,"args":{...}}  a host call; C counts up per process
  {"t":"done","id":R,"output":TEXT,"output_bytes":N,"error":TEXT|null}

Blocks run one at a time in one ``__main__`` module that lives as long as the process:
names a block defines are there in the next block. Top-level ``await`` is allowed and
only what the block prints comes back (a last statement that is an expression prints its
value's repr unless it is None, as a REPL does). A ``run`` may carry ``"restore": [DEF...]``
(DEF is {"name","source"}): the model's ``def``/``class`` statements from an earlier
process, run first. ``done`` then carries ``"defs": [DEF...]`` when the block changed
the model's top-level functions and classes, and ``"restore_failed": ["name: error"]``. ``output`` is everything
written to fd 1 and fd 2 during the block (one pipe, so the order holds, child
processes included): all of it up to 64 KiB, else the first 48 KiB and the last
16 KiB with one notice line between; ``output_bytes`` counts every byte. ``error``
is the traceback (frames of ``<block>`` only) or the SyntaxError; ``exit()`` ends
the block, never the process. A ``done`` is always sent, one per ``run``.

The block sees each function at its (dotted) name. Built-ins are synchronous:
they send a ``call`` and wait for its ``reply``. ``grep`` returns a ``Grep`` that
pages itself by calling ``grep`` again with ``cursor`` = the previous ``next``.
Symbols and MCP tools are coroutine functions; many calls may be outstanding and
replies may come in any order. Positional arguments are bound to names by the
contract's ``parameters`` (built-ins: a small table below), ``*args`` travel as a
list under their name, extra keywords at the top level; an argument the caller did
not pass is left out (the host knows the defaults). Bad arguments raise TypeError in
the block before anything is sent. Values are JSON both ways; a tuple or set goes
as a list, bytes as ``{"__vis_bytes__": BASE64}``, and a host object
``{"__vis_object__": NAME, "__vis_attrs__": {...}}`` arrives as a frozen record.
An error reply raises the builtin exception of that ``type`` when it is one of
ERROR_TYPES, else ``ToolError`` ("TYPE: message").

The gateway enforces time limits by killing the process group and starts a new
process afterwards; when the control socket closes, the runtime exits.

Startup stays cheap on purpose: no ``json`` (it drags in ``re`` and ``enum``; the C
codec in ``_json`` is used directly), no ``threading`` (``_thread`` suffices), and
``traceback``/``asyncio`` are loaded on first use or while the process sits idle.
"""

import _thread
import binascii
import builtins
import itertools
import os
import sys
from _ast import PyCF_ALLOW_TOP_LEVEL_AWAIT, PyCF_ONLY_AST
from _queue import Empty, SimpleQueue

HEAD, TAIL = 48 * 1024, 16 * 1024          # output kept: first HEAD and last TAIL bytes
CO_COROUTINE = 0x80                         # code flag of a block that uses top-level await
ERROR_TYPES = {name: getattr(builtins, name) for name in (
    "PermissionError", "FileNotFoundError", "ValueError", "TypeError", "TimeoutError",
    "LookupError", "RuntimeError", "OSError", "IsADirectoryError", "ConnectionError")}
MORE_HITS = "… more hits: next(g) or g.all()"
BUILTIN_SIGNATURES = {                      # positional order of the known built-ins
    "cat": "path, start=None, end=None",
    "grep": "query=None, paths=None, include=None, exclude=None, is_regex=False, context=0, "
            "limit=None, offset=0, case=None",
    "patch": "path, edits",
    "ls": 'path="."',
    "shell": "cmd, timeout=None, background=False",
    "jobs": "",
    "apropos": "text=None",
    "doc": "name=None",
    "draft_create": "label",
    "draft_approve": "message=None",
    "draft_discard": "reason=None",
}
DRAFT_FUNCTIONS = ("draft_create", "draft_approve", "draft_discard")


# -- values crossing the boundary ------------------------------------------------------

class ToolError(RuntimeError):
    """A host function failed with an error type that has no Python builtin twin."""

    def __init__(self, type, message):
        super().__init__(type, message)
        self.type, self.message = type, message

    def __str__(self):
        return f"{self.type}: {self.message}"


class Record:
    """An immutable copy of an object returned by the host (the class stays there)."""
    __slots__ = ("_vis_fields",)

    def __init__(self, fields):
        object.__setattr__(self, "_vis_fields", fields)

    def __getattr__(self, name):
        if name == "_vis_fields" or name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._vis_fields[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} record has no field {name!r}") from None

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is a frozen record; cannot set {name!r}")

    def __repr__(self):
        body = ", ".join(f"{k}={v!r}" for k, v in self._vis_fields.items())
        return f"{type(self).__name__}({body})"

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return type(self).__name__ == type(other).__name__ and self._vis_fields == other._vis_fields

    def __hash__(self):
        return hash((type(self).__name__, tuple(self._vis_fields.items())))

    def __reduce__(self):                        # copy.copy / deepcopy
        return _record, (type(self).__name__, self._vis_fields)

    def _asdict(self):
        """The fields as plain data: nested records become dicts too."""
        return {k: _plain(v) for k, v in self._vis_fields.items()}


_record_classes = {}


def _record(name, fields):
    cls = _record_classes.get(name)
    if cls is None:
        cls = _record_classes[name] = type(str(name), (Record,), {"__slots__": ()})
    return cls(fields)


def _plain(value):
    if isinstance(value, Record):
        return value._asdict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _revive(obj):
    """JSON object hook: host records and bytes become Python values."""
    if "__vis_object__" in obj:
        return _record(obj["__vis_object__"], obj.get("__vis_attrs__") or {})
    if "__vis_bytes__" in obj and len(obj) == 1:
        return binascii.a2b_base64(obj["__vis_bytes__"])
    return obj


def _portable(value):
    """JSON encoder fallback: what JSON cannot say natively, or a refusal."""
    if isinstance(value, Record):
        return dict(value._vis_fields)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"__vis_bytes__": binascii.b2a_base64(value, newline=False).decode("ascii")}
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, (HostFunction, Namespace)):
        return value._vis_name
    if hasattr(value, "__fspath__"):
        return os.fspath(value)
    raise TypeError(f"a value of type {type(value).__name__} cannot be sent as JSON")


def _make_codec():
    """(loads, dumps) over the C accelerator of the json package, or json itself."""
    try:
        import _json
        ctx = type("Ctx", (), {})()
        ctx.strict, ctx.object_hook, ctx.object_pairs_hook = True, _revive, None
        ctx.parse_float, ctx.parse_int, ctx.parse_constant = float, int, float
        scan = _json.make_scanner(ctx)

        def loads(text):
            value, end = scan(text, 0)
            if end != len(text):
                raise ValueError(f"extra data after JSON value at {end}")
            return value

        def dumps(value):
            encode = _json.make_encoder({}, _portable, _json.encode_basestring, None,
                                        ":", ",", False, False, False)
            return "".join(encode(value, 0))

        dumps({"probe": [1, 2.5, b""]})
        return loads, dumps
    except Exception:                             # another CPython: the plain json package
        pass
    import json
    decoder = json.JSONDecoder(object_hook=_revive)
    return decoder.decode, lambda value: json.dumps(
        value, default=_portable, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


_loads, _dumps = _make_codec()


# -- the control channel ---------------------------------------------------------------

CONTROL_FD = -1
_send_lock = _thread.allocate_lock()
_pending = {}                 # call id -> callback(reply), run on the channel reader thread
_call_ids = itertools.count(1)
_inbox = SimpleQueue()        # run messages for the main thread
_current_run = None


def _write(data):
    with _send_lock:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(CONTROL_FD, view):]
        except OSError:
            os._exit(0)                           # the gateway went away


def _send(message):
    _write((_dumps(message) + "\n").encode("utf-8"))


def _channel_reader():
    buffer = bytearray()
    while True:
        try:
            chunk = os.read(CONTROL_FD, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            os._exit(0)                           # control socket closed: we are done
        start = len(buffer)
        buffer += chunk
        while (end := buffer.find(b"\n", start)) >= 0:
            line, start = bytes(buffer[:end]).strip(), 0
            del buffer[:end + 1]
            if line:
                _dispatch(line)


def _dispatch(line):
    try:
        message = _loads(line.decode("utf-8"))
        kind = message.get("t")
    except Exception as exc:
        return _diagnose(f"unreadable control message ({exc}): {line[:200]!r}")
    if kind == "reply":
        deliver = _pending.pop(message.get("id"), None)
        if deliver is not None:
            deliver(message)
    elif kind == "run":
        _inbox.put(message)
    else:
        _diagnose(f"unknown control message type {kind!r}")


def _encode_call(fn, args):
    """The call line for fn(args) and its id; TypeError when args are not JSON."""
    call_id = next(_call_ids)
    try:
        line = _dumps({"t": "call", "id": call_id, "run": _current_run, "fn": fn, "args": args})
        return call_id, (line + "\n").encode("utf-8")
    except (TypeError, ValueError, UnicodeError, RecursionError) as exc:
        problem = str(exc)
    raise TypeError(f"{fn}(): arguments must be JSON data (str, int, float, bool, None, "
                    f"list, tuple, dict, set, bytes, records); {problem}")


def _outcome(reply):
    error = reply.get("error")
    if error is None:
        return reply.get("ok")
    if not isinstance(error, dict):
        error = {"message": error}
    kind, message = str(error.get("type") or "Error"), str(error.get("message") or "")
    cls = ERROR_TYPES.get(kind)
    raise cls(message) if cls else ToolError(kind, message)


def _call(fn, args):
    """A synchronous host call: send, then wait for the reply with our id."""
    call_id, line = _encode_call(fn, args)
    arrived = _thread.allocate_lock()
    arrived.acquire()
    box = []
    _pending[call_id] = lambda reply: (box.append(reply), arrived.release())
    _write(line)
    arrived.acquire()
    return _outcome(box[0])


async def _acall(call_id, line):
    """An asynchronous host call; many may be outstanding at once."""
    import asyncio
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def deliver(reply):
        try:
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(reply))
        except RuntimeError:                      # that loop is closed: nobody waits
            pass

    _pending[call_id] = deliver
    try:
        _write(line)
        reply = await future
    finally:
        _pending.pop(call_id, None)
    return _outcome(reply)


# -- functions the block sees ----------------------------------------------------------

def _bind(fn, params, args, kwargs):
    """Named arguments for the host, bound the way Python would bind them."""
    positional = [p for p in params
                  if p.get("kind") in ("positional_only", "positional_or_keyword")]
    star = next((p["name"] for p in params if p.get("kind") == "var_positional"), None)
    keywords = any(p.get("kind") == "var_keyword" for p in params)
    if len(args) > len(positional) and star is None:
        if not positional:
            raise TypeError(f"{fn}() takes keyword arguments only")
        raise TypeError(f"{fn}() takes {len(positional)} positional argument(s) "
                        f"but {len(args)} were given")
    bound = {p["name"]: value for p, value in zip(positional, args)}
    if star is not None and len(args) > len(positional):
        bound[star] = list(args[len(positional):])
    by_name = {p["name"]: p for p in params}
    for name, value in kwargs.items():
        param = by_name.get(name)
        kind = param.get("kind") if param else None
        if kind in ("positional_or_keyword", "keyword_only"):
            if name in bound:
                raise TypeError(f"{fn}() got multiple values for argument {name!r}")
        elif not keywords or kind is not None:
            raise TypeError(f"{fn}() got an unexpected keyword argument {name!r}")
        bound[name] = value
    missing = [p["name"] for p in params if p.get("required") and p["name"] not in bound
               and p.get("kind") not in ("var_positional", "var_keyword")]
    if missing:
        raise TypeError(f"{fn}() missing required argument(s): "
                        + ", ".join(repr(m) for m in missing))
    return bound


def _type_text(t):
    """A contract type as text: Greeting, list[Greeting], str | None."""
    if not isinstance(t, dict):
        return str(t or "")
    args = [_type_text(a) for a in t.get("arguments") or ()]
    if t.get("kind") == "union":
        return " | ".join(args)
    name = t.get("name") or "Any"
    return f"{name}[{', '.join(args)}]" if args else name


class Namespace:
    """The dotted prefix of host functions (``greet`` in ``greet.hello``)."""

    def __init__(self, name):
        self._vis_name = name

    def __repr__(self):
        members = ", ".join(k for k in vars(self) if not k.startswith("_"))
        return f"<namespace {self._vis_name}: {members}>"


class Unavailable(Namespace):
    """A name whose functions cannot be offered now (an MCP server waiting for a sign-in):
    using any of them raises ``PermissionError`` saying why."""

    def __init__(self, name, why):
        super().__init__(name)
        self._vis_why = why

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise PermissionError(self._vis_why)

    def __call__(self, *args, **kwargs):
        raise PermissionError(self._vis_why)

    def __repr__(self):
        return f"<unavailable {self._vis_name}: {self._vis_why}>"


class HostFunction:
    """A function whose body runs in the gateway: a built-in, symbol or MCP tool."""

    def __init__(self, name, kind, contract, doc, params):
        self._vis_name, self.kind, self._params = name, kind, params
        self.contract, self.__doc__ = contract, doc
        self.__name__ = name.rpartition(".")[2]
        self.__qualname__ = name

    def __repr__(self):
        contract = self.contract or {}
        signature = contract.get("signature")
        if signature is None:
            stars = {"var_positional": "*", "var_keyword": "**"}
            signature = ", ".join(stars.get(p.get("kind"), "") + p["name"]
                                  + ("=..." if p.get("has_default") else "") for p in self._params)
        returns = _type_text(contract.get("returns"))
        return f"<{self.kind} {self._vis_name}({signature}){' -> ' + returns if returns else ''}>"

    def __call__(self, *args, **kwargs):
        arguments = _bind(self._vis_name, self._params, args, kwargs)
        if self.kind == "builtin":
            result = _call(self._vis_name, arguments)
            if self._vis_name in DRAFT_FUNCTIONS and isinstance(result, dict):
                _enter(result.get("cwd"))
            return result
        coroutine = _acall(*_encode_call(self._vis_name, arguments))
        coroutine.__qualname__ = self._vis_name  # "coroutine 'greet.hello' was never awaited"
        return coroutine


def _enter(path):
    """Follow the session into (or out of) a draft: the rest of the block runs there."""
    global _workspace
    if not isinstance(path, str):
        return
    if not os.path.isdir(path):
        # Fail closed: the rest of this block must not write into the folder it just left.
        raise PermissionError(f"the workspace moved to {path}, which this runtime cannot reach "
                              "(the jail binds only the folder it started in); the next block "
                              "runs there")
    _workspace = path
    os.chdir(path)


class GrepFunction(HostFunction):
    def __call__(self, *args, **kwargs):
        arguments = _bind(self._vis_name, self._params, args, kwargs)
        return Grep(self._vis_name, arguments, _call(self._vis_name, {**arguments, "cursor": 0}))


class Grep:
    """A grep answer that pages itself: print it, ``next(g)``, iterate, ``g.all()``."""

    def __init__(self, fn, arguments, first):
        if not isinstance(first, dict):
            first = {"text": str(first), "next": None}
        self._fn, self._arguments, self._first = fn, arguments, first
        self.text = first.get("text", "")
        self.hits, self.files = first.get("hits"), first.get("files")
        self.names = first.get("names")
        self._cursor, self._advanced = first.get("next"), False

    def _page(self, cursor):
        page = _call(self._fn, {**self._arguments, "cursor": cursor})
        return page if isinstance(page, dict) else {"text": str(page), "next": None}

    def __str__(self):
        if self._first.get("next") is None:
            return self.text
        return self.text + ("" if self.text.endswith("\n") else "\n") + MORE_HITS

    __repr__ = __str__

    def __next__(self):
        """The next page's text (the first page is what printing shows)."""
        if self._cursor is None:
            raise StopIteration
        page = self._page(self._cursor)
        self._cursor, self._advanced = page.get("next"), True
        return page.get("text", "")

    def __iter__(self):
        """Every page from the first, independent of ``next(g)``."""
        yield self.text
        cursor = self._first.get("next")
        while cursor is not None:
            page = self._page(cursor)
            yield page.get("text", "")
            cursor = page.get("next")

    def all(self):
        """Everything ``next(g)`` has not handed out yet, as one text."""
        pages = [] if self._advanced else [self.text]
        while self._cursor is not None:
            pages.append(next(self))
        return "".join(p if p.endswith("\n") or i == len(pages) - 1 else p + "\n"
                       for i, p in enumerate(pages))


def _function(spec):
    name, kind = spec.get("name") or "", spec.get("kind") or "builtin"
    if kind == "unavailable":
        return Unavailable(name, spec.get("doc") or f"{name} is not available")
    contract = spec.get("contract")
    if isinstance(contract, dict) and isinstance(contract.get("parameters"), list):
        params = contract["parameters"]
    elif kind == "builtin" and name in BUILTIN_SIGNATURES:
        signature = BUILTIN_SIGNATURES[name]
        params = [{"name": part.partition("=")[0], "kind": "positional_or_keyword",
                   "required": "=" not in part} for part in signature.split(", ") if part]
        contract = contract or {"name": name, "signature": signature}
    else:
        params = [{"name": "kwargs", "kind": "var_keyword"}]
    cls = SPECIAL_FUNCTIONS.get(name, HostFunction) if kind == "builtin" else HostFunction
    return cls(name, kind, contract if isinstance(contract, dict) else {}, spec.get("doc"), params)


def _install(namespace, name, fn):
    *path, last = name.split(".")
    owner = namespace
    for i, part in enumerate(path):
        node = owner.get(part)
        if not isinstance(node, (Namespace, HostFunction)):
            node = owner[part] = Namespace(".".join(path[:i + 1]))
        owner = vars(node)
    owner[last] = fn


def gather(*aws, return_exceptions=False):
    """``asyncio.gather``: await several host calls at once."""
    import asyncio
    return asyncio.gather(*aws, return_exceptions=return_exceptions)


def _exit(code=None):
    raise SystemExit() if code is None else SystemExit(code)


# -- output capture --------------------------------------------------------------------

class Capture:
    """fd 1 and fd 2 are one pipe; a thread drains it into the block's bounded buffer.

    The end of a block is a unique mark written into the same pipe: once the drain
    thread has seen it, everything the block wrote before it has been counted.
    """

    def __init__(self):
        self.rfd, self.wfd = os.pipe()
        try:
            import fcntl
            fcntl.fcntl(self.wfd, fcntl.F_SETPIPE_SZ, 1 << 20)
        except (ImportError, AttributeError, OSError):
            pass
        self.lock = _thread.allocate_lock()
        self.token, self.serial = os.urandom(6).hex().encode(), 0
        self.begin()
        _thread.start_new_thread(self._drain, ())

    def begin(self):
        with self.lock:
            self.serial += 1
            self.mark = b"\0\x1b[vis-end-%s-%d]\0" % (self.token, self.serial)
            self.head, self.tail, self.total = bytearray(), bytearray(), 0
            self.seen = _thread.allocate_lock()
            self.seen.acquire()

    def end(self):
        """(output text, bytes printed) of the block that is ending."""
        os.write(self.wfd, self.mark)            # shorter than PIPE_BUF: one atomic write
        self.seen.acquire(timeout=30)
        with self.lock:
            head, tail, total = bytes(self.head), bytes(self.tail[-TAIL:]), self.total
        if total <= HEAD + TAIL:
            return (head + tail).decode("utf-8", "replace"), total
        head, tail = _whole_chars(head, at_end=True), _whole_chars(tail, at_end=False)
        text = head.decode("utf-8", "replace")
        note = (f"… [output truncated: {total:,} bytes printed; the first {len(head):,} "
                f"and the last {len(tail):,} are shown]\n")
        return text + ("" if text.endswith("\n") else "\n") + note + tail.decode("utf-8", "replace"), total

    def _drain(self):
        carry = b""
        while True:
            chunk = os.read(self.rfd, 1 << 20)
            data = carry + chunk if carry else chunk
            view = memoryview(data)
            with self.lock:
                mark = self.mark
                at = data.find(mark)
                if at >= 0:                      # what follows the mark belongs to no block
                    self._keep(view[:at])
                    carry = b""
                    self.seen.release()
                    continue
                held = _mark_prefix(data, mark)  # might be the start of a split mark
                self._keep(view[:len(data) - held])
                carry = data[len(data) - held:] if held else b""

    def _keep(self, data):
        if not data:
            return
        self.total += len(data)
        room = HEAD - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if len(data) >= TAIL:
            self.tail[:] = data[-TAIL:]
        elif data:
            self.tail += data
            if len(self.tail) > 4 * TAIL:
                del self.tail[:-TAIL]


def _mark_prefix(data, mark):
    """Length of the longest end of data that is a beginning of mark."""
    if data.find(mark[:1], max(0, len(data) - len(mark) + 1)) < 0:
        return 0
    for size in range(min(len(mark) - 1, len(data)), 0, -1):
        if data.endswith(mark[:size]):
            return size
    return 0


def _whole_chars(data, at_end):
    """Trim a UTF-8 sequence cut in two at the end (or start) of data."""
    if not at_end:
        skip = 0
        while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        return data[skip:]
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return data[:-back] if need > back else data
    return data


# -- running a block -------------------------------------------------------------------

_capture = None
_stdout = _stderr = None
_workspace = None
_loop = None


def _open_stdio():
    global _stdout, _stderr
    os.dup2(_capture.wfd, 1)                     # also heals a block that closed them
    os.dup2(_capture.wfd, 2)
    if _stdout is None or _stdout.closed:
        _stdout = open(1, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)
    if _stderr is None or _stderr.closed:
        _stderr = open(2, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__ = _stdout, _stderr


def _event_loop(asyncio):
    """The runtime's event loop, made current (``asyncio.run`` in a block unsets it)."""
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    asyncio.set_event_loop(_loop)
    return _loop


def _run_coroutine(coroutine):
    import asyncio
    _event_loop(asyncio)
    try:
        _loop.run_until_complete(coroutine)
    finally:                                     # tasks the block left behind die with it
        leftover = [t for t in asyncio.all_tasks(_loop) if not t.done()]
        for task in leftover:
            task.cancel()
        if leftover:
            _loop.run_until_complete(asyncio.wait(leftover, timeout=1))


def _remember_source(source):
    linecache = sys.modules.get("linecache")
    if linecache is not None:
        linecache.cache["<block>"] = (len(source), None, source.splitlines(True), "<block>")


def _format_error(exc, source):
    """The traceback text of exc, keeping only frames of the block's own code."""
    import traceback
    _remember_source(source)
    try:                                         # compact= is 3.10+
        report = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    except TypeError:
        report = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    pending, seen = [report], set()
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        item.stack = traceback.StackSummary.from_list(
            [frame for frame in item.stack if frame.filename == "<block>"])
        pending += [item.__cause__, item.__context__, *(getattr(item, "exceptions", None) or ())]
    return "".join(report.format()).rstrip("\n")


def _run_block(message):
    global _current_run
    _current_run, source = message.get("id"), message.get("code") or ""
    _capture.begin()
    _open_stdio()
    try:
        os.chdir(_workspace)
    except OSError:
        pass
    namespace = _main_namespace()
    _install_functions(namespace, message.get("functions") or ())
    restore_failed = _restore(namespace, message.get("restore") or ())
    _remember_source(source)
    if "asyncio" in sys.modules:
        _event_loop(sys.modules["asyncio"])
    error, tree, before = None, None, _defined_now(namespace)
    try:
        tree = compile(source, "<block>", "exec", PyCF_ONLY_AST, True)
        _show_last(tree)
        code = compile(tree, "<block>", "exec", PyCF_ALLOW_TOP_LEVEL_AWAIT, True)
        result = eval(code, namespace)
        if code.co_flags & CO_COROUTINE:
            _run_coroutine(result)
    except BaseException as exc:                 # SystemExit too: it ends the block only
        error = _format_error(exc, source)
    defs = _track_defs(namespace, tree, source, before)
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, _stdout, _stderr)}.values():
        try:
            stream.flush()
        except Exception:
            pass
    output, printed = _capture.end()
    done = {"t": "done", "id": _current_run, "output": output, "output_bytes": printed,
            "error": error}
    if defs is not None:
        done["defs"] = defs
    if restore_failed:
        done["restore_failed"] = restore_failed
    _send(done)


def _diagnose(text):
    try:
        os.write(_diagnostic_fd, f"vis sandbox runtime: {text}\n".encode("utf-8", "replace"))
    except (OSError, TypeError):
        pass


_diagnostic_fd = None


def _next_run(preload):
    """The next run message; imports the slow modules while nothing is waiting."""
    while preload:
        try:
            return _inbox.get(timeout=0.05)
        except Empty:
            try:
                __import__(preload.pop(0))
            except Exception:
                pass
    return _inbox.get()


def main():
    global CONTROL_FD, _capture, _workspace, _diagnostic_fd
    for fd in (0, 1, 2):                         # a closed standard fd would steal a pipe end
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)
    CONTROL_FD = int(sys.argv[-1])
    if CONTROL_FD <= 2:                          # handed over as stdin/stdout: move it aside
        CONTROL_FD = os.dup(CONTROL_FD)
    os.set_inheritable(CONTROL_FD, False)        # children (shell, os.system) never see it
    os.set_blocking(CONTROL_FD, True)            # a socket made by an async runtime may not be
    _diagnostic_fd = os.dup(2)                   # where the gateway reads our own complaints
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)                             # stdin: input() sees end of file
    os.close(null)
    sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", closefd=False)
    _workspace = os.getcwd()
    _capture = Capture()
    _open_stdio()
    builtins.exit = builtins.quit = _exit        # -S leaves them out
    _thread.start_new_thread(_channel_reader, ())
    version = "%d.%d.%d" % sys.version_info[:3]
    _send({"t": "ready", "pid": os.getpid(), "python": version})
    preload = ["traceback", "asyncio"]
    while True:
        message = _next_run(preload)
        try:
            _run_block(message)
        except BaseException as exc:             # a fault of the runtime, not of the block
            _diagnose(f"block {message.get('id')!r} failed inside the runtime: {exc!r}")
            _send({"t": "done", "id": message.get("id"), "output": "", "output_bytes": 0,
                   "error": f"sandbox runtime error: {type(exc).__name__}: {exc}"})


