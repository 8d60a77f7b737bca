
# ---------------------------------------------------------------------------------------
# The second half of the runtime (appended to runtime.py before it is handed to python3):
# the namespace that lives from block to block, the model's definitions, background jobs,
# and the functions whose answers are objects (shell jobs, apropos hits, doc).
# ---------------------------------------------------------------------------------------

from _ast import AsyncFunctionDef, Call, ClassDef, Expr, FunctionDef, Load, Name

_module = None                # the __main__ module, kept for the process's life
_namespace = None             # its dict
_ours = {}                    # top-level name -> what the runtime installed there
_defs = {}                    # name -> source of the model's top-level def/class, in order
_defs_sent = []               # the list last reported to the gateway


def _main_namespace():
    global _module, _namespace
    if _module is None:
        _module = type(sys)("__main__")
        _namespace = _module.__dict__
        _namespace["__builtins__"] = builtins
    sys.modules["__main__"] = _module
    return _namespace


def _install_functions(namespace, specs):
    """(Re)installs the turn's functions; a name the model rebound to its own value keeps it."""
    global _ours
    fresh = {"gather": gather, "ToolError": ToolError, "defs": defs}
    namespace["__vis_show__"] = _show
    for spec in specs:
        if spec.get("name"):
            _install(fresh, spec["name"], _function(spec))
    for name, obj in fresh.items():
        current = namespace.get(name, _ours)
        if current is _ours or current is _ours.get(name) or isinstance(current, (HostFunction, Namespace)):
            namespace[name] = obj
    for name, obj in _ours.items():                # no longer offered (an MCP server left)
        if name not in fresh and namespace.get(name) is obj:
            del namespace[name]
    _ours = fresh


def _restore(namespace, entries):
    """Runs the model's def/class statements of an earlier process; the failures."""
    failed = []
    for entry in entries:
        name, source = entry.get("name") or "?", entry.get("source") or ""
        try:
            exec(compile(source, "<restored>", "exec"), namespace)
            _defs[name] = source
        except BaseException as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    _defs_sent[:] = [{"name": n, "source": s} for n, s in _defs.items()]
    return failed


def _is_definition(obj):
    """A function or class, decorated or not (data is not restored)."""
    return callable(obj) or isinstance(obj, (staticmethod, classmethod, property))


def _defined_now(namespace):
    return {name: id(namespace.get(name)) for name in _defs}


def _track_defs(namespace, tree, source, before):
    """Updates the model's definitions after a block; the new list when it changed."""
    lines = source.splitlines(True)
    for node in getattr(tree, "body", ()) or ():
        if not isinstance(node, (FunctionDef, AsyncFunctionDef, ClassDef)):
            continue
        obj = namespace.get(node.name)
        if not _is_definition(obj) or before.get(node.name) == id(obj) and node.name in _defs:
            continue                               # not reached, or rebound to data
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        end = getattr(node, "end_lineno", None) or node.lineno
        _defs.pop(node.name, None)                 # a redefinition moves to the end
        _defs[node.name] = "".join(lines[first - 1:end])
    for name in list(_defs):
        if not _is_definition(namespace.get(name)):
            del _defs[name]                        # deleted, or rebound to data
    now = [{"name": n, "source": s} for n, s in _defs.items()]
    if now == _defs_sent:
        return None
    _defs_sent[:] = now
    return now


def _show(value):
    """What a block's last expression is worth, printed as a REPL would (None: nothing)."""
    if value is not None:
        print(repr(value))


def _show_last(tree):
    """Makes the block's last statement, when it is an expression, print its value."""
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, Expr):
        return
    call = Call(func=Name(id="__vis_show__", ctx=Load()), args=[last.value], keywords=[])
    for node in (call, call.func):
        for field in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
            setattr(node, field, getattr(last.value, field, None))
    last.value = call


def _signature(obj):
    import inspect
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(…)"


def _first_line(text):
    return (text or "").strip().split("\n", 1)[0].strip()


class Text(str):
    """Text that shows itself whole, also as the value of an expression."""

    def __repr__(self):
        return str(self)


def defs():
    """What this session's blocks defined: functions and classes with their signatures,
    other names with their types."""
    namespace = _main_namespace()
    rows = []
    for name, value in namespace.items():
        if name.startswith("_") or name in _ours or type(value).__name__ == "module":
            continue
        if isinstance(value, type):
            rows.append(f"class {name}{_signature(value)}")
        elif callable(value) and hasattr(value, "__code__"):
            kind = "async def" if value.__code__.co_flags & CO_COROUTINE else "def"
            doc = _first_line(value.__doc__)
            rows.append(f"{kind} {name}{_signature(value)}" + (f"  # {doc}" if doc else ""))
        else:
            size = ""
            if isinstance(value, (list, tuple, dict, set, frozenset, str, bytes)):
                size = f" ({len(value):,} {'chars' if isinstance(value, str) else 'items'})"
            rows.append(f"{name}: {type(value).__name__}{size}")
    modules = sorted(n for n, v in namespace.items()
                     if type(v).__name__ == "module" and not n.startswith("_"))
    if modules:
        rows.append("imported: " + ", ".join(modules))
    return Text("\n".join(rows) if rows else "(nothing defined yet)")


# -- shell and background jobs ------------------------------------------------------------

class Logs(Text):
    """A window of a job's log; ``.end`` is the offset to pass as ``since`` next time."""
    end = 0


