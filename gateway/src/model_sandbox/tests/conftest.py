"""A fake gateway for the sandbox runtime: it starts runtime.py the way the gateway
does and speaks the control protocol over a socketpair."""

import itertools
import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

PYTHON = "/usr/bin/python3"
PYTHON = os.environ.get("VIS_TEST_PYTHON", PYTHON)   # another interpreter (3.9 … 3.13)
RUNTIME = Path(__file__).resolve().parent.parent / "runtime.py"
RUNTIME_SESSION = RUNTIME.with_name("runtime_session.py")
_started = []


class FakeHost:
    def __init__(self, cwd, nonblocking=False, on_stdio=False):
        """on_stdio: hand the socket over as stdin and stdout and name fd 0."""
        self.source = (RUNTIME.read_text(encoding="utf-8")
                       + RUNTIME_SESSION.read_text(encoding="utf-8"))
        ours, theirs = socket.socketpair()
        theirs.setblocking(not nonblocking)         # as a tokio-made socket would arrive
        self.control_fd = 0 if on_stdio else theirs.fileno()
        stdio = {"stdin": theirs, "stdout": theirs} if on_stdio else {"stdin": subprocess.DEVNULL}
        self.proc = subprocess.Popen(
            [PYTHON, "-I", "-S", "-c", self.source, str(self.control_fd)],
            pass_fds=() if on_stdio else (theirs.fileno(),), cwd=cwd,
            start_new_session=True, **stdio)        # its own process group, killed at the end
        _started.append(self.proc)
        theirs.close()
        ours.settimeout(30)
        self.sock, self.reader = ours, ours.makefile("rb")
        self.run_ids = itertools.count(1)
        self.ready = self.recv()

    def send(self, message):
        self.sock.sendall((json.dumps(message) + "\n").encode("utf-8"))

    def recv(self):
        line = self.reader.readline()
        assert line, "the runtime closed the control channel"
        return json.loads(line)

    def start(self, code, functions=(), restore=()):
        run_id = next(self.run_ids)
        message = {"t": "run", "id": run_id, "code": code, "functions": list(functions)}
        if restore:
            message["restore"] = list(restore)
        self.send(message)
        return run_id

    def reply(self, call, ok=None, error=None):
        if error is not None:
            self.send({"t": "reply", "id": call["id"], "error": error})
        else:
            self.send({"t": "reply", "id": call["id"], "ok": ok})

    def run(self, code, functions=(), answer=None, restore=()):
        """Run a block; answer(call) -> ("ok", value) or ("error", type, message).

        Returns (done message, list of calls seen)."""
        run_id = self.start(code, functions, restore)
        calls = []
        while True:
            message = self.recv()
            if message["t"] == "done":
                assert message["id"] == run_id
                return message, calls
            assert message["t"] == "call", message
            assert message["run"] == run_id
            calls.append(message)
            assert answer is not None, f"unexpected host call {message}"
            outcome = answer(message)
            if outcome[0] == "ok":
                self.reply(message, ok=outcome[1])
            else:
                self.reply(message, error={"type": outcome[1], "message": outcome[2]})

    def close(self):
        if self.sock.fileno() < 0:
            return _kill(self.proc)
        self.reader.close()
        self.sock.close()                       # the runtime exits when its channel closes
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        _kill(self.proc)


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)     # the runtime and anything a block started
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


@pytest.fixture
def make_host(tmp_path):
    """Start runtimes on demand; all are shut down after the test."""
    made = []

    def make(**options):
        made.append(FakeHost(tmp_path, **options))
        return made[-1]
    yield make
    for fake in made:
        fake.close()


@pytest.fixture
def host(make_host):
    return make_host()


def pytest_sessionfinish(session, exitstatus):
    for proc in _started:
        _kill(proc)
