"""Drafts benchmark: a real vis-gateway on a git repository of N files (default 10,000).

Measured per round, over HTTP as the phone does it:
  - new:   POST /v1/sessions/:sid/workspace/drafts {label}  (= `/draft new`: snapshot of the
           trunk's tree with its uncommitted files, worktree on a new branch), answered;
  - apply: a `/draft apply` turn after 100 files were changed in the draft, from submit to
           its terminal (commit, merge onto the branch, trunk checked out, worktree removed).
Side by side, the same machine and repository: `git worktree add -b` with the parallel
checkout the gateway uses (the floor of a git draft) and with git's defaults, and a plain `git commit -a` + `git merge --no-ff` of 100
changed files done by hand in a second worktree.

Usage: bench_drafts.py <vis-gateway binary> [files] [rounds]
Everything listens on 127.0.0.1; the work folder under $TMPDIR is removed at exit.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]


def git(cwd, *args):
    subprocess.run(GIT + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def make_repo(root, files):
    git(root, "init", "-q", "-b", "main")
    for i in range(files):
        d = os.path.join(root, f"d{i % 100:02d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.txt"), "w") as f:
            f.write(f"file {i}\n" + "x" * 200 + "\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "init")


class Gateway:
    def __init__(self, binary, home, root):
        self.proc = subprocess.Popen(
            [binary, "--home", home, "start", "--port", "0", "--root", root],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "VIS_LOG": "warn"},
        )
        deadline = time.time() + 30
        while True:
            try:
                with open(os.path.join(home, "gateway.json")) as f:
                    reg = json.load(f)
                if reg.get("pid") == self.proc.pid:
                    break
            except (OSError, ValueError):
                pass
            if time.time() > deadline:
                raise SystemExit("the gateway did not start")
            time.sleep(0.02)
        self.base = f"http://127.0.0.1:{reg['port']}"
        self.token = reg.get("token", "")

    def call(self, method, path, body=None):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Content-Type", "application/json")
        req.add_header("X-Vis-Protocol", "2")
        req.add_header("X-Vis-Min-Gateway-Protocol", "2")
        req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read() or b"null")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def change_files(root, n, tag, first=0):
    for i in range(first, first + n):
        p = os.path.join(root, f"d{i % 100:02d}", f"f{i}.txt")
        with open(p, "a") as f:
            f.write(f"{tag}\n")


def report(name, values, target=None):
    med, worst = statistics.median(values), max(values)
    line = f"{name:<44} median {med * 1000:8.1f} ms   max {worst * 1000:8.1f} ms"
    if target is not None:
        line += f"   target <= {target * 1000:.0f} ms: {'met' if worst <= target else 'MISSED'}"
    print(line)


def main():
    binary = sys.argv[1]
    files = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    work = tempfile.mkdtemp(prefix="vis-bench-drafts-")
    gw = None
    try:
        root, home = os.path.join(work, "repo"), os.path.join(work, "home")
        os.makedirs(root)
        os.makedirs(home)
        make_repo(root, files)
        # Uncommitted work in trunk, as a draft usually starts.
        change_files(root, 10, "wip", first=files // 2)
        gw = Gateway(binary, home, root)
        sid = gw.call("POST", "/v1/sessions", {"root": root, "channel": "api"})["id"]
        new, apply = [], []
        for r in range(rounds):
            t0 = time.perf_counter()
            made = gw.call("POST", f"/v1/sessions/{sid}/workspace/drafts", {"label": f"b{r}"})
            new.append(time.perf_counter() - t0)
            draft = made["workspace"]["root"]
            change_files(draft, 100, f"round {r}")
            t0 = time.perf_counter()
            turn = gw.call("POST", f"/v1/sessions/{sid}/turns", {"request": "/draft apply"})
            tid = turn.get("turn_id") or turn.get("id") or turn["turn"]["id"]
            while True:
                t = gw.call("GET", f"/v1/sessions/{sid}/turns/{tid}")
                status = t.get("status") or t.get("turn", {}).get("status")
                if status in ("completed", "failed", "cancelled"):
                    break
                time.sleep(0.002)
            apply.append(time.perf_counter() - t0)
            if status != "completed":
                raise SystemExit(f"apply round {r} ended {status}: {json.dumps(t)[:400]}")
        floor_new, floor_par, floor_apply = [], [], []
        for r in range(rounds):
            wt = os.path.join(work, f"par{r}")
            t0 = time.perf_counter()
            git(root, "-c", "checkout.workers=8", "worktree", "add", "-q", "-b", f"par{r}", wt)
            floor_par.append(time.perf_counter() - t0)
            git(root, "worktree", "remove", "--force", wt)
            wt = os.path.join(work, f"plain{r}")
            t0 = time.perf_counter()
            git(root, "worktree", "add", "-q", "-b", f"plain{r}", wt)
            floor_new.append(time.perf_counter() - t0)
            change_files(wt, 100, f"plain {r}")
            t0 = time.perf_counter()
            git(wt, "commit", "-qam", "plain")
            git(root, "merge", "-q", "--no-ff", "-m", "merge", f"plain{r}")
            git(root, "worktree", "remove", "--force", wt)
            floor_apply.append(time.perf_counter() - t0)
        print(f"drafts on a git repository of {files} files, {rounds} rounds")
        report("/draft new (POST workspace/drafts)", new, 1.0)
        report("  git worktree add, parallel checkout (floor)", floor_par)
        report("  git worktree add, git's defaults", floor_new)
        report("/draft apply of 100 changed files (turn)", apply, 2.0)
        report("  plain commit + merge + worktree remove", floor_apply)
        print(f"ratio new/floor {statistics.median(new) / statistics.median(floor_par):.2f}x, "
              f"apply/floor {statistics.median(apply) / statistics.median(floor_apply):.2f}x")
    finally:
        if gw:
            gw.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