class Job:
    """A background job started by ``shell(cmd, background=True)``: it runs on across blocks
    and turns until it ends, ``.stop()`` is called, or the session is deleted."""

    def __init__(self, info):
        self._info = info
        self.id, self.cmd = info.get("id"), info.get("cmd")

    def _op(self, op, **args):
        reply = _call("job", {"op": op, "id": self.id,
                              **{k: v for k, v in args.items() if v is not None}})
        return reply

    def _refresh(self):
        self._info = self._op("status")
        return self._info

    @property
    def alive(self):
        return bool(self._refresh().get("alive"))

    @property
    def exit_code(self):
        return self._refresh().get("exit_code")

    @property
    def pid(self):
        return self._info.get("pid")

    @property
    def log(self):
        """The log file (stdout and stderr as they came): cat() or grep() it."""
        return self._info.get("log")

    def wait(self, timeout=None):
        """Waits until the job ends or ``timeout`` seconds pass (extending the block);
        the exit code, or None while it runs."""
        self._info = self._op("wait", timeout=timeout)
        return self._info.get("exit_code")

    def logs(self, tail=None, since=None):
        """The last ``tail`` lines (default 100), or the output after byte ``since``
        (``.end`` of an earlier answer); at most 64 KiB."""
        reply = self._op("logs", tail=tail, since=since)
        text = Logs(reply.get("text", ""))
        text.end = reply.get("end", 0)
        return text

    def stop(self):
        """Stops the job and everything it started (SIGTERM, then SIGKILL after 2 s)."""
        self._info = self._op("stop")
        return self._info.get("state")

    def __repr__(self):
        i = self._info
        state = i.get("state")
        if state == "exited":
            state = f"exited {i.get('exit_code')}"
        return (f"<job {self.id} {state} pid={i.get('pid')} {i.get('seconds', 0):.1f}s "
                f"log={i.get('log')}: {self.cmd}>")


class JobList(list):
    def __repr__(self):
        return "\n".join(repr(j) for j in self) if self else "(no jobs)"

    __str__ = __repr__


class ShellFunction(HostFunction):
    def __call__(self, *args, **kwargs):
        arguments = _bind(self._vis_name, self._params, args, kwargs)
        result = _call(self._vis_name, arguments)
        return Job(result) if isinstance(result, dict) else Text(result)


class JobsFunction(HostFunction):
    def __call__(self):
        return JobList(Job(info) for info in _call(self._vis_name, {}) or ())


# -- apropos and doc ----------------------------------------------------------------------

class Hit:
    """One thing ``apropos`` found; pass it to ``doc``."""
    __slots__ = ("name", "kind", "summary")

    def __init__(self, name, kind, summary):
        self.name, self.kind, self.summary = name, kind, summary

    def __repr__(self):
        return f"{self.name} — {self.summary}" if self.summary else self.name


class Hits(list):
    """``apropos`` answers: one line each; with no query, grouped by namespace. It also
    answers the text methods (``.splitlines()``, ``in``) as the text it prints."""
    grouped = False

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(str(self), name)

    def __contains__(self, item):
        if isinstance(item, str):
            return item in str(self)
        return list.__contains__(self, item)

    def __format__(self, spec):
        return format(str(self), spec)

    def __repr__(self):
        if not self:
            return "(nothing matches)"
        if not self.grouped:
            return "\n".join(map(repr, self))
        groups = {}
        for hit in self:
            groups.setdefault(_namespace_of(hit), []).append(hit)
        return "\n".join(f"{group}:\n" + "\n".join(f"  {h!r}" for h in hits)
                         for group, hits in groups.items())

    __str__ = __repr__


def _namespace_of(hit):
    if hit.kind == "python":
        return "python built-ins"
    if hit.kind == "extension":
        return "extensions"
    head, dot, _ = hit.name.partition(".")
    return head if dot else "sandbox built-ins"


def _python_hits(words):
    """Python's own built-ins whose name or help mentions every word."""
    hits = []
    for name in dir(builtins):
        if name.startswith("_"):
            continue
        obj = getattr(builtins, name)
        summary = _first_line(getattr(obj, "__doc__", ""))
        hay = f"{name} {summary}".lower()
        if all(w in hay for w in words):
            hits.append(Hit(name, "python", summary))
    return hits


class AproposFunction(HostFunction):
    def __call__(self, text=None):
        found = _call(self._vis_name, {"text": text})
        hits = Hits(Hit(h.get("name"), h.get("kind"), h.get("summary")) for h in found or ())
        words = [w.lower() for w in str(text or "").split()]
        if words:
            mine = [Hit(n, "defined", _first_line(getattr(_main_namespace().get(n), "__doc__", "")))
                    for n in _defs if all(w in n.lower() for w in words)]
            hits.extend(mine + _python_hits(words)[:10])
        else:
            hits.grouped = True
        return hits


def _local_doc(obj, name):
    source = _defs.get(name)
    if source is not None:
        return Text(source.rstrip("\n"))
    import inspect
    doc = inspect.getdoc(obj) or "(no documentation)"
    return Text(f"{name}{_signature(obj) if callable(obj) else ''}\n\n{doc}")


class DocFunction(HostFunction):
    def __call__(self, name=None):
        if isinstance(name, Hit):
            name = name.name
        elif isinstance(name, (HostFunction, Namespace)):
            name = name._vis_name
        elif name is not None and not isinstance(name, str):
            return _local_doc(name, getattr(name, "__name__", type(name).__name__))
        try:
            return Text(_call(self._vis_name, {"name": name}))
        except LookupError:
            namespace = _main_namespace()
            if name in namespace and name not in _ours:
                return _local_doc(namespace[name], name)
            if hasattr(builtins, name):
                return _local_doc(getattr(builtins, name), name)
            raise


SPECIAL_FUNCTIONS = {"grep": GrepFunction, "shell": ShellFunction, "jobs": JobsFunction,
                     "apropos": AproposFunction, "doc": DocFunction}


if __name__ == "__main__":
    main()
