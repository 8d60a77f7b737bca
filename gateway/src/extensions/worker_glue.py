"""Worker glue: runs inside a `vis-gateway worker` process (embedded CPython).

The Rust side calls ``install(door)`` once, then ``handle(op, payload_json) -> str``
for every gateway request.  ``door(op, payload_json) -> str`` is the native function
that sends a host-door call to the gateway and blocks for its answer.
"""

import __future__
import base64
import builtins
import contextvars
import itertools
import json
import os
import sys
import traceback
import types

from blockether.vis.extension import _environ, _host, _legacy, _loader, _provider, _registry, _runtime

_door = None
# Frames of the SDK and of this glue are left out of tracebacks shown to users.
_SDK_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(_host.__file__))))
EXTS = {}  # canonical file -> (extension, module name)
_ERROR_TYPES = {
    "PermissionError": PermissionError,
    "FileNotFoundError": FileNotFoundError,
    "FileExistsError": FileExistsError,
    "IsADirectoryError": IsADirectoryError,
    "NotADirectoryError": NotADirectoryError,
    "OSError": OSError,
    "ValueError": ValueError,
    "TypeError": TypeError,
    "KeyError": KeyError,
    "LookupError": LookupError,
    "TimeoutError": TimeoutError,
    "NotImplementedError": NotImplementedError,
}


def _enc(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"__vis_bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if callable(value):
        return {"__vis_callback__": getattr(value, "__name__", "callable")}
    raise TypeError(f"a value of type {type(value).__name__} cannot cross to the gateway")


def _dec(obj):
    if len(obj) == 1 and "__vis_bytes__" in obj:
        return base64.b64decode(obj["__vis_bytes__"])
    return obj


# Callables that crossed in a pending door call (``vis.ask``'s ``run_validator``), by id;
# the gateway calls them back with the ``callback`` request while the door is pending.
_CALLBACKS = {}
_CALLBACK_IDS = itertools.count(1)


class _Bridge:
    """The object the SDK calls for every host door (``_host.set_bridge``)."""

    def call(self, op, payload):
        ids = []

        def enc(value):
            if callable(value) and not isinstance(value, type):
                cid = f"cb{next(_CALLBACK_IDS)}"
                _CALLBACKS[cid] = value
                ids.append(cid)
                return {"__vis_callback__": getattr(value, "__name__", "callable"), "id": cid}
            return _enc(value)

        try:
            answer = json.loads(_door(op, json.dumps(payload, default=enc)), object_hook=_dec)
        finally:
            for cid in ids:
                _CALLBACKS.pop(cid, None)
        if answer.get("ok"):
            return answer.get("value")
        cls = _ERROR_TYPES.get(answer.get("error_type") or "", RuntimeError)
        raise cls(answer.get("error") or f"vis host operation '{op}' failed")


def install(door):
    global _door
    _door = door
    _host.set_bridge(_Bridge())
    # One os.environ view per extension (the names its registration resolved), and a
    # porting hint for files written against the older `import vis` API.
    _environ.install()
    _legacy.install_finder()
    # The embedded interpreter's own executable, not the gateway binary.
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    candidate = os.path.join(sys.base_prefix, "bin", version)
    if os.path.exists(candidate):
        sys.executable = candidate


# -- errors ------------------------------------------------------------------------

def _error(exc):
    """``{type, message, traceback}``. The traceback holds the extension's own frames (the
    SDK's and this glue's are left out) and never repeats the message line: readers show
    the message, then the traceback."""
    if isinstance(exc, SystemExit):
        message = f"SystemExit: extension code called sys.exit({exc.code!r})"
    else:
        message = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in frames
              if f.filename != __file__ and not f.filename.startswith(_SDK_ROOT + os.sep)]
    text = "Traceback (most recent call last):\n" if frames else ""
    text += "".join(traceback.format_list(frames))
    tail = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n").split("\n")
    if tail and tail[-1].strip() == message.strip():
        tail.pop()
    if tail:
        text += "\n".join(tail) + "\n"
    return {"type": type(exc).__name__, "message": message, "traceback": text}


def _dumps(value):
    """JSON text of an answer; a NaN or an infinity is named instead of sent (JSON has none
    and the gateway would only see a parse error)."""
    try:
        return json.dumps(value, default=_enc, allow_nan=False)
    except ValueError:
        found = _runtime.find_not_finite(value.get("value") if isinstance(value, dict) else value)
        if found is None:
            raise
        raise found from None


