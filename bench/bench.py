#!/usr/bin/env python3
"""Benchmarks sankofa.proxmox against community.proxmox (the `ansible` package from PyPI, with
proxmoxer) on the same pve-sim, in one run, and writes bench/results/latest.md.

Measured, for both clients:
  1. end-detection latency: from a task's recorded end (pve-sim's task log) to the first status
     request that saw it stopped (pve-sim's request log), for qmstart tasks of several lengths;
  2. status requests per task;
  3. the per-call cost of a no-op (VM exists, nothing to change): module process wall time and
     peak RSS, API requests, and the whole `ansible localhost -m` call;
  4. end to end: a playbook that creates a VM from a 50, 300 and 660 MB cloud image on throttled
     storage, ours (one `vm` task) against the peer's `proxmox_kvm` + `proxmox_disk`;
  5. scale: VMs created in parallel with automatic ids (`forks`), on a 3-node pve-sim;
  6. the release binaries' size;
  7. the wait over a network (`net`): round trips of 0-100 ms added by bench/delay_proxy.py in
     front of pve-sim, and 1-5 ms of server time on every request (pve-sim's `--request-cost`),
     for tasks without progress and for imports, ours against the peer's one-second poll.
  8. fleets (bench/fleet.py): one play creating 10-200 VMs by name at once, `-f 50`, at 0-30 ms
     per request, with the web UI's poll beside it; and ten linked clones of a template.
Plots (PNG, matplotlib in its own venv) go next to the report.

Usage: bench/run.sh [--full]   (the script sets up the venvs and calls this file)
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, ".work", "bench")
# The binaries measured: the release build, or BENCH_BIN_DIR's (relative to the root, e.g.
# target/debug, to try a change quickly; not for results).
BIN_DIR = os.path.join(ROOT, os.environ.get("BENCH_BIN_DIR") or os.path.join("target", "release"))
SIM = os.path.join(BIN_DIR, "pve-sim")
VM_BIN = os.path.join(BIN_DIR, "vm")
OURS_ANSIBLE = os.path.join(ROOT, ".venv", "bin", "ansible")
PEER_BIN = os.path.join(WORK, "peer-venv", "bin")
PASSWORD = "bench-password"
# The CPUs pve-sim runs on (`taskset -c`), where an experiment gives it cores of its own as a
# PVE node has (bench/fleet.py `--pin`); None: any.
SIM_CPUS = None
# The commit the run starts on (`make bench` builds the binaries from it first).
COMMIT = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                        cwd=ROOT).stdout.strip() or "unknown"


class Sim:
    """A pve-sim started for one experiment."""

    def __init__(self, name, extra):
        self.dir = os.path.join(WORK, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        cmd = [SIM, "--data-dir", os.path.join(self.dir, "data"), "--listen", "127.0.0.1:0",
               "--auth-failure-delay", "0s", "--user", f"root@pam:{PASSWORD}", "--workers", "3"] + extra
        if SIM_CPUS:
            cmd = ["taskset", "-c", SIM_CPUS] + cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.info = json.loads(self.proc.stdout.readline())
        self.port = self.info["port"]
        # Where the clients connect: pve-sim itself, or a delaying proxy in front of it.
        self.client_port = self.port

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        # The figures are taken by now: the VMs' disks go (a run makes hundreds), the logs stay.
        shutil.rmtree(os.path.join(self.dir, "data", "nodes"), ignore_errors=True)

    def requests(self):
        return read_jsonl(os.path.join(self.dir, "data", "requests.jsonl"))

    def tasks(self):
        return read_jsonl(os.path.join(self.dir, "data", "tasks.jsonl"))


def read_jsonl(path):
    """The records of a log pve-sim is still writing: a last line not written out yet is left."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def ours(sim, args):
    """Runs our vm module binary as Ansible does (an args file); returns the result."""
    base = {"api_host": "127.0.0.1", "api_port": sim.client_port, "api_password": PASSWORD,
            "api_fingerprint": sim.info["fingerprint"]}
    base.update(args)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(base, f)
    try:
        out = subprocess.run([VM_BIN, f.name], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        return json.loads(out.stdout)
    finally:
        os.unlink(f.name)


def peer_env():
    env = dict(os.environ)
    env.update({
        "ANSIBLE_HOME": os.path.join(WORK, "peer-ansible-home"),
        "ANSIBLE_LOCAL_TEMP": os.path.join(WORK, "peer-tmp"),
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(WORK, "none"),
        "ANSIBLE_PYTHON_INTERPRETER": os.path.join(PEER_BIN, "python"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": PEER_BIN + os.pathsep + env.get("PATH", ""),
    })
    return env


def peer_args(sim, extra):
    a = {"api_host": "127.0.0.1", "api_port": sim.client_port, "api_user": "root@pam", "api_password": PASSWORD,
         "validate_certs": False}
    a.update(extra)
    return a


def peer(sim, module, extra, keep=False):
    """Runs a community.proxmox module ad hoc; returns (result dict, wall seconds)."""
    env = peer_env()
    if keep:
        env["ANSIBLE_KEEP_REMOTE_FILES"] = "1"
        env["ANSIBLE_REMOTE_TEMP"] = os.path.join(WORK, "peer-remote-tmp")
    t = time.monotonic()
    out = subprocess.run([os.path.join(PEER_BIN, "ansible"), "localhost", "-m", f"community.proxmox.{module}",
                          "-a", json.dumps(peer_args(sim, extra)), "-o"],
                         capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t
    text = out.stdout
    i = text.find("{")
    try:
        res = json.loads(text[i:]) if i >= 0 else {"failed": True, "msg": text + out.stderr}
    except json.JSONDecodeError:
        res = {"failed": True, "msg": text[-500:]}
    return res, wall


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def detection(sim, upids):
    """For each task: (latency seconds, status requests) from pve-sim's own logs."""
    ends = {t["upid"]: t["end"] for t in sim.tasks()}
    reqs = sim.requests()
    out = []
    for u in upids:
        polls = [r for r in reqs if r["method"] == "GET" and r["path"].endswith(f"/tasks/{u}/status")]
        end = ends.get(u)
        seen = [r["ts"] for r in polls if r["status"] == 200 and end is not None and r["ts"] >= end]
        if end is None or not seen:
            continue
        out.append((min(seen) - end, len(polls)))
    return out


def latency_experiment(durations, runs, have_peer):
    rows = []
    for d in durations:
        # ±30% jitter: real task lengths do not line up with a client's fixed poll interval.
        sim = Sim(f"latency-{d}", ["--task-duration", f"qmstart={d}s", "--task-jitter", "0.3", "--task-duration", "qmstop=100ms",
                                   "--task-duration", "qmcreate=100ms"])
        try:
            for vmid in (100, 101):
                r = ours(sim, {"node": "pve1", "vmid": vmid, "name": f"lat{vmid}", "cores": 1})
                assert not r.get("failed"), r
            mine, theirs = [], []
            for _ in range(runs if d < 30 else (4 if d < 120 else 2)):
                r = ours(sim, {"vmid": 100, "state": "started"})
                assert not r.get("failed"), r
                mine += [t["upid"] for t in r["tasks"] if t["type"] == "qmstart"]
                ours(sim, {"vmid": 100, "state": "stopped", "shutdown_timeout": 0})
                if have_peer:
                    before = {t["upid"] for t in sim.tasks()}
                    res, _ = peer(sim, "proxmox_kvm", {"vmid": 101, "node": "pve1", "state": "started", "timeout": 600})
                    if res.get("failed"):
                        print("peer start failed:", res.get("msg"), file=sys.stderr)
                    theirs += [t["upid"] for t in sim.tasks() if t["upid"] not in before and t["type"] == "qmstart"]
                    ours(sim, {"vmid": 101, "state": "stopped", "shutdown_timeout": 0})
            for who, upids in (("sankofa.proxmox.vm", mine), ("community.proxmox.proxmox_kvm", theirs)):
                m = detection(sim, upids)
                if not m:
                    continue
                lat = [x[0] * 1000 for x in m]
                polls = [x[1] for x in m]
                rows.append((d, who, len(m), percentile(lat, 50), percentile(lat, 95), max(lat), statistics.mean(polls)))
        finally:
            sim.stop()
    return rows


def make_image(mb, virtual_mb):
    """A qcow2 with `mb` MiB of incompressible data in a disk of `virtual_mb` MiB, as cloud
    images are (a few hundred MB of data in a few GB of disk)."""
    img = os.path.join(WORK, f"bench-{mb}.qcow2" if virtual_mb in (1024, 2560) else f"bench-{mb}-{virtual_mb}.qcow2")
    if not os.path.exists(img):
        raw = img + ".raw"
        subprocess.run(f"head -c {mb}M /dev/urandom > {raw} && truncate -s {virtual_mb}M {raw}", shell=True, check=True)
        subprocess.run(["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", raw, img], check=True)
        os.unlink(raw)
    return img


def import_experiment(minutes_list):
    """End detection for long imports (progress lines in the task log), ours only."""
    rows = []
    for minutes in minutes_list:
        img = make_image(660, 2560)
        # pve-sim paces an import by its progress over the virtual size (2560 MiB here).
        rate = max(1, int(2560 / (minutes * 60)))
        sim = Sim(f"import-{minutes}", ["--seed-image", img, "--import-rate", f"{rate}M"])
        try:
            r = ours(sim, {"node": "pve1", "vmid": 100, "timeout": "30m",
                           "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": f"local:import/{os.path.basename(img)}"}]})
            assert not r.get("failed"), r
            u = [t["upid"] for t in r["tasks"] if t["type"] == "qmcreate"]
            # The end of an import is often first seen in its log (the wait reads the last
            # progress lines), not in a status answer: every task request counts, as in `waits`.
            for upid in u:
                seen = noticed(sim, upid)
                if seen is None:
                    print(f"bench: import {upid} was never looked at after its end", file=sys.stderr)
                    continue
                task = next(t for t in sim.tasks() if t["upid"] == upid)
                rows.append((round(task["end"] - task["start"]), seen[0] * 1000, seen[1], r["api_requests"]))
        finally:
            sim.stop()
    return rows


# The import scenarios of the wait (issue: the import wait must beat the peer on any server):
# (name, extra pve-sim options). Each imports a 1 GiB-disk image at IMPORT_RATE_MB MiB/s.
WAIT_SCENARIOS = [
    ("steady", []),
    ("finishing 5 s after 100 %", ["--import-tail", "5s"]),
    ("rate halves at 50 %", ["--import-rate-change", "0.5@50"]),
    ("rate doubles at 50 %", ["--import-rate-change", "2@50"]),
    ("stalls 10 s at 40 %", ["--import-stall", "10s@40"]),
    ("progress in 10 % steps", ["--progress-step", "10"]),
]
# 34 MiB/s: a 30 s import, the shortest length the targets name.
IMPORT_RATE_MB = 34
# The wait experiments' image: a 1 GiB disk with this much data. pve-sim paces a copy by its
# progress over the virtual size, so the data only costs disk space (the side-by-side runs
# hold dozens of copies at once).
WAIT_IMAGE_MB = 50


def task_requests(sim, upid):
    """Every request about a task (status and log), with pve-sim's answer times."""
    return [r for r in sim.requests() if f"/tasks/{upid}/" in r["path"]]


def noticed(sim, upid):
    """(latency s, task requests) for a task: latency from its end in pve-sim's task log to the
    first answer about it (status, or a log read, which then carries PVE's last line) after
    that end; None if it never ended or was never looked at after its end."""
    end = next((t["end"] for t in sim.tasks() if t["upid"] == upid), None)
    reqs = task_requests(sim, upid)
    after = [r["ts"] for r in reqs if r["status"] == 200 and end is not None and r["ts"] >= end]
    if end is None or not after:
        return None
    return min(after) - end, len(reqs)


def stats(xs):
    """p50/p95 from 10 samples or more; min/median/max below that (no p95 from few)."""
    if len(xs) >= 10:
        return f"p50 {percentile(xs, 50):.0f}, p95 {percentile(xs, 95):.0f}"
    if not xs:
        return "-"
    return f"min {min(xs):.0f}, median {statistics.median(xs):.0f}, max {max(xs):.0f} (n={len(xs)})"


def waits_experiment(have_peer, runs, scenarios, runs_others=None):
    """The import wait, ours against the peer's best one-task create (`proxmox_kvm` with
    `scsi0: local-lvm:0,import-from=…`, waiting on the create task at its 1 s poll): the same
    pve-sim per scenario, runs interleaved (ours, peer, ours, …), every task request counted;
    the scenarios side by side."""
    img = make_image(WAIT_IMAGE_MB, 1024)
    vol = f"local:import/{os.path.basename(img)}"

    def scenario(name, extra):
        rows = []
        n_runs = runs if name == "steady" or runs_others is None else runs_others
        slug = "".join(c if c.isalnum() else "-" for c in name)
        sim = Sim(f"wait-{slug}", ["--seed-image", img, "--import-rate", f"{IMPORT_RATE_MB}M"] + extra)
        got = {"ours": [], "peer": []}
        try:
            for i in range(n_runs):
                for who in ("ours", "peer") if have_peer else ("ours",):
                    vmid = 300 + 2 * i + (who == "peer")
                    before = {t["upid"] for t in sim.tasks()}
                    if who == "ours":
                        r = ours(sim, {"node": "pve1", "vmid": vmid, "timeout": "30m",
                                       "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": vol}]})
                        ok = not r.get("failed")
                    else:
                        r, _ = peer(sim, "proxmox_kvm", {"node": "pve1", "vmid": vmid, "name": f"w{vmid}",
                                                          "scsi": {"scsi0": f"local-lvm:0,import-from={vol}"},
                                                          "timeout": 1800})
                        ok = not r.get("failed")
                    new = [t for t in sim.tasks() if t["upid"] not in before and t["type"] == "qmcreate"]
                    if not ok or not new:
                        print(f"wait {name} {who} run {i} failed: {r.get('msg')}", file=sys.stderr)
                        continue
                    m = noticed(sim, new[0]["upid"])
                    if m:
                        got[who].append((m[0] * 1000, m[1], new[0]["end"] - new[0]["start"]))
        finally:
            sim.stop()
        for who, ms in got.items():
            if ms:
                rows.append({"scenario": name, "who": who, "n": len(ms), "latency_ms": [x[0] for x in ms],
                             "requests": [x[1] for x in ms], "task_s": statistics.median(x[2] for x in ms)})
        return rows

    # The scenarios run at once, each on its own pve-sim (a wait is mostly idle: the copies are
    # paced), so the experiment takes one scenario's time.
    got = in_parallel([lambda sc=sc: scenario(*sc) for sc in scenarios])
    return [r for rows in got if rows for r in rows]


