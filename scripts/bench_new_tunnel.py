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


def echo_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(512)

    def serve(c):
        with c:
            while True:
                b = c.recv(64)
                if not b:
                    return
                c.sendall(b)

    def accept():
        while True:
            c, _ = srv.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv.getsockname()[1]


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
        head = b""
        while b"\r\n\r\n" not in head:
            b = s.recv(4096)
            if not b:
                raise RuntimeError(f"{self.name}: proxy closed: {head!r}")
            head += b
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{self.name}: {head!r}")
        s.sendall(b"ping")
        got = b""
        while len(got) < 4:
            got += s.recv(4)
        s.close()
        return time.perf_counter() - t

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


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
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
        port = echo_server()
        gws = [Gw("before", before, work), Gw("after", after, work)]
        for g in gws:  # warm-up
            for _ in range(50):
                g.tunnel(port)
        time.sleep(1.5)
        lat = {g.name: [] for g in gws}
        cpu = {g.name: [] for g in gws}
        floor = []
        for r in range(rounds):
            floor += [direct(port) for _ in range(n)]
            for g in (gws if r % 2 == 0 else gws[::-1]):
                c0 = g.cpu()
                lat[g.name] += [g.tunnel(port) for _ in range(n)]
                time.sleep(1.5)  # the last closes are recorded, stored and published
                cpu[g.name].append((g.cpu() - c0) / n)
        d = statistics.median(floor)
        print(f"| build | tunnel p50 (added over direct) | tunnel p90 | gateway CPU per tunnel (median of {rounds} rounds; each) |")
        print("|---|---|---|---|")
        print(f"| direct, no proxy | {d * 1e3:.3f} ms | {statistics.quantiles(floor, n=10)[8] * 1e3:.3f} ms | |")
        for g in gws:
            q = statistics.quantiles(lat[g.name], n=10)
            each = ", ".join(f"{c * 1e3:.2f}" for c in cpu[g.name])
            m = statistics.median(lat[g.name])
            print(f"| {g.name} | {m * 1e3:.3f} ms (+{(m - d) * 1e3:.3f}) | {q[8] * 1e3:.3f} ms "
                  f"| {statistics.median(cpu[g.name]) * 1e3:.2f} ms ({each}) |")
        b, a = (statistics.median(cpu[k]) for k in ("before", "after"))
        lb, la = (statistics.median(lat[k]) for k in ("before", "after"))
        print(f"\nafter / before: CPU per tunnel {a / b:.2f}, tunnel p50 {la / lb:.2f}")
    finally:
        for g in gws:
            g.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