def handle(op, payload_json):
    try:
        payload = json.loads(payload_json, object_hook=_dec) if payload_json else {}
        fn = OPS.get(op)
        if fn is None:
            raise LookupError(f"unknown worker op {op!r}")
        value = fn(payload)
        return _dumps({"ok": True, "value": value})
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included
        restart = isinstance(exc, (SystemExit, KeyboardInterrupt))
        return json.dumps({"ok": False, "restart": restart, "error": _error(exc)})


# -- loading -------------------------------------------------------------------------

def _purge(import_root):
    """Forget modules imported from OTHER frozen copies, so this load imports its own."""
    base = os.path.dirname(import_root) + os.sep
    keep = import_root + os.sep
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if isinstance(origin, str) and origin.startswith(base) and not origin.startswith(keep):
            sys.modules.pop(name, None)


def _load(file, source, import_root=None):
    """``_loader.load_file`` executing ``source`` (the admitted bytes) instead of re-reading
    the file, with the frozen copy of its import root first on ``sys.path``, so that every
    worker runs the version the registration admitted."""
    name = f"vis_ext_{next(_loader._SEQ)}_{_loader._label(file)}"
    module = types.ModuleType(name)
    module.__file__ = file
    module.__cached__ = None
    folder = import_root or (file.rsplit("/", 1)[0] if "/" in file else ".")
    if import_root:
        _purge(import_root)
        if folder in sys.path:
            sys.path.remove(folder)
    _registry.forget(file)

    def run():
        _registry._CURRENT_FILE.set(file)
        _host.set_owner(None)
        code = compile(source, file, "exec", flags=__future__.annotations.compiler_flag,
                       dont_inherit=True)
        sys.modules[name] = module
        if folder not in sys.path:
            sys.path.insert(0, folder)
        exec(code, module.__dict__)

    try:
        contextvars.copy_context().run(run)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        _registry.forget(file)
        if isinstance(exc, ModuleNotFoundError) and exc.name == "vis":
            text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
            message = _legacy.import_message(text)
            return None, name, {"file": file, "type": "LegacyExtensionAPI", "message": message,
                                "traceback": ""}
        return None, name, dict(_error(exc), file=file)
    extension = _registry.registered(file)
    if extension is None:
        sys.modules.pop(name, None)
        message = f"{file} never called vis.register(vis.Extension(...))"
        return None, name, {"file": file, "type": "NoRegistration", "message": message,
                            "traceback": ""}
    return extension, name, None


def op_load(p):
    file = p["file"]
    source = p.get("source")
    if source is None:
        with builtins.open(file, "rb") as handle:
            source = handle.read()
    else:
        source = base64.b64decode(source)
    extension, name, error = _load(file, source, p.get("import_root"))
    if error is None:
        try:
            _check_dialects(extension)
            catalog = _loader.catalog(extension)
            json.dumps(catalog, default=_enc)
        except Exception as exc:
            sys.modules.pop(name, None)
            _registry.forget(file)
            error = dict(_error(exc), file=file)
    if error is not None:
        return {"loaded": False, "error": error}
    previous = EXTS.get(file)
    EXTS[file] = (extension, name)
    if previous is not None and previous[1] != name:
        sys.modules.pop(previous[1], None)
    return {"loaded": True, "catalog": catalog}


def _check_dialects(extension):
    """A provider whose preset names a wire dialect this gateway cannot drive is refused at
    load (never driven as another dialect)."""
    for provider in extension.providers:
        preset = provider.preset
        style = preset.api_style if preset is not None else None
        problem = _provider.gateway_dialect_error(f"vis.Provider {provider.id!r} preset", style)
        if problem is not None:
            raise ValueError(problem)


def op_unload(p):
    previous = EXTS.pop(p["file"], None)
    if previous is not None:
        sys.modules.pop(previous[1], None)
        forget = getattr(os.environ, "forget", None)
        if callable(forget):
            forget(p["file"])
    return previous is not None


def _ext(file):
    entry = EXTS.get(file)
    if entry is None:
        raise LookupError(f"no extension is loaded from {file} in this worker")
    return entry[0]


# -- calls ---------------------------------------------------------------------------

