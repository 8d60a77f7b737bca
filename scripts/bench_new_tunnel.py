#!/usr/bin/env python3
"""The gateway's cost of a new opaque CONNECT tunnel, two gateway binaries side by side.

Each binary runs as a real `vis-gateway start` with a project whose policy lets 127.0.0.1
through opaquely; its session token comes from POST /v1/sandbox/env, so every tunnel is
attributed, decided, published and stored. One client opens tunnels one after another to a
loopback echo server (TCP connect, CONNECT with the token, 4 bytes each way, close), in
batches that alternate between the binaries. Reported per binary: the median and p90 time
of a tunnel (beside the same exchange straight to the echo server), and the gateway process's CPU (user + system, from /proc) per tunnel, which
includes the work after the close (the decision's record, event and store write).

    python3 scripts/bench_new_tunnel.py <before vis-gateway> <after vis-gateway> [rounds] [tunnels]

With BENCH_WHAT=request it measures instead one client sending plain HTTP requests one at a
time over one kept-alive connection through each gateway's proxy (absolute-form GET to a
loopback origin answering `ok`): time per request beside the same requests sent straight to
the origin, and the gateway's CPU per request.

Everything listens on 127.0.0.1; the work folder under target/ is removed at exit.
"""
import base64
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

HEADERS = {"X-Vis-Protocol": "2", "Content-Type": "application/json"}
TICK = os.sysconf("SC_CLK_TCK")


def loopback_server(serve):
    """Listens on a free loopback port, runs `serve(connection)` on a thread per connection;
    answers the port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(512)

    def accept():
        while True:
            c, _ = srv.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv.getsockname()[1]


def echo(c):
    with c:
        while True:
            b = c.recv(64)
            if not b:
                return
            c.sendall(b)


ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def answer_ok(c):
    """A keep-alive HTTP origin's connection: every request is answered `ok`."""
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    with c:
        while True:
            while b"\r\n\r\n" not in buf:
                b = c.recv(65536)
                if not b:
                    return
                buf += b
            buf = buf.split(b"\r\n\r\n", 1)[1]
            c.sendall(ANSWER)


def read_until(s, done, what):
    """Reads from `s` until `done(what was read)`; fails when the peer closes first."""
    got = b""
    while not done(got):
        b = s.recv(4096)
        if not b:
            raise RuntimeError(f"{what}: connection closed: {got!r}")
        got += b
    return got


def exchange(s, request):
    """Sends one request on `s` and reads the whole `ok` answer; the time it took."""
    t = time.perf_counter()
    s.sendall(request)
    got = read_until(s, lambda g: g.endswith(b"ok") and b"\r\n\r\n" in g, "origin")
    if not got.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"{got!r}")
    return time.perf_counter() - t


def keep_alive(addr):
    s = socket.create_connection(addr)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class Gw:
    def __init__(self, name, binary, work):
        self.name = name
        home = os.path.join(work, name)
        proj = os.path.join(work, "proj")
        self.log = open(os.path.join(work, name + ".log"), "w")
        self.p = subprocess.Popen(
            [binary, "--home", home, "start", "--port", "0", "--root", proj],
            cwd=proj, stdout=self.log, stderr=subprocess.STDOUT)
        info = os.path.join(home, "gateway.json")
        for _ in range(400):
            if os.path.exists(info) and os.path.getsize(info) > 0:
                break
            time.sleep(0.05)
        url = json.load(open(info))["url"]
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        req = urllib.request.Request(url + "/v1/sandbox/env", method="POST", headers=HEADERS,
                                     data=json.dumps({"root": proj}).encode())
        env = json.load(urllib.request.urlopen(req, timeout=10))["env"]
        proxy = urllib.parse.urlsplit(env["HTTP_PROXY"])
        self.proxy = (proxy.hostname, proxy.port)
        auth = base64.b64encode(f"{proxy.username}:{proxy.password or ''}".encode()).decode()
        self.auth = auth

    def cpu(self):
        f = open(f"/proc/{self.p.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK

    def tunnel(self, port):
        t = time.perf_counter()
        s = socket.create_connection(self.proxy)
        s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                  f"Proxy-Authorization: Basic {self.auth}\r\n\r\n".encode())
        head = read_until(s, lambda g: b"\r\n\r\n" in g, self.name)
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{self.name}: {head!r}")
        s.sendall(b"ping")
        got = b""
        while len(got) < 4:
            got += s.recv(4)
        s.close()
        return time.perf_counter() - t

    def requests(self, port, n):
        """`n` requests one at a time on this gateway's kept-alive proxy connection."""
        if not hasattr(self, "keep"):
            self.keep = keep_alive(self.proxy)
        req = (f"GET http://127.0.0.1:{port}/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               f"Proxy-Authorization: Basic {self.auth}\r\n\r\n").encode()
        return [exchange(self.keep, req) for _ in range(n)]

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.log.close()


def direct(port):
    t = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"ping")
    got = b""
    while len(got) < 4:
        got += s.recv(4)
    s.close()
    return time.perf_counter() - t