class Prober:
    """An unrelated client: `GET /version` every 100 ms on one ticket, timing each answer."""

    def __init__(self, sim):
        import ssl
        import urllib.parse
        import urllib.request
        self.ctx = ssl.create_default_context(cafile=sim.info["ca"])
        self.base = f"https://127.0.0.1:{sim.port}/api2/json"
        body = urllib.parse.urlencode({"username": "root@pam", "password": PASSWORD}).encode()
        with urllib.request.urlopen(self.base + "/access/ticket", data=body, context=self.ctx) as r:
            self.ticket = json.load(r)["data"]["ticket"]
        self.samples = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        import urllib.request
        while not self.stop.is_set():
            req = urllib.request.Request(self.base + "/version",
                                         headers={"Cookie": f"PVEAuthCookie={self.ticket}"})
            t = time.monotonic()
            try:
                with urllib.request.urlopen(req, context=self.ctx) as r:
                    r.read()
                self.samples.append((time.time(), time.monotonic() - t))
            except OSError:
                pass
            self.stop.wait(0.1)

    def finish(self):
        self.stop.set()
        self.thread.join()


def load_experiment(have_peer, n=20, task_s=40, cost_ms=20):
    """n modules waiting at once on qmstart tasks of task_s seconds, on a pve-sim whose task
    requests (status and log) cost cost_ms each in one of its 3 workers (as a busy pveproxy):
    the task requests per second at the server, and an unrelated GET /version's latency, while
    all n wait. Ours and the peer's `proxmox_kvm` (state=started) on the same simulator, one
    after the other."""
    scen = os.path.join(WORK, "load-scenario.json")
    with open(scen, "w") as f:
        json.dump([{"kind": "latency", "method": "GET", "path": "/tasks/", "ms": cost_ms}], f)
    sim = Sim("load", ["--task-duration", f"qmstart={task_s}s", "--scenario", scen])
    rows = []
    try:
        for i in range(2 * n):
            r = ours(sim, {"node": "pve1", "vmid": 500 + i, "name": f"load{500 + i}", "state": "stopped"})
            assert not r.get("failed"), r
        for k, who in enumerate(("ours", "peer") if have_peer else ("ours",)):
            ids = range(500 + k * n, 500 + (k + 1) * n)
            start = time.time()
            prober = Prober(sim)

            def one(vmid):
                if who == "ours":
                    ours(sim, {"node": "pve1", "vmid": vmid, "state": "started", "timeout": "10m"})
                else:
                    peer(sim, "proxmox_kvm", {"node": "pve1", "vmid": vmid, "state": "started", "timeout": 600})

            threads = [threading.Thread(target=one, args=(v,)) for v in ids]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            prober.finish()
            tasks = [t for t in sim.tasks() if t["type"] == "qmstart" and t["start"] >= start - 1]
            if len(tasks) < n:
                print(f"load {who}: {len(tasks)} of {n} tasks", file=sys.stderr)
                continue
            # The window in which all n wait: from the last start (plus 2 s for the modules
            # to settle) to the first end.
            w0, w1 = max(t["start"] for t in tasks) + 2, min(t["end"] for t in tasks)
            reqs = [r for r in sim.requests() if "/tasks/" in r["path"] and w0 <= r["ts"] <= w1]
            lat = [d * 1000 for ts, d in prober.samples if w0 <= ts <= w1]
            ends = [noticed(sim, t["upid"]) for t in tasks]
            late = [e[0] * 1000 for e in ends if e]
            rows.append({"who": who, "window_s": w1 - w0, "rps": len(reqs) / max(w1 - w0, 1e-9),
                         "version_ms": lat, "late_ms": late})
    finally:
        sim.stop()
    return rows


