#!/usr/bin/env python3
"""Benchmarks of two Companion routes against a running vis-gateway binary (stdlib only).

search   GET /v1/sessions/actions/search over 10,000 stored turns (500 sessions x 20),
         side by side with a LIKE scan of the same rows in the same database (the baseline a
         search without an index would pay) and with GET /healthz (the HTTP floor).
suggest  GET /v1/sessions/:sid/suggest?kind=file over a 100,000-file tree once the index is
         warm, side by side with GET /healthz.

    python3 scripts/bench_companion.py <vis-gateway binary> [rounds]

Everything listens on 127.0.0.1; the work folder under $TMPDIR is removed at exit.
"""
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid

HEADERS = {
    "X-Vis-Protocol": "2",
    "X-Vis-Min-Gateway-Protocol": "2",
    "X-Vis-Client": "vis-companion",
}
WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu parser "
    "config router session turn stream cancel queue provider model token cache index search "
    "window transcript attachment image folder project gateway proxy sandbox python shell "
    "patch grep deploy docker release branch commit merge rebase test bench metric latency "
    "marmalade orchard tomato garden kitchen recipe breakfast jar orange lemon"
).split()
FILE_QUERIES = ["main", "srcmod", "engine/search", "readme", "test_", "cfg", "z9", "lib.rs",
                "mod", "bench", "ui/button", "x"]


class Gateway:
    def __init__(self, binary, home, root):
        self.binary, self.home, self.root = binary, home, root
        self.proc = None
        self.url = None

    def start(self):
        env = {k: v for k, v in os.environ.items()
               if not k.endswith("_API_KEY") and not k.endswith("_BASE_URL")}
        env["VIS_LOG"] = "warn"
        reg = os.path.join(self.home, "gateway.json")
        if os.path.exists(reg):
            os.remove(reg)
        self.proc = subprocess.Popen(
            [self.binary, "--home", self.home, "start", "--port", "0", "--root", self.root],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.home, "stderr.log"), "ab"))
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                r = json.load(open(reg))
                if r.get("pid") == self.proc.pid:
                    self.url = r["url"].rstrip("/")
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        while time.time() < deadline:
            try:
                self.get("/healthz")
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("the gateway did not start")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=dict(HEADERS, **{"Content-Type": "application/json"}))
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read() or b"null")

    def get(self, path):
        return self.call("GET", path)


def timed(fn, n):
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t) * 1000)
    return out


def summary(ms):
    ms = sorted(ms)
    return statistics.median(ms), ms[int(len(ms) * 0.95) - 1]


SYLLABLES = "ka lo mi ne ru sa ti vo be da fe gi ho ju ly po qu ra se to".split()
# A Zipf-like vocabulary of 20,000 made-up words, with the named words mixed in rarely, so a
# query matches the share of rows that real words do (a few common, most rare).
VOCAB = ["".join(random.Random(i).choice(SYLLABLES) for _ in range(2 + i % 3)) + str(i % 7)
         for i in range(20_000)]
CUM = []
for _r in range(len(VOCAB)):
    CUM.append((CUM[-1] if CUM else 0.0) + 1.0 / (_r + 1))
QUERIES = [VOCAB[0], VOCAB[3] + " " + VOCAB[40], VOCAB[500], VOCAB[5000][:4],
           
    "marmalade", "orchard tomato", "parser", "deploy docker", "lemon", "kilo lima",
    "transcript window", "zulu", "bench latency", "rebase", "attach", "sandb", "quebec romeo",
    "breakfast recipe", "xray", "gateway proxy", "commit merge", "index", "foxtrot", "jar",
]


def sentence(rng, n):
    words = rng.choices(VOCAB, cum_weights=CUM, k=n)
    if rng.random() < 0.3:
        words[rng.randrange(n)] = rng.choice(WORDS)
    return " ".join(words).capitalize() + "."


def fill_store(db, root, rng, sessions=500, turns=20):
    c = sqlite3.connect(db)
    now = int(time.time() * 1000)
    ord_ = 0
    with c:
        for s in range(sessions):
            sid = str(uuid.uuid4())
            c.execute(
                "INSERT INTO sessions (id, channel, title, root, created_at, modified_at, "
                "last_active_at, turn_count, last_status) VALUES (?,?,?,?,?,?,?,?,?)",
                (sid, "web", sentence(rng, 4), root, now - s * 1000, now, now, turns, "idle"))
            for t in range(turns):
                ord_ += 1
                tid = str(uuid.uuid4())
                rec = {
                    "tid": tid, "sid": sid, "ord": ord_, "engine_turn_id": str(uuid.uuid4()),
                    "status": "completed", "request": sentence(rng, 14),
                    "display_request": None, "idempotency_key": None, "model": "m",
                    "reasoning_default": None, "created_at": now - s * 1000 + t,
                    "queued_at": None, "started_at": now, "completed_at": now,
                    "cancelling_at": None, "attachments": [],
                    "content": [{"id": f"{tid}:p", "type": "prose",
                                 "markdown": " ".join(sentence(rng, 12) for _ in range(6))}],
                    "error": None,
                    "iterations": [{"id": f"{tid}:1", "thinking": sentence(rng, 30), "forms": []}],
                    "provider": "openai", "tokens": {"input": 100, "output": 50, "cached": 0,
                                                     "reasoning": 0},
                    "duration_ms": 10, "utilization": 0.01, "is_slash": False,
                }
                c.execute("INSERT INTO turns (tid, sid, ord, status, record) VALUES (?,?,?,?,?)",
                          (tid, sid, ord_, "completed", json.dumps(rec)))
    c.close()