def op_call_tool(p):
    ext = _ext(p["file"])
    with _host.acting_for(ext.name, p["file"]):
        value = _runtime.call_tool(ext, p["name"], p.get("arguments") or {})
        portable = _runtime.to_portable(value)
    text = portable if isinstance(portable, str) else json.dumps(portable, default=_enc)
    return {"value": portable, "text": text}


def op_run_slash(p):
    ext = _ext(p["file"])
    for command in ext.slash_commands:
        if command.name == p["name"]:
            with _host.acting_for(ext.name, p["file"]):
                return _runtime.slash_result(command.run(p.get("ctx") or {}), ext.name)
    raise LookupError(f"extension '{ext.name}' has no slash command {p['name']!r}")


def _verdict(value):
    if _runtime.is_block(value):
        return {"blocked": True, "reason": str(value.get("reason", ""))}
    return {"blocked": False}


def op_run_hook(p):
    ext = _ext(p["file"])
    hook = ext.op_hooks[int(p["index"])]
    with _host.acting_for(ext.name, p["file"]):
        return _verdict(hook.fn(p.get("call")))


def lane_filter(file, index, ctx):
    """One network filter call from the filter lane (a thread of its own; the ctx dict is
    built by the Rust side), the only way a network filter runs. Answers ``None`` (allow),
    the reason text of a ``vis.block(reason)``, or ``(error, restart)`` for a raise."""
    token = env_token = None
    try:
        ext = _ext(file)
        flt = ext.network_filters[index]
        token = _host._OWNER.set(ext.name)
        env_token = _host._ENV_KEY.set(file)
        value = flt.fn(ctx)
        return str(value.get("reason", "")) if _runtime.is_block(value) else None
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included
        return (_error(exc), isinstance(exc, (SystemExit, KeyboardInterrupt)))
    finally:
        if env_token is not None:
            _host._ENV_KEY.reset(env_token)
        if token is not None:
            _host._OWNER.reset(token)


def _wire(value):
    if hasattr(value, "to_wire"):
        return value.to_wire()
    if isinstance(value, (list, tuple)):
        return [_wire(v) for v in value]
    return _runtime.to_portable(value)


def _printer(token):
    """``auth_fn``'s ``printer``: each line goes to the gateway as it is printed."""
    def printer(line=""):
        _host.call("provider_auth_print", {"printer": token, "line": str(line)})
    return printer


def op_provider(p):
    ext = _ext(p["file"])
    args = p.get("args") or []
    if p["slot"] == "auth_fn" and p.get("printer"):
        args = [_printer(p["printer"])]
    for provider in ext.providers:
        if provider.id == p["id"]:
            with _host.acting_for(ext.name, p["file"]):
                return _wire(provider.call_slot(p["slot"], *args))
    raise LookupError(f"extension '{ext.name}' has no provider {p['id']!r}")


def op_turn(p):
    """Per-turn callables: ``prompt``, ``activation`` or ``ctx`` with the env dict."""
    ext = _ext(p["file"])
    which = p["which"]
    env = p.get("env") or {}
    with _host.acting_for(ext.name, p["file"]):
        if which == "prompt":
            prompt = ext.prompt
            value = prompt(env) if callable(prompt) else prompt
            return value if isinstance(value, str) else None
        if which == "activation":
            return True if ext.activation is None else bool(ext.activation(env))
        if which == "ctx":
            value = ext.ctx(env) if ext.ctx is not None else {}
            return _runtime.to_portable(value) if isinstance(value, dict) else {}
    raise LookupError(f"unknown per-turn callable {which!r}")


def op_callback(p):
    """Calls a callable of a pending door call (``{"id", "args"}``)."""
    fn = _CALLBACKS.get(p.get("id"))
    if fn is None:
        raise LookupError("the door call that passed this callable has ended")
    return _runtime.to_portable(fn(*(p.get("args") or [])))


def op_ping(p):
    return {"pid": os.getpid(), "python": sys.version.split()[0],
            "executable": sys.executable, "loaded": sorted(EXTS)}


OPS = {
    "load": op_load,
    "unload": op_unload,
    "call_tool": op_call_tool,
    "run_slash": op_run_slash,
    "run_hook": op_run_hook,
    "provider": op_provider,
    "turn": op_turn,
    "ping": op_ping,
    "callback": op_callback,
}