# The network grid (issue: the wait over real networks): round trips added by a delaying TCP
# proxy in front of pve-sim (bench/delay_proxy.py, half each way), and what pve-sim spends on
# every request (`--request-cost`: the worker sleeps before it answers, holding one of the
# --workers, so it is the server's time, not the network's).
NET_RTTS_MS = [0, 10, 40, 100]
NET_COSTS_MS = [1, 2, 3, 4, 5]


class DelayProxy:
    """bench/delay_proxy.py in front of a pve-sim, adding `rtt_ms` to every round trip."""

    def __init__(self, sim, rtt_ms):
        self.proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench", "delay_proxy.py"),
                                      "--upstream", f"127.0.0.1:{sim.port}", "--rtt", f"{rtt_ms}ms"],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.port = json.loads(self.proc.stdout.readline())["port"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Through:
    """A view of a pve-sim through one client port (the sim's own, or a proxy's)."""

    def __init__(self, sim, port):
        self.sim, self.client_port, self.port, self.info = sim, port, sim.port, sim.info


def in_parallel(jobs):
    """Runs the callables at once; returns their results in order."""
    out = [None] * len(jobs)

    def run(i):
        try:
            out[i] = jobs[i]()
        except Exception:  # one failed job is reported and leaves a gap, not the whole run
            import traceback
            traceback.print_exc()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def client_latency(sim, upid, rtt_ms):
    """(ms from the task's end to the client holding the answer that said so, task requests):
    pve-sim's answer time, plus the half round trip the answer travels back."""
    m = noticed(sim, upid)
    if not m:
        return None
    return m[0] * 1000 + rtt_ms / 2, m[1]


def net_tasks_experiment(have_peer, per_cell=10, parallel=5, task_s=2, rtts=None, costs=None):
    """Tasks without progress (qmstart of task_s ±30 %) across the grid: `parallel` modules of
    ours at once, then as many of the peer's, per_cell tasks each per cell, on one pve-sim per
    server cost with one proxy per round trip."""
    rtts = NET_RTTS_MS if rtts is None else rtts
    costs = NET_COSTS_MS if costs is None else costs
    rows = []
    for cost in costs:
        sim = Sim(f"net-tasks-{cost}", ["--task-duration", f"qmstart={task_s}s", "--task-jitter", "0.3",
                                        "--task-duration", "qmstop=100ms", "--task-duration", "qmcreate=100ms",
                                        "--request-cost", f"{cost}ms"])
        proxies = {rtt: DelayProxy(sim, rtt) for rtt in rtts if rtt}
        try:
            ids = {"ours": range(700, 700 + parallel), "peer": range(800, 800 + parallel)}
            for vmid in [*ids["ours"], *ids["peer"]]:
                r = ours(sim, {"node": "pve1", "vmid": vmid, "name": f"net{vmid}", "cores": 1})
                assert not r.get("failed"), r
            rounds = max(1, per_cell // parallel)
            for rtt in rtts:
                view = Through(sim, proxies[rtt].port if rtt else sim.port)

                def mine(vmid):
                    upids = []
                    for _ in range(rounds):
                        r = ours(view, {"vmid": vmid, "node": "pve1", "state": "started"})
                        upids += [t["upid"] for t in r.get("tasks", []) if t["type"] == "qmstart"]
                        ours(sim, {"vmid": vmid, "node": "pve1", "state": "stopped", "shutdown_timeout": 0})
                    return upids

                def theirs(vmid):
                    for _ in range(rounds):
                        res, _ = peer(view, "proxmox_kvm", {"vmid": vmid, "node": "pve1", "state": "started",
                                                            "timeout": 600})
                        if res.get("failed"):
                            print("net peer start failed:", res.get("msg"), file=sys.stderr)
                        ours(sim, {"vmid": vmid, "node": "pve1", "state": "stopped", "shutdown_timeout": 0})

                # Ours first, then the peer's: the peer's Python start-up does not load the
                # host while ours wait, nor ours while the peer's do.
                upids = {"ours": [u for g in in_parallel([lambda v=v: mine(v) for v in ids["ours"]]) if g
                                  for u in g]}
                if have_peer:
                    start = time.time()
                    in_parallel([lambda v=v: theirs(v) for v in ids["peer"]])
                    upids["peer"] = [t["upid"] for t in sim.tasks() if t["type"] == "qmstart"
                                     and t["start"] >= start and t["id"] in {str(v) for v in ids["peer"]}]
                for who, us in upids.items():
                    m = [x for x in (client_latency(sim, u, rtt) for u in us) if x]
                    rows.append({"kind": "tasks", "rtt": rtt, "cost": cost, "who": who, "n": len(m),
                                 "latency_ms": [x[0] for x in m], "requests": [x[1] for x in m]})
                print(f"net tasks rtt {rtt} cost {cost}: " + "; ".join(
                    f"{r['who']} {stats(r['latency_ms'])}" for r in rows[-len(upids):]), file=sys.stderr)
        finally:
            for p in proxies.values():
                p.stop()
            sim.stop()
    return rows


def net_imports_experiment(have_peer, costs=(1, 5), parallel=5, tail_s=0, copy_s=30, rtts=None, tag=""):
    """Imports (the 200 MiB / 1 GiB image, a copy of copy_s seconds and pve-sim's own finishing
    phase after 100 %: qemu-img's exit and the config write, plus tail_s) across round trips
    and costs: `parallel` creates of each client at
    once per cell (ours: `vm` with import_from; the peer: `proxmox_kvm` with import-from in one
    task), every task request counted."""
    rate_k = max(1, int(1024 * 1024 / copy_s))
    # The copies of a cell last copy_s plus 0 to 1 s (virtual sizes spread over one second of
    # copying, in `parallel` steps, the same lengths for both clients): with one length, a
    # one-second poll would meet every end at the same phase, and a cell would sample the
    # peer's luck once.
    spread_mb = [1024 + round(rate_k / 1024 * step / parallel) for step in range(parallel)]
    images = [make_image(WAIT_IMAGE_MB, vmb) for vmb in spread_mb]
    vols = [f"local:import/{os.path.basename(img)}" for img in images]
    rows = []
    for cost in costs:
        for rtt in NET_RTTS_MS if rtts is None else rtts:
            seeds = [arg for img in images for arg in ("--seed-image", img)]
            sim = Sim(f"net-import{tag}-{rtt}-{cost}", seeds + ["--import-rate", f"{rate_k}K",
                                                                "--import-tail", f"{tail_s}s", "--request-cost",
                                                                f"{cost}ms"])
            proxy = DelayProxy(sim, rtt) if rtt else None
            view = Through(sim, proxy.port if proxy else sim.port)
            try:
                def mine(vmid):
                    vol = vols[(vmid - 300) % len(vols)]
                    r = ours(view, {"node": "pve1", "vmid": vmid, "timeout": "30m",
                                    "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": vol}]})
                    if r.get("failed"):
                        print(f"net import ours {vmid} failed: {r.get('msg')}", file=sys.stderr)
                    return [t["upid"] for t in r.get("tasks", []) if t["type"] == "qmcreate"]

                def theirs(vmid):
                    vol = vols[(vmid - 400) % len(vols)]
                    r, _ = peer(view, "proxmox_kvm", {"node": "pve1", "vmid": vmid, "name": f"w{vmid}",
                                                       "scsi": {"scsi0": f"local-lvm:0,import-from={vol}"},
                                                       "timeout": 1800})
                    if r.get("failed"):
                        print(f"net import peer {vmid} failed: {r.get('msg')}", file=sys.stderr)
                    return []

                jobs = [lambda v=v: mine(v) for v in range(300, 300 + parallel)]
                if have_peer:
                    jobs += [lambda v=v: theirs(v) for v in range(400, 400 + parallel)]
                got = in_parallel(jobs)
                upids = {"ours": [u for g in got[:parallel] if g for u in g]}
                if have_peer:
                    upids["peer"] = [t["upid"] for t in sim.tasks() if t["type"] == "qmcreate"
                                     and t["id"] in {str(v) for v in range(400, 400 + parallel)}]
                ends = {t["upid"]: t["end"] - t["start"] for t in sim.tasks()}
                for who, us in upids.items():
                    m = [x for x in (client_latency(sim, u, rtt) for u in us) if x]
                    rows.append({"kind": "imports", "rtt": rtt, "cost": cost, "who": who, "n": len(m),
                                 "latency_ms": [x[0] for x in m], "requests": [x[1] for x in m],
                                 "task_s": statistics.median(ends[u] for u in us) if us else float("nan"),
                                 "tail_s": tail_s})
                print(f"net imports{tag} rtt {rtt} cost {cost}: " + "; ".join(
                    f"{r['who']} {stats(r['latency_ms'])} req {r['requests']}" for r in rows[-len(upids):]),
                    file=sys.stderr)
            finally:
                if proxy:
                    proxy.stop()
                sim.stop()
    return rows


