import os
import sys
import textwrap

import pytest

from blockether.vis.extension import _host, _loader, _registry


@pytest.fixture(autouse=True)
def clean_sdk_state():
    """Each test starts without a bridge, registrations, owner or extra modules."""
    modules = set(sys.modules)
    path = list(sys.path)
    environ = dict(os.environ)
    _host.set_bridge(None)
    _registry.reset()
    token = _host._OWNER.set(None)
    yield
    _host.set_bridge(None)
    _registry.reset()
    _host._OWNER.reset(token)
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path
    os.environ.clear()
    os.environ.update(environ)


@pytest.fixture
def bridge():
    recording = _host.RecordingBridge()
    _host.set_bridge(recording)
    return recording


@pytest.fixture
def write(tmp_path):
    """write(name, source) -> path of a dedented file under tmp_path."""

    def _write(name, source):
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(source))
        return target

    return _write


@pytest.fixture
def load(write):
    """load(source, name="entry.py") -> the registered Extension (fails the test otherwise)."""

    def _load(source, name="entry.py"):
        result = _loader.load_file(write(name, source))
        assert result.ok, result.error and result.error.traceback
        return result.extension

    return _load


_MODULE_SEQ = iter(range(1, 1_000_000))


@pytest.fixture
def module():
    """module(source, future=True) -> a fresh module executed like an entry file."""
    import __future__
    import types

    def _module(source, future=True):
        name = f"vis_sdk_test_module_{next(_MODULE_SEQ)}"
        mod = types.ModuleType(name)
        sys.modules[name] = mod
        flags = __future__.annotations.compiler_flag if future else 0
        code = compile(textwrap.dedent(source), f"<{name}>", "exec", flags=flags,
                       dont_inherit=True)
        exec(code, mod.__dict__)
        return mod

    return _module