def like_scan(db, word):
    c = sqlite3.connect(db)
    t = time.perf_counter()
    c.execute("SELECT COUNT(*) FROM turns WHERE record LIKE ?", (f"%{word}%",)).fetchall()
    ms = (time.perf_counter() - t) * 1000
    c.close()
    return ms


def make_tree(root, rng, files=100_000):
    names = ["main", "lib", "mod", "util", "config", "search", "engine", "button", "test_api",
             "readme", "bench", "router", "parser", "store", "index", "cfg", "view", "model"]
    exts = [".rs", ".py", ".ts", ".md", ".json", ".txt"]
    made = 0
    top = 0
    while made < files:
        for sub in range(20):
            d = os.path.join(root, f"pkg{top}", ["src", "ui", "docs", "tests"][sub % 4], f"m{sub}")
            os.makedirs(d, exist_ok=True)
            for i in range(100):
                name = f"{rng.choice(names)}{i}{rng.choice(exts)}"
                open(os.path.join(d, name), "w").close()
                made += 1
        top += 1
    os.makedirs(os.path.join(root, "ignored"), exist_ok=True)
    for i in range(1000):
        open(os.path.join(root, "ignored", f"main{i}.rs"), "w").close()
    with open(os.path.join(root, ".gitignore"), "w") as f:
        f.write("ignored/\n")


def main():
    binary = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    rng = random.Random(14)
    work = tempfile.mkdtemp(prefix="vis-bench-companion-")
    gw = None
    try:
        home, root, tree = (os.path.join(work, d) for d in ("home", "root", "tree"))
        for d in (home, root, tree):
            os.makedirs(d)
        # search: create the schema, stop, fill 10,000 turns, start again
        gw = Gateway(binary, home, root)
        gw.start()
        gw.stop()
        t = time.perf_counter()
        fill_store(os.path.join(home, "vis.db"), root, rng)
        fill_s = time.perf_counter() - t
        gw.start()
        for q in QUERIES:  # warm the page cache once
            gw.get("/v1/sessions/actions/search?q=" + urllib.parse.quote(q))
        search = timed(lambda i: gw.get("/v1/sessions/actions/search?q="
                                        + urllib.parse.quote(QUERIES[i % len(QUERIES)])), rounds)
        per_kind = {}
        for i, ms in enumerate(search):
            per_kind.setdefault(QUERIES[i % len(QUERIES)], []).append(ms)
        slowest = sorted(((statistics.median(v), k) for k, v in per_kind.items()), reverse=True)[:3]
        floor = timed(lambda i: gw.get("/healthz"), rounds)
        hits = len(gw.get("/v1/sessions/actions/search?q=marmalade")["matches"])
        gw.stop()
        like = [like_scan(os.path.join(home, "vis.db"), QUERIES[i % len(QUERIES)].split()[0])
                for i in range(40)]
        if os.environ.get("BENCH_ONLY") == "search":
            s50, s95 = summary(search)
            print(f"search p50 {s50:.2f} p95 {s95:.2f}; slowest: {slowest}")
            return
        # suggest: a 100,000-file tree
        t = time.perf_counter()
        make_tree(tree, rng)
        tree_s = time.perf_counter() - t
        gw.start()
        sid = gw.call("POST", "/v1/sessions", {"channel": "web", "root": tree})["id"]
        t = time.perf_counter()
        first = gw.get(f"/v1/sessions/{sid}/suggest?kind=file&q=main")
        cold = (time.perf_counter() - t) * 1000
        leaked = [r for r in first if r["name"].startswith("ignored/")]
        suggest = timed(lambda i: gw.get(f"/v1/sessions/{sid}/suggest?kind=file&q="
                                         + urllib.parse.quote(FILE_QUERIES[i % len(FILE_QUERIES)])),
                        rounds)
        floor2 = timed(lambda i: gw.get("/healthz"), rounds)
        gw.stop()
        s50, s95 = summary(search)
        f50, _ = summary(floor)
        l50, _ = summary(like)
        g50, g95 = summary(suggest)
        h50, _ = summary(floor2)
        print(f"search  10,000 turns ({fill_s:.1f} s to write), {rounds} queries of {len(QUERIES)} kinds: "
              f"p50 {s50:.2f} ms, p95 {s95:.2f} ms; /healthz p50 {f50:.2f} ms (x{s50 / f50:.1f}); "
              f"LIKE scan of the same rows p50 {l50:.1f} ms (x{l50 / s50:.1f} slower); "
              f"'marmalade' matched {hits} sessions; slowest kinds: "
              + ", ".join(f"{k!r} {v:.1f} ms" for v, k in slowest))
        print(f"suggest 100,000 files ({tree_s:.1f} s to write): cold first query {cold:.0f} ms; "
              f"warm p50 {g50:.2f} ms, p95 {g95:.2f} ms over {rounds} queries; "
              f"/healthz p50 {h50:.2f} ms (x{g50 / h50:.1f}); gitignored files answered: {len(leaked)}")
    finally:
        if gw:
            gw.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