def net_experiment(have_peer, args):
    """The network grid: long imports in the background (one per client, real time: the wait's
    behaviour depends on the wall-clock length, so they are not time-scaled), tasks without
    progress in every cell, 30 s imports (with pve-sim's own finishing phase) in the cells of
    --net-import-costs."""
    long_rows = []

    def long_import(spec):
        copy_s, rest = spec.split("@")
        rtt, cost = (int(x) for x in rest.split(":"))
        for r in net_imports_experiment(have_peer, costs=(cost,), parallel=1, copy_s=int(copy_s),
                                        rtts=[rtt], tag=f"-long{copy_s}"):
            r["label"] = f"imports, {int(copy_s) // 60} min copy"
            long_rows.append(r)

    specs = list(filter(None, args.net_long.split(",")))
    background = threading.Thread(target=lambda: in_parallel([lambda s=s: long_import(s) for s in specs]))
    background.start()
    rtts = [int(x) for x in args.net_rtts.split(",") if x]
    rows = net_tasks_experiment(have_peer, per_cell=args.net_runs, rtts=rtts,
                                costs=[int(x) for x in args.net_costs.split(",") if x])
    costs = [int(c) for c in args.net_import_costs.split(",") if c]
    for r in net_imports_experiment(have_peer, costs=costs, parallel=5, copy_s=30, rtts=rtts):
        r["label"] = "imports, 30 s copy"
        rows.append(r)
    background.join()
    return rows + long_rows


