#!/usr/bin/env python3
"""Draws the plots of `make bench` from the numbers bench.py saved (results.json).

Usage: plot.py RESULTS_JSON OUT_DIR   (run with the plot venv's Python, which has matplotlib)
Writes latency.png, status-requests.png and e2e.png into OUT_DIR.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OURS = "sankofa.proxmox.vm"
COLORS = {OURS: "#1f77b4"}
PEER_COLOR = "#d62728"


def color(who):
    return COLORS.get(who, PEER_COLOR)


def by_client(rows):
    """(client, its rows sorted by task length) for latency rows (length, client, ...)."""
    for who in sorted({r[1] for r in rows}):
        yield who, sorted((r for r in rows if r[1] == who), key=lambda r: r[0])


def finish(fig, ax, path):
    """Legend, layout, write the PNG, free the figure."""
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency(rows, out):
    """p50 and p95 end-detection latency per task length, one line per client."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for who, mine in by_client(rows):
        xs = [r[0] for r in mine]
        ax.plot(xs, [r[3] for r in mine], "o-", color=color(who), label=f"{who} p50")
        ax.plot(xs, [r[4] for r in mine], "o--", color=color(who), alpha=0.6, label=f"{who} p95")
    ax.axhline(100, color="gray", lw=0.8, ls=":", label="target p50 (100 ms)")
    ax.set_xscale("log")
    ax.set_xlabel("task length (s)")
    ax.set_ylabel("end noticed after (ms)")
    ax.set_title("End-detection latency (lower is better)")
    finish(fig, ax, os.path.join(out, "latency.png"))


def status_requests(rows, imports, out):
    """Status requests per task against task length; imports (progress in the log) apart."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for who, mine in by_client(rows):
        ax.plot([r[0] for r in mine], [r[6] for r in mine], "o-", color=color(who), label=f"{who} (no progress in the log)")
    if imports:
        ax.plot([i[0] for i in imports], [i[2] for i in imports], "s", color=color(OURS), ms=9,
                label=f"{OURS}, imports (progress in the log)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("task length (s)")
    ax.set_ylabel("status requests per task")
    ax.set_title("Polling cost per task")
    finish(fig, ax, os.path.join(out, "status-requests.png"))


def e2e(rows, out):
    """Playbook wall time per image size, ours against the peer's two modules."""
    sizes = sorted({r["mb"] for r in rows})
    whos = sorted({r["who"] for r in rows}, key=lambda w: w != "ours")
    width = 0.8 / max(1, len(whos))
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, who in enumerate(whos):
        vals = [next((r["wall_s"] for r in rows if r["who"] == who and r["mb"] == mb), 0) for mb in sizes]
        name = OURS if who == "ours" else "proxmox_kvm + proxmox_disk"
        xs = [j + i * width for j in range(len(sizes))]
        ax.bar(xs, vals, width, color=COLORS.get(name, PEER_COLOR), label=name)
        for x, r in zip(xs, (next((r for r in rows if r["who"] == who and r["mb"] == mb), None) for mb in sizes)):
            if r is not None and not r["ok"]:
                ax.text(x, 0, "failed", ha="center", va="bottom", fontsize=8)
    ax.set_xticks([j + width * (len(whos) - 1) / 2 for j in range(len(sizes))])
    ax.set_xticklabels([f"{mb} MB image" for mb in sizes])
    ax.set_ylabel("playbook wall time (s)")
    ax.set_title("Create a VM from a cloud image, end to end")
    finish(fig, ax, os.path.join(out, "e2e.png"))


def main():
    with open(sys.argv[1]) as f:
        res = json.load(f)
    out = sys.argv[2]
    if res.get("latency"):
        latency(res["latency"], out)
        status_requests(res["latency"], res.get("imports", []), out)
    if res.get("e2e"):
        e2e(res["e2e"], out)


if __name__ == "__main__":
    main()