def direct_requests(s, port, n):
    req = f"GET /x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    return [exchange(s, req) for _ in range(n)]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    per_request = os.environ.get("BENCH_WHAT") == "request"
    unit = "request" if per_request else "tunnel"
    before, after = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 300
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target")
    os.makedirs(root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-new-tunnel.", dir=root)
    gws = []
    try:
        os.makedirs(os.path.join(work, "proj"))
        with open(os.path.join(work, "proj", "vis.yml"), "w") as f:
            f.write('jail: {network: {allowed_domains: ["127.0.0.1"], allow_private: true}}\n')
        port = loopback_server(answer_ok if per_request else echo)
        gws = [Gw("before", before, work), Gw("after", after, work)]
        plain = keep_alive(("127.0.0.1", port)) if per_request else None

        def measure(g):
            return g.requests(port, n) if per_request else [g.tunnel(port) for _ in range(n)]

        def measure_direct():
            if per_request:
                return direct_requests(plain, port, n)
            return [direct(port) for _ in range(n)]

        for g in gws:  # warm-up
            for _ in range(50 if not per_request else 2):
                measure(g)
        time.sleep(1.5)
        lat = {g.name: [] for g in gws}
        cpu = {g.name: [] for g in gws}
        floor = []
        for r in range(rounds):
            floor += measure_direct()
            for g in (gws if r % 2 == 0 else gws[::-1]):
                c0 = g.cpu()
                lat[g.name] += measure(g)
                time.sleep(1.5)  # the last records are stored and published
                cpu[g.name].append((g.cpu() - c0) / n)
        d = statistics.median(floor)
        print(f"| build | {unit} p50 (added over direct) | {unit} p90 | gateway CPU per {unit} (median of {rounds} rounds; each) |")
        print("|---|---|---|---|")
        print(f"| direct, no proxy | {d * 1e3:.3f} ms | {statistics.quantiles(floor, n=10)[8] * 1e3:.3f} ms | |")
        for g in gws:
            q = statistics.quantiles(lat[g.name], n=10)
            each = ", ".join(f"{c * 1e6:.0f}" for c in cpu[g.name])
            m = statistics.median(lat[g.name])
            print(f"| {g.name} | {m * 1e3:.3f} ms (+{(m - d) * 1e3:.3f}) | {q[8] * 1e3:.3f} ms "
                  f"| {statistics.median(cpu[g.name]) * 1e6:.1f} µs ({each}) |")
        b, a = (statistics.median(cpu[k]) for k in ("before", "after"))
        lb, la = (statistics.median(lat[k]) for k in ("before", "after"))
        print(f"\nafter / before: CPU per {unit} {a / b:.2f}, {unit} p50 {la / lb:.2f}, "
              f"added p50 {(la - d) / (lb - d):.2f}")
    finally:
        for g in gws:
            g.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