def storage_bytes(sim, sid="local-lvm"):
    """Bytes the storage's files really take on disk (allocated blocks, not sizes)."""
    total = 0
    for root, _, files in os.walk(os.path.join(sim.dir, "data", "nodes", "pve1", sid)):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def clones_experiment(n=10):
    """n VMs from one cloud image: each importing the image (a playbook loop of creates), or
    the image imported once into a template and n linked clones of it, each with its own
    cloud-init and a grown disk. Wall time, API requests and storage used, on one pve-sim each
    (import rate IMPORT_RATE_MB MiB/s, the 200 MiB / 1 GiB image of the wait experiments)."""
    img = make_image(200, 1024)
    vol = f"local:import/{os.path.basename(img)}"
    rows = []
    for how in ("imports", "clones"):
        sim = Sim(f"clones-{how}", ["--seed-image", img, "--import-rate", f"{IMPORT_RATE_MB}M"])
        try:
            before = len(sim.requests())
            t = time.monotonic()
            ok = 0
            if how == "clones":
                r = ours(sim, {"node": "pve1", "vmid": 9000, "name": "tpl", "template": True, "timeout": "30m",
                               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": vol}],
                               "ciuser": "ubuntu"})
                assert not r.get("failed"), r
            for i in range(n):
                spec = {"node": "pve1", "vmid": 300 + i, "name": f"vm{i}", "timeout": "30m", "ciuser": "ubuntu",
                        "ipconfig": [{"ip": f"192.0.2.{10 + i}/24", "gw": "192.0.2.1"}]}
                if how == "clones":
                    spec.update({"clone": {"vmid": 9000}, "disks": [{"slot": "scsi0", "size": "2G"}]})
                else:
                    spec["disks"] = [{"slot": "scsi0", "storage": "local-lvm", "import_from": vol, "size": "2G"}]
                r = ours(sim, spec)
                ok += not r.get("failed")
            wall = time.monotonic() - t
            rows.append({"how": how, "n": n, "ok": ok, "wall_s": wall, "requests": len(sim.requests()) - before,
                         "storage_mib": storage_bytes(sim) / 2**20})
        finally:
            sim.stop()
    return rows


