#!/usr/bin/env python3
"""Snapshot waits (issue 27's target "snapshot create and rollback noticed within the wait's
usual latency"): end noticed for `sankofa.proxmox.snapshot` create (`qmsnapshot`) and rollback
(`qmrollback`), against community.proxmox's `proxmox_snap` on the same pve-sim, and, as the
wait's usual latency, our `vm` module's start (`qmstart`) of the same length.

End noticed: from the task's end in pve-sim's task log to the first answer about it after
that end (bench.py's `noticed`); task requests: every status and log read of the task.
Runs interleaved (ours, peer, ours, …), each task its own VM's (a 1 GiB LVM-thin disk),
task lengths ±30% around the nominal one.
Writes bench/results/snapshots.md; `--runs N` per client, operation and length,
`--lengths` task lengths in s. Run after `make build`, with the venvs bench/run.sh sets up
(`bench/run.sh --only snapshots` calls this file)."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the shared helpers: Sim, peer, noticed, stats)

SNAPSHOT_BIN = os.path.join(bench.ROOT, "target", "release", "snapshot")
REPORT = os.path.join(bench.ROOT, "bench", "results", "snapshots.md")


def ours_snapshot(sim, args):
    """Runs our snapshot module binary as Ansible does (an args file); returns the result."""
    base = {"api_host": "127.0.0.1", "api_port": sim.client_port, "api_password": bench.PASSWORD,
            "api_fingerprint": sim.info["fingerprint"]}
    base.update(args)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(base, f)
    try:
        out = subprocess.run([SNAPSHOT_BIN, f.name], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        return json.loads(out.stdout)
    finally:
        os.unlink(f.name)


def new_task(sim, before, ttype):
    return next((t for t in sim.tasks() if t["upid"] not in before and t["type"] == ttype), None)


def experiment(lengths, runs, have_peer):
    """Rows: (length, operation, client, [(latency ms, task requests)])."""
    rows = []
    for length in lengths:
        # ±30% jitter, as bench.py's latency experiment: real task lengths do not line up
        # with a client's fixed poll interval (the peer's 1 s).
        extra = ["--nodes", "pve1", "--task-jitter", "0.3"] + [
            f"--task-duration={t}={length}s" for t in ("qmsnapshot", "qmrollback", "qmstart")]
        sim = bench.Sim(f"snapshots-{length}", extra)
        got = {}
        try:
            for i in range(runs):
                for who in ("ours", "peer") if have_peer else ("ours",):
                    vmid = 400 + 2 * i + (who == "peer")
                    made = bench.ours(sim, {"node": "pve1", "vmid": vmid, "name": f"s{vmid}", "timeout": "5m",
                                            "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]})
                    if made.get("failed"):
                        sys.exit(f"making VM {vmid}: {made.get('msg')}")
                    for op, ttype in (("create", "qmsnapshot"), ("rollback", "qmrollback")):
                        before = {t["upid"] for t in sim.tasks()}
                        state = "present" if op == "create" else "rollback"
                        if who == "ours":
                            r = ours_snapshot(sim, {"node": "pve1", "vmid": vmid, "snapname": "b1", "state": state})
                        else:
                            r, _ = bench.peer(sim, "proxmox_snap", {"vmid": vmid, "snapname": "b1", "state": state,
                                                                    "timeout": 600})
                        task = new_task(sim, before, ttype)
                        if r.get("failed") or task is None:
                            print(f"snapshots {length}s {op} {who} run {i}: {r.get('msg')}", file=sys.stderr)
                            continue
                        m = bench.noticed(sim, task["upid"])
                        if m:
                            got.setdefault((op, who), []).append((m[0] * 1000, m[1]))
                    if who == "ours":
                        # The wait's usual latency: a start of the same length, by the vm module.
                        before = {t["upid"] for t in sim.tasks()}
                        r = bench.ours(sim, {"node": "pve1", "vmid": vmid, "state": "started", "timeout": "5m"})
                        task = new_task(sim, before, "qmstart")
                        m = task and not r.get("failed") and bench.noticed(sim, task["upid"])
                        if m:
                            got.setdefault(("start (vm)", who), []).append((m[0] * 1000, m[1]))
        finally:
            sim.stop()
        for (op, who), ms in sorted(got.items()):
            rows.append((length, op, who, ms))
    return rows


def write_report(rows, runs, load_before, load_after):
    def fmt_load(avg):
        return " / ".join(f"{x:.2f}" for x in avg)

    names = {"ours": "sankofa.proxmox", "peer": "community.proxmox `proxmox_snap`"}
    lines = ["# Snapshot create and rollback: end noticed", "",
             f"Commit `{bench.COMMIT}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; host load average "
             f"(1/5/15 min) {fmt_load(load_before)} before, {fmt_load(load_after)} after; {os.cpu_count()} CPUs. "
             f"`bench/snapshots.py`, {runs} runs per row asked for (n: the tasks measured). End noticed: from the "
             "task's end in pve-sim's task log to the first answer about the task after it; "
             "`start (vm)` is the vm module's wait on a qmstart of the same length, the wait's usual latency. "
             "Task lengths vary by ±30% around the nominal one (`--task-jitter 0.3`).", "",
             "| task s | operation | client | n | end noticed ms | task requests (median, max) |",
             "|---|---|---|---|---|---|"]
    for length, op, who, ms in rows:
        lat = [x[0] for x in ms]
        reqs = sorted(x[1] for x in ms)
        lines.append(f"| {length:g} | {op} | {names[who]} | {len(ms)} | {bench.stats(lat)} | "
                     f"{reqs[len(reqs) // 2]}, {reqs[-1]} |")
    with open(REPORT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10, help="tasks per client, operation and length")
    ap.add_argument("--lengths", default="1,5", help="task lengths in s, comma-separated")
    ap.add_argument("--no-peer", action="store_true")
    a = ap.parse_args()
    have_peer = not a.no_peer and os.path.exists(os.path.join(bench.PEER_BIN, "ansible"))
    # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE, when set, override a session's
    # `verify = False` (psf/requests#3829), the peer's `validate_certs: false`; the peer's
    # environment (bench.peer_env, a copy of this one) goes without them.
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        os.environ.pop(name, None)
    load_before = os.getloadavg()
    rows = experiment([float(x) for x in a.lengths.split(",")], a.runs, have_peer)
    write_report(rows, a.runs, load_before, os.getloadavg())


if __name__ == "__main__":
    main()