def noop_experiment(have_peer, runs):
    sim = Sim("noop", [])
    res = {}
    try:
        spec = {"node": "pve1", "vmid": 100, "name": "noop", "cores": 2, "memory": 1024}
        assert not ours(sim, spec).get("failed")
        walls, rss, reqs = [], [], []
        args = {"api_host": "127.0.0.1", "api_port": sim.port, "api_password": PASSWORD,
                "api_fingerprint": sim.info["fingerprint"], **spec}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(args, f)
        for _ in range(runs):
            t = time.monotonic()
            out = subprocess.run(["/usr/bin/time", "-f", "%M", VM_BIN, f.name], capture_output=True, text=True)
            walls.append(time.monotonic() - t)
            rss.append(int(out.stderr.strip().splitlines()[-1]))
            reqs.append(json.loads(out.stdout)["api_requests"])
        os.unlink(f.name)
        res["ours_process"] = (statistics.median(walls) * 1000, max(rss) / 1024, statistics.median(reqs))
        env = dict(os.environ, ANSIBLE_HOME=os.path.join(ROOT, ".work", "ansible-home"),
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".work", "collections"), ANSIBLE_NOCOLOR="1")
        walls = []
        for _ in range(max(3, runs // 4)):
            t = time.monotonic()
            subprocess.run([OURS_ANSIBLE, "localhost", "-m", "sankofa.proxmox.vm", "-a", json.dumps(args), "-o"],
                           capture_output=True, env=env, check=True, stdin=subprocess.DEVNULL)
            walls.append(time.monotonic() - t)
        res["ours_ansible"] = statistics.median(walls) * 1000
        if have_peer:
            before = len(sim.requests())
            r, _ = peer(sim, "proxmox_kvm", {"node": "pve1", "vmid": 100, "name": "noop", "cores": 2, "memory": 1024,
                                             "state": "present"}, keep=True)
            peer_reqs = len(sim.requests()) - before
            walls = []
            for _ in range(max(3, runs // 4)):
                _, w = peer(sim, "proxmox_kvm", {"node": "pve1", "vmid": 100, "state": "present"})
                walls.append(w)
            res["peer_ansible"] = statistics.median(walls) * 1000
            # The module process alone: the kept AnsiballZ payload, run directly.
            payloads = sorted(glob.glob(os.path.join(WORK, "peer-remote-tmp", "*", "AnsiballZ_proxmox_kvm.py")), key=os.path.getmtime)
            if payloads:
                pw, prss = [], []
                for _ in range(runs):
                    t = time.monotonic()
                    out = subprocess.run(["/usr/bin/time", "-f", "%M", os.path.join(PEER_BIN, "python"), payloads[-1]],
                                         capture_output=True, text=True)
                    pw.append(time.monotonic() - t)
                    prss.append(int(out.stderr.strip().splitlines()[-1]))
                res["peer_process"] = (statistics.median(pw) * 1000, max(prss) / 1024, peer_reqs)
            res["peer_result"] = r.get("msg")
    finally:
        sim.stop()
    return res


E2E_IMAGES = [(50, 512), (300, 2048), (660, 2560)]
E2E_RATE_MB = 48


def e2e_experiment(have_peer):
    """A playbook that creates a VM from a cloud image, on storage that imports at
    E2E_RATE_MB MiB/s (of virtual size): ours in one task, the peer's in two (create the VM,
    then import the disk, as community.proxmox documents it)."""
    images = [make_image(mb, vmb) for mb, vmb in E2E_IMAGES]
    seeds = [a for img in images for a in ("--seed-image", img)]
    rows = []
    for who in ("ours", "peer") if have_peer else ("ours",):
        sim = Sim(f"e2e-{who}", seeds + ["--import-rate", f"{E2E_RATE_MB}M"])
        try:
            conn = {"api_host": "127.0.0.1", "api_port": sim.port, "api_password": PASSWORD}
            for i, ((mb, vmb), img) in enumerate(zip(E2E_IMAGES, images)):
                vmid = 200 + i
                vol = f"local:import/{os.path.basename(img)}"
                if who == "ours":
                    tasks = [{"name": "create from the image", "sankofa.proxmox.vm": {
                        **conn, "api_fingerprint": sim.info["fingerprint"], "node": "pve1", "vmid": vmid,
                        "name": f"e2e{mb}", "cores": 2, "memory": 2048, "timeout": "30m",
                        "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": vol}]}}]
                    bin_dir = os.path.join(ROOT, ".venv", "bin")
                    env = dict(os.environ, ANSIBLE_HOME=os.path.join(ROOT, ".work", "ansible-home"),
                               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".work", "collections"))
                else:
                    pc = {**conn, "api_user": "root@pam", "validate_certs": False}
                    tasks = [{"name": "create the VM", "community.proxmox.proxmox_kvm": {
                                 **pc, "node": "pve1", "vmid": vmid, "name": f"e2e{mb}", "cores": 2, "memory": 2048,
                                 "state": "present", "timeout": 1800}},
                             {"name": "import the image", "community.proxmox.proxmox_disk": {
                                 **pc, "vmid": vmid, "disk": "scsi0", "storage": "local-lvm", "import_from": vol,
                                 "timeout": 1800}}]
                    bin_dir = PEER_BIN
                    env = peer_env()
                play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
                         "vars": {"ansible_python_interpreter": os.path.join(bin_dir, "python")}, "tasks": tasks}]
                pb = os.path.join(sim.dir, f"play-{mb}.yml")
                with open(pb, "w") as f:
                    json.dump(play, f)
                before = len(sim.requests())
                t = time.monotonic()
                p = subprocess.run([os.path.join(bin_dir, "ansible-playbook"), "-i", "localhost,", pb],
                                   capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
                wall = time.monotonic() - t
                done = time.time()
                reqs = sim.requests()[before:]
                # The import is the longest of the VM's create/config tasks.
                imp = [x for x in sim.tasks() if x["id"] == str(vmid) and x["type"] in ("qmcreate", "qmconfig")
                       and x["end"] is not None]
                imp_task = max(imp, key=lambda x: x["end"] - x["start"]) if imp else None
                conf = api_get(sim, f"/nodes/pve1/qemu/{vmid}/config")
                ok = p.returncode == 0 and conf is not None and "scsi0" in conf
                status = sum(1 for r in reqs if r["path"].endswith("/status") and "/tasks/" in r["path"])
                rows.append({"who": who, "mb": mb, "ok": ok, "wall_s": wall,
                             "import_s": (imp_task["end"] - imp_task["start"]) if imp_task else float("nan"),
                             "after_import_s": (done - imp_task["end"]) if imp_task else float("nan"),
                             "requests": len(reqs), "status_requests": status,
                             "error": "" if ok else (p.stdout + p.stderr)[-400:]})
                if not ok:
                    print(f"e2e {who} {mb} MB failed:", rows[-1]["error"], file=sys.stderr)
        finally:
            sim.stop()
    return rows


def api_get(sim, path):
    """GET on pve-sim's API as root@pam (a ticket), trusting its CA; the `data`, or None."""
    import ssl
    import urllib.parse
    import urllib.request
    ctx = ssl.create_default_context(cafile=sim.info["ca"])
    base = f"https://127.0.0.1:{sim.port}/api2/json"
    try:
        body = urllib.parse.urlencode({"username": "root@pam", "password": PASSWORD}).encode()
        with urllib.request.urlopen(base + "/access/ticket", data=body, context=ctx) as r:
            ticket = json.load(r)["data"]["ticket"]
        req = urllib.request.Request(base + path, headers={"Cookie": f"PVEAuthCookie={ticket}"})
        with urllib.request.urlopen(req, context=ctx) as r:
            return json.load(r)["data"]
    except OSError:
        return None


def scale_experiment(n, have_peer):
    out = {}
    for who in ("ours", "peer") if have_peer else ("ours",):
        sim = Sim(f"scale-{who}", ["--nodes", "pve1,pve2,pve3", "--time-scale", "0.5"])
        try:
            inv = os.path.join(sim.dir, "inventory.ini")
            with open(inv, "w") as f:
                f.write("[vms]\n" + "".join(f"vm{i} node=pve{i % 3 + 1}\n" for i in range(n)))
            conn = {"api_host": "127.0.0.1", "api_port": sim.port, "api_password": PASSWORD}
            if who == "ours":
                task = {"sankofa.proxmox.vm": {**conn, "api_fingerprint": sim.info["fingerprint"], "node": "{{ node }}",
                                                "name": "{{ inventory_hostname }}", "cores": 1}}
                bin_dir = os.path.join(ROOT, ".venv", "bin")
                env = dict(os.environ, ANSIBLE_HOME=os.path.join(ROOT, ".work", "ansible-home"),
                           ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".work", "collections"))
            else:
                task = {"community.proxmox.proxmox_kvm": {**conn, "api_user": "root@pam", "validate_certs": False,
                                                          "node": "{{ node }}", "name": "{{ inventory_hostname }}", "cores": 1}}
                bin_dir = PEER_BIN
                env = peer_env()
            env["ANSIBLE_HOST_KEY_CHECKING"] = "False"
            play = [{"hosts": "vms", "connection": "local", "gather_facts": False,
                     "vars": {"ansible_python_interpreter": os.path.join(bin_dir, "python")},
                     "tasks": [dict(name="create", ignore_errors=True, **task)]}]
            pb = os.path.join(sim.dir, "play.yml")
            with open(pb, "w") as f:
                json.dump(play, f)
            t = time.monotonic()
            p = subprocess.run([os.path.join(bin_dir, "ansible-playbook"), "-i", inv, "-f", str(n), pb],
                               capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
            wall = time.monotonic() - t
            failed = sum(1 for line in p.stdout.splitlines() if line.startswith("fatal:") or "FAILED!" in line)
            reqs = sim.requests()
            ids = [r["params"].get("vmid") for r in reqs if r["method"] == "POST" and r["path"].endswith("/qemu") and r["status"] == 200]
            created = len(set(ids))
            names_ok = sum(1 for line in p.stdout.splitlines() if line.startswith("changed:") or line.startswith("ok:"))
            out[who] = {"hosts": n, "ok": names_ok, "failed": failed, "vms": created, "duplicates": len(ids) - len(set(ids)),
                        "wall_s": wall, "requests": len(reqs)}
        finally:
            sim.stop()
    return out


def pct_pair(xs):
    """p50 / p95 in ms (p95 only from 10 samples or more)."""
    if not xs:
        return "-"
    if len(xs) >= 10:
        return f"{percentile(xs, 50):.0f} / {percentile(xs, 95):.0f}"
    return f"{statistics.median(xs):.0f} / (max {max(xs):.0f}, n={len(xs)})"


def net_report(net):
    """The network grid: per cell, ours against the peer and the targets."""
    out = ["", "### The wait over a network: round trips and server costs", "",
           "Round trip: bench/delay_proxy.py in front of pve-sim (half each way). Server cost: pve-sim's "
           "`--request-cost` (its worker spends that long on every request before it answers). End noticed: from the task's end "
           "(pve-sim's task log) to the client holding the answer that said so (pve-sim's answer time plus half a "
           "round trip). Targets: p50 ≤ 100 ms + one round trip, p95 ≤ 300 ms + one round trip, never later than "
           "the peer (p50, p95); imports: no more task requests than the peer.", "",
           "| tasks | round trip ms | server cost ms | ours: end noticed p50 / p95 ms | peer: p50 / p95 ms | "
           "ours: task requests (median, max) | peer: task requests (median, max) | targets |",
           "|---|---|---|---|---|---|---|---|"]
    cells = {}
    for r in net:
        cells.setdefault((r["kind"], r.get("label", ""), r["rtt"], r["cost"]), {})[r["who"]] = r
    for (kind, label, rtt, cost), by in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
        o, p = by.get("ours"), by.get("peer")
        name = label or ("without progress (2 s ±30 %)" if kind == "tasks" else "imports")
        req = lambda r: f"{statistics.median(r['requests']):.0f}, {max(r['requests'])}" if r and r["requests"] else "-"
        verdict = "-"
        if o and o["latency_ms"]:
            lat = o["latency_ms"]
            ok = statistics.median(lat) <= 100 + rtt
            if len(lat) >= 10:
                ok = ok and percentile(lat, 95) <= 300 + rtt
            if p and p["latency_ms"]:
                ok = ok and statistics.median(lat) <= statistics.median(p["latency_ms"])
                if len(lat) >= 10 and len(p["latency_ms"]) >= 10:
                    ok = ok and percentile(lat, 95) <= percentile(p["latency_ms"], 95)
                if kind == "imports" and p["requests"]:
                    ok = ok and max(o["requests"]) <= min(p["requests"])
            verdict = "met" if ok else "**not met**"
        out.append(f"| {name} | {rtt} | {cost} | {pct_pair(o['latency_ms']) if o else '-'} | "
                   f"{pct_pair(p['latency_ms']) if p else '-'} | {req(o)} | {req(p)} | {verdict} |")
    return out


def run_line():
    """What this run was: its command, when, on what, from which commit, how loaded the host was."""
    return (f"`bench/run.sh{''.join(' ' + a for a in sys.argv[1:])}` on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, commit {COMMIT}; host load "
            f"average (1 min) during the run: {LOAD.summary() if LOAD else 'not sampled'}")


def write_report(args, lat, imports, noop, e2e, scale, path, waits=(), load=(), clones=(), net=(), runs=None,
                 fleet=None):
    size = {b: os.path.getsize(os.path.join(BIN_DIR, b)) for b in ("vm", "image", "pve-sim")
            if os.path.exists(os.path.join(BIN_DIR, b))}
    lines = [
        "# Benchmark results",
        "",
        *(f"Run: {r}." for r in (runs or [run_line()])),
        "Against pve-sim (release build), both clients on the same simulator in the same run.",
        "Peer: `ansible` 14.5.0 from PyPI (community.proxmox `proxmox_kvm`, `proxmox_disk`) with proxmoxer 2.3.0.",
    ]
    if lat:
        lines += [
            "",
            "## 1–2. End-detection latency and status requests per task (qmstart of the given length)",
            "",
            "Latency: from the task's end in pve-sim's task log to the first status request that saw it stopped.",
            "Task lengths vary by ±30% around the nominal one (`--task-jitter 0.3`).",
            "",
            "| task length | client | tasks | p50 ms | p95 ms | max ms | status requests per task |",
            "|---|---|---|---|---|---|---|",
        ]
    for d, who, n, p50, p95, mx, polls in lat:
        lines.append(f"| {d} s | {who} | {n} | {p50:.0f} | {p95:.0f} | {mx:.0f} | {polls:.1f} |")
    if imports:
        lines += ["", "### Long imports (progress in the task log), ours", "",
                  "| import length | end noticed ms | task requests (status and log) | API requests in the run |", "|---|---|---|---|"]
        for secs, lat_ms, polls, reqs in imports:
            lines.append(f"| {secs} s | {lat_ms:.0f} | {polls} | {reqs} |")
    if waits:
        lines += ["", f"### The import wait, ours against the peer ({IMPORT_RATE_MB} MiB/s, a 1 GiB disk with {WAIT_IMAGE_MB} MiB of data)", "",
                  "The peer: `proxmox_kvm` creating the VM with `scsi0: local-lvm:0,import-from=…` in one task "
                  "(its best one-task create), waiting on the create task. Both clients on the same pve-sim per "
                  "scenario, interleaved run by run. Latency: from the task's end (pve-sim's task log) to the first "
                  "answer about the task after it (a status, or a log read, which then holds PVE's last line). "
                  "Requests: every request about the task, status and log.", "",
                  "| scenario | client | runs | task s (median) | end noticed, ms | task requests (median, max) |",
                  "|---|---|---|---|---|---|"]
        for w in waits:
            name = "sankofa.proxmox.vm" if w["who"] == "ours" else "proxmox_kvm (one task)"
            lines.append(f"| {w['scenario']} | {name} | {w['n']} | {w['task_s']:.1f} | {stats(w['latency_ms'])} | "
                         f"{statistics.median(w['requests']):.0f}, {max(w['requests'])} |")
    if load:
        lines += ["", "### Load: 20 modules waiting at once, task requests costing 20 ms each", "",
                  "20 `state: started` runs at once on 40 s qmstart tasks (no progress), on a pve-sim whose task "
                  "requests (status and log) take 20 ms in one of its 3 workers. Measured while all 20 wait: task "
                  "requests per second at the server, and an unrelated client's `GET /version` every 100 ms. "
                  "End noticed: from each task's end to the first answer about it.", "",
                  "| client | window s | task requests/s | GET /version, ms | end noticed, ms |",
                  "|---|---|---|---|---|"]
        for r in load:
            name = "sankofa.proxmox.vm" if r["who"] == "ours" else "proxmox_kvm"
            lines.append(f"| {name} | {r['window_s']:.0f} | {r['rps']:.1f} | {stats(r['version_ms'])} | "
                         f"{stats(r['late_ms'])} |")
    if net:
        lines += net_report(net)
    if clones:
        lines += ["", f"### Ten VMs from one image: each importing it, or linked clones of a template ({IMPORT_RATE_MB} MiB/s)", "",
                  "Ours, one run after the other. `imports`: each VM imports the 200 MiB / 1 GiB image and grows its disk "
                  "to 2 GiB. `clones`: the image imported once into a template, then each VM a linked clone with its own "
                  "cloud-init and a disk grown to 2 GiB. Storage: what `local-lvm`'s files take on disk.", "",
                  "| how | VMs | succeeded | wall s | API requests | storage used, MiB |", "|---|---|---|---|---|---|"]
        for r in clones:
            lines.append(f"| {r['how']} | {r['n']} | {r['ok']} | {r['wall_s']:.1f} | {r['requests']} | {r['storage_mib']:.0f} |")
    if noop:
        lines += ["", "## 3. A no-op call (VM exists, nothing to change)", "",
                  "| client | module process wall ms (median) | module peak RSS MiB | API requests | whole `ansible localhost -m` ms (median) |",
                  "|---|---|---|---|---|"]
    o = noop.get("ours_process")
    if o:
        lines.append(f"| sankofa.proxmox.vm | {o[0]:.1f} | {o[1]:.1f} | {o[2]:.0f} | {noop.get('ours_ansible', float('nan')):.0f} |")
    p = noop.get("peer_process")
    if p:
        lines.append(f"| community.proxmox.proxmox_kvm | {p[0]:.1f} | {p[1]:.1f} | {p[2]} | {noop.get('peer_ansible', float('nan')):.0f} |")
        lines += ["", f"Ratios: wall time {p[0] / o[0]:.1f}× lower, peak RSS {p[1] / o[1]:.1f}× lower for ours."]
    if e2e:
        lines += ["", f"## 4. End to end: a playbook creates a VM from a cloud image ({E2E_RATE_MB} MiB/s storage)", "",
                  "Ours: one `sankofa.proxmox.vm` task. Peer: `proxmox_kvm` (create) then `proxmox_disk` (`import_from`).",
                  "`after import` is the time from the import task's end (pve-sim's log) to the end of the playbook.", "",
                  "| image | client | succeeded | playbook wall s | import task s | after import s | API requests | status requests |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in e2e:
            name = "sankofa.proxmox.vm" if r["who"] == "ours" else "proxmox_kvm + proxmox_disk"
            lines.append(f"| {r['mb']} MB | {name} | {'yes' if r['ok'] else 'no'} | {r['wall_s']:.1f} | {r['import_s']:.1f} | "
                         f"{r['after_import_s']:.2f} | {r['requests']} | {r['status_requests']} |")
    if scale:
        lines += ["", "## 5. Parallel creates with automatic ids (3-node pve-sim, one fork per VM)", "",
                  "| client | VMs asked | succeeded | failed | VMs created | duplicate ids | wall s | API requests |", "|---|---|---|---|---|---|---|---|"]
    for who, s in scale.items():
        name = "sankofa.proxmox.vm" if who == "ours" else "community.proxmox.proxmox_kvm"
        lines.append(f"| {name} | {s['hosts']} | {s['ok']} | {s['failed']} | {s['vms']} | {s['duplicates']} | {s['wall_s']:.1f} | {s['requests']} |")
    if fleet:
        import fleet as fleet_bench
        lines += fleet_bench.report_lines(fleet)
    lines += ["", "## 6. Release binaries", "", "| binary | bytes |", "|---|---|"]
    for b, n in size.items():
        lines.append(f"| {b} | {n} |")
    lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def combine(args, names):
    """latest.md and the plots from partial runs made from one commit (the full run's report,
    assembled when one run does not fit in the time there is)."""
    parts = []
    for name in names:
        with open(os.path.join(WORK, f"{name}.json")) as f:
            parts.append(json.load(f))
    # Parts of different commits may be combined only when what they measure is the same: the
    # modules, pve-sim and the lock file (the benchmark's own scripts may differ).
    commits = sorted({p["commit"] for p in parts})
    for other in commits[1:]:
        same = subprocess.run(["git", "diff", "--quiet", commits[0], other, "--", "src", "pve", "sim", "Cargo.lock",
                               "Cargo.toml"], cwd=ROOT).returncode == 0
        if not same:
            sys.exit(f"--combine: commits {commits[0]} and {other} differ in the code measured")
    merged = {}
    for p in parts:
        for key, value in p.items():
            if value and not merged.get(key):
                merged[key] = value
    # The network grid by cell: a later part's cell (a re-run of some cells) replaces the
    # earlier part's rows of that cell, its other cells kept.
    cell = lambda r: (r["kind"], r.get("label", ""), r["rtt"], r["cost"])
    net = []
    for p in parts:
        redone = {cell(r) for r in p.get("net") or []}
        net = [r for r in net if cell(r) not in redone] + list(p.get("net") or [])
    merged["net"] = net
    out = os.path.join(ROOT, "bench", "results")
    write_report(args, merged.get("latency", []), merged.get("imports", []), merged.get("noop", {}),
                 merged.get("e2e", []), merged.get("scale", {}), os.path.join(out, "latest.md"),
                 merged.get("waits", []), merged.get("load", []), merged.get("clones", []), merged.get("net", []),
                 runs=[p["run"] for p in parts], fleet=merged.get("fleet"))
    plot_figures(merged.get("latency", []), merged.get("imports", []), merged.get("e2e", []), out)


def plot_figures(lat, imports, e2e, out):
    with open(os.path.join(WORK, "results.json"), "w") as f:
        json.dump({"latency": lat, "imports": imports, "e2e": e2e}, f)
    plot = os.path.join(WORK, "plot-venv", "bin", "python")
    if os.path.exists(plot):
        subprocess.run([plot, os.path.join(ROOT, "bench", "plot.py"), os.path.join(WORK, "results.json"), out], check=True)


class LoadWatch:
    """The host's 1-minute load average, sampled every 10 s while the run lasts (the machine is
    shared: the figures say how busy it was)."""

    def __init__(self):
        self.samples = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self.stop.wait(10)

    def summary(self):
        if not self.samples:
            return "not sampled"
        xs = sorted(self.samples)
        return f"min {xs[0]:.1f}, median {statistics.median(xs):.1f}, max {xs[-1]:.1f} ({len(xs)} samples)"


LOAD = None


def main():
    global LOAD
    LOAD = LoadWatch()
    import fleet as fleet_bench
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="also 2- and 5-minute tasks and imports")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--only", default="latency,imports,waits,net,load,clones,noop,e2e,scale,fleet,inventory,snapshots",
                    help="comma-separated experiments to run (default: all)")
    ap.add_argument("--wait-runs", type=int, default=10, help="runs per client and import scenario")
    ap.add_argument("--wait-runs-others", type=int, default=None,
                    help="runs per client for the scenarios other than steady (default: --wait-runs)")
    ap.add_argument("--latency-runs", type=int, default=20, help="tasks per length and client")
    ap.add_argument("--latency-lengths", default="", help="comma-separated task lengths in s (default: 0.2,1,5,30)")
    ap.add_argument("--report", default="", help="the report's file name under bench/results (default: by what ran)")
    ap.add_argument("--net-runs", type=int, default=10, help="tasks per client and grid cell (net)")
    ap.add_argument("--net-rtts", default="0,10,40,100", help="round trips (ms) of the grid (net)")
    ap.add_argument("--net-costs", default="1,2,3,4,5", help="server costs (ms) of the task cells (net)")
    ap.add_argument("--net-import-costs", default="1,5", help="server costs (ms) of the import cells (net)")
    ap.add_argument("--net-long", default="120@40:3,600@100:5",
                    help="long imports (net), COPY_S@RTT_MS:COST_MS, one per client, run beside the grid")
    ap.add_argument("--wait-scenarios", default="",
                    help="comma-separated scenario names to run (default: all), e.g. steady,stalls")
    ap.add_argument("--combine", default="",
                    help="write latest.md and the plots from the figures of partial runs of one commit "
                         "(comma-separated report names, .work/bench/NAME.json), running nothing")
    fleet_bench.add_arguments(ap)
    args = ap.parse_args()
    if args.combine:
        combine(args, args.combine.split(","))
        return
    only = set(args.only.split(","))
    have_peer = not args.no_peer and os.path.exists(os.path.join(PEER_BIN, "ansible"))
    # The inventory and snapshot experiments are scripts of their own, with their own
    # reports (bench/results/inventory.md, snapshots.md).
    for script, no_peer in (("inventory", "--skip-peer"), ("snapshots", "--no-peer")):
        if script in only:
            subprocess.run([sys.executable, os.path.join(ROOT, "bench", f"{script}.py")]
                           + ([] if have_peer else [no_peer]), check=False)
    only -= {"inventory", "snapshots"}
    if not only:
        return
    durations = ([float(x) for x in args.latency_lengths.split(",")] if args.latency_lengths
                 else [0.2, 1, 5, 30]) + ([120, 300] if args.full else [])
    def guarded(name, run, empty):
        """Runs one experiment; one that fails is reported and leaves its rows out, not the run."""
        if name not in only:
            return empty
        try:
            return run()
        except Exception:
            import traceback
            traceback.print_exc()
            print(f"bench: the {name} experiment failed; its rows are missing from the report", file=sys.stderr)
            return empty

    lat = guarded("latency", lambda: latency_experiment(durations, runs=args.latency_runs, have_peer=have_peer), [])
    imports = guarded("imports", lambda: import_experiment([1] + ([2, 5] if args.full else [])), [])
    picked = [sc for sc in WAIT_SCENARIOS
              if not args.wait_scenarios or sc[0].split()[0] in args.wait_scenarios.split(",")]
    waits = guarded("waits", lambda: waits_experiment(have_peer, args.wait_runs, picked, args.wait_runs_others), [])
    net = guarded("net", lambda: net_experiment(have_peer, args), [])
    load = guarded("load", lambda: load_experiment(have_peer), [])
    clones = guarded("clones", clones_experiment, [])
    noop = guarded("noop", lambda: noop_experiment(have_peer, runs=20), {})
    e2e = guarded("e2e", lambda: e2e_experiment(have_peer), [])
    scale = guarded("scale", lambda: scale_experiment(50, have_peer), {})
    fleet = guarded("fleet", lambda: fleet_bench.experiment(args, have_peer), None)
    out = os.path.join(ROOT, "bench", "results")
    os.makedirs(out, exist_ok=True)
    everything = set(ap.get_default("only").split(",")) - {"inventory", "snapshots"}
    # Every figure of the run, for tables made from it (the README's): .work/bench/<report>.json.
    name = "latest" if only == everything else (
        args.report or ("waits" if only <= {"waits", "load"} else "-".join(sorted(only))))
    with open(os.path.join(WORK, f"{name}.json"), "w") as f:
        json.dump({"commit": COMMIT, "run": run_line(), "latency": lat, "imports": imports, "waits": waits, "net": net, "load": load,
                   "clones": clones, "noop": noop, "e2e": e2e, "scale": scale, "fleet": fleet}, f)
    if only != everything:
        # A partial run keeps the full report and writes its own: waits.md for the wait
        # experiments, else one named after what ran (noop-latency.md, …).
        write_report(args, lat, imports, noop, e2e, scale, os.path.join(out, f"{name}.md"), waits, load, clones,
                     net, fleet=fleet)
        return
    write_report(args, lat, imports, noop, e2e, scale, os.path.join(out, "latest.md"), waits, load, clones, net,
                 fleet=fleet)
    plot_figures(lat, imports, e2e, out)


if __name__ == "__main__":
    main()
