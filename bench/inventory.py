#!/usr/bin/env python3
"""Inventory of 1,000 VMs on 3 nodes (issues 27 and 33): sankofa.proxmox.proxmox against
community.proxmox.proxmox, each through `ansible-inventory --list` on the same pve-sim, runs
interleaved: ours with its default options (the listings alone: name, node, status, pool, tags,
template; 1 + nodes requests), ours with `facts: [config, snapshots, agent]` and the peer with
`want_facts: true` (which reads each VM's config, status, snapshots and, where the agent is on,
its interfaces): the same groups and per-VM data.

pve-sim spends `--request-cost` (default 10 ms, about what PVE's Perl takes for a read) on
each request, holding one of its 3 workers as pveproxy's do.

A quarter of the VMs run (with the guest agent answering), a tenth have a snapshot, a fifth
are in a pool. Each run's wall time, its requests by kind and pve-sim's time per request come
from pve-sim's request log; the two inventories are compared host by host (node, status,
pool, snapshot names, agent addresses). Writes bench/results/inventory.md (the commit and the
host's load average with it); `--vms N` for another size, `--runs N` for more runs.

Run after `make build` (the release pve-sim and vm_info) and with the peer's venv that
bench/run.sh sets up (.work/bench/peer-venv); `--bin-dir target/debug` for a debug build."""

import argparse
import json
import os
import resource
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, ".work", "bench", "inventory")
PEER_BIN = os.path.join(ROOT, ".work", "bench", "peer-venv", "bin")
PASSWORD = "bench-password"
NODES = ["pve1", "pve2", "pve3"]
# pve-sim's certificate is made at its start; the set-up requests need no pinning.
INSECURE = ssl._create_unverified_context()
COMMIT = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                        cwd=ROOT).stdout.strip() or "unknown"


def start_sim(bin_dir, request_cost):
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    cmd = [os.path.join(bin_dir, "pve-sim"), "--data-dir", os.path.join(WORK, "data"),
           "--listen", "127.0.0.1:0", "--auth-failure-delay", "0s", "--user", f"root@pam:{PASSWORD}",
           "--nodes", ",".join(NODES), "--time-scale", "0.01", "--stats-interval", "0s", "--workers", "3",
           "--agent-delay", "0s", "--request-cost", request_cost]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    return proc, json.loads(proc.stdout.readline())


def api(info, method, path, form=None, ticket=None):
    """One request with urllib (independent of both clients)."""
    query = urllib.parse.urlencode(form or {})
    url = f"https://127.0.0.1:{info['port']}/api2/json{path}"
    if method == "GET" and query:
        url, query = url + "?" + query, ""
    req = urllib.request.Request(url, data=query.encode() or None, method=method)
    if ticket:
        req.add_header("Cookie", "PVEAuthCookie=" + urllib.parse.quote(ticket["ticket"]))
        req.add_header("CSRFPreventionToken", ticket["CSRFPreventionToken"])
    with urllib.request.urlopen(req, context=INSECURE, timeout=60) as answer:
        return json.loads(answer.read())["data"]


def wait_task(info, ticket, upid):
    node = upid.split(":")[1]
    deadline = time.time() + 120
    while time.time() < deadline:
        st = api(info, "GET", f"/nodes/{node}/tasks/{urllib.parse.quote(upid)}/status", ticket=ticket)
        if st["status"] == "stopped":
            if st.get("exitstatus") != "OK":
                sys.exit(f"{upid}: {st.get('exitstatus')}")
            return
        time.sleep(0.05)
    sys.exit(f"{upid} never ended")


def populate(info, count):
    """`count` VMs on the 3 nodes; every 4th started, every 10th with a snapshot, every 5th in
    a pool; all with the agent on."""
    ticket = api(info, "POST", "/access/ticket", {"username": "root@pam", "password": PASSWORD})
    for pool in ("web", "db"):
        api(info, "POST", "/pools", {"poolid": pool}, ticket)

    def make(ids):
        for vmid in ids:
            node = NODES[vmid % 3]
            form = {"vmid": vmid, "name": f"vm{vmid}", "memory": 512, "tags": "bench;" + ("web" if vmid % 2 else "db"),
                    "net0": "virtio,bridge=vmbr0", "agent": 1, "ipconfig0": f"ip=10.{vmid // 250}.{vmid % 250}.2/16"}
            if vmid % 5 == 0:
                form["pool"] = "web" if vmid % 2 else "db"
            wait_task(info, ticket, api(info, "POST", f"/nodes/{node}/qemu", form, ticket))
            if vmid % 10 == 0:
                wait_task(info, ticket, api(info, "POST", f"/nodes/{node}/qemu/{vmid}/snapshot",
                                            {"snapname": "before", "description": "bench"}, ticket))
            if vmid % 4 == 0:
                wait_task(info, ticket, api(info, "POST", f"/nodes/{node}/qemu/{vmid}/status/start", {}, ticket))

    ids = list(range(1000, 1000 + count))
    threads = [threading.Thread(target=make, args=(ids[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    listed = api(info, "GET", "/cluster/resources", {"type": "vm"}, ticket)
    if len([v for v in listed if "lock" not in v]) < count:
        sys.exit("the VMs were not all created")


def requests_between(start, end):
    """pve-sim's request log records between two instants."""
    out = []
    with open(os.path.join(WORK, "data", "requests.jsonl")) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if start <= r.get("ts", 0) <= end:
                out.append(r)
    return out


def kind(path):
    """A request's kind: its path with the node and vmid taken out."""
    parts = path.split("?")[0].strip("/").split("/")
    if len(parts) >= 2 and parts[0] == "nodes":
        parts[1] = "{node}"
    if len(parts) >= 4 and parts[2] == "qemu":
        parts[3] = "{vmid}"
    return "GET /" + "/".join(parts)


# What a play pays for its inventory before its first task: the parse, the play's hosts matched.
PLAYBOOK = "- hosts: all\n  gather_facts: false\n  tasks: []\n"


def run_inventory(ansible_inventory, config, env, mode):
    """One `ansible-inventory --list` (every host's vars printed), `--graph` (the groups only)
    or `playbook` (`ansible-playbook` of a play on all hosts with no task: the start every
    play pays). `config` is the plugin's configuration, or a host list given to `-i` as it is
    (no plugin: ansible-core's own start with those hosts)."""
    d = tempfile.mkdtemp(dir=WORK)
    path = os.path.join(d, "bench.proxmox.yml")
    if isinstance(config, str):
        path = config
    else:
        with open(path, "w") as f:
            json.dump(config, f)
    if mode == "playbook":
        play = os.path.join(d, "play.yml")
        with open(play, "w") as f:
            f.write(PLAYBOOK)
        cmd = [os.path.join(os.path.dirname(ansible_inventory), "ansible-playbook"), "-i", path, play]
    else:
        cmd = [ansible_inventory, mode, "-i", path]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    end = time.time()
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The CPU time of the command and of what it ran and waited for (vm_info too; not pve-sim).
    cpu = sum(getattr(cpu_after, k) - getattr(cpu_before, k) for k in ("ru_utime", "ru_stime"))
    if out.returncode != 0:
        reasons = [line for line in out.stderr.splitlines() if "Failed to parse" in line or "ERROR" in line]
        sys.exit(f"{ansible_inventory} failed: {(reasons or [out.stderr[-2000:]])[0]}")
    warnings = [line for line in out.stderr.splitlines() if "Could not gather" in line]
    if warnings:
        sys.exit(f"{ansible_inventory}: {len(warnings)} hosts without facts, first: {warnings[0]}")
    load = os.getloadavg()[0]
    time.sleep(0.2)  # pve-sim's last log lines
    reqs = requests_between(start, end)
    inventory = json.loads(out.stdout) if mode == "--list" and isinstance(config, dict) else None
    return {"wall_s": end - start, "cpu_s": cpu, "inventory": inventory, "requests": len(reqs), "load": load,
            "by_kind": count_kinds(reqs), "server_ms": [r.get("ms", 0) for r in reqs],
            "errors": sum(1 for r in reqs if r.get("status", 200) >= 400)}


def count_kinds(reqs):
    out = {}
    for r in reqs:
        k = kind(r["path"]) if r["method"] == "GET" else f"{r['method']} {r['path']}"
        out[k] = out.get(k, 0) + 1
    return out


def members(inv, group):
    """The hosts of a group in `ansible-inventory --list` output, children's included."""
    g = inv.get(group, {})
    hosts = set(g.get("hosts", []))
    for child in g.get("children", []):
        hosts |= members(inv, child)
    return hosts


def plain(value):
    """A value of `ansible-inventory --list` without Ansible's untrusted-string wrapping
    (`{"__ansible_unsafe": "…"}`)."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def facts_of(inv, who):
    """Per host: (node, status, pool, snapshot names, agent addresses), from either plugin."""
    out = {}
    pools = {}
    for group in inv:
        if group.startswith("proxmox_pool_"):
            for h in members(inv, group):
                pools[h] = group[len("proxmox_pool_"):]
    for host, hv in inv.get("_meta", {}).get("hostvars", {}).items():
        hv = plain(hv)
        if "proxmox_vmid" not in hv:
            continue  # the peer's node hosts
        if who == "ours":
            snaps = sorted(s["name"] for s in hv.get("proxmox_snapshots", []))
            addrs = sorted(hv.get("proxmox_agent_addresses") or [])
        else:
            snaps = sorted(hv.get("proxmox_snapshots", []))
            addrs = sorted(ip.split("/")[0] for iface in hv.get("proxmox_agent_interfaces", [])
                           if iface.get("name") != "lo" for ip in iface.get("ip-addresses", [])
                           if ip.split("/")[0] not in ("127.0.0.1", "::1"))
        out[host] = (hv.get("proxmox_node"), hv.get("proxmox_status"), pools.get(host), snaps, addrs)
    return out


def same_data(ours, theirs):
    """Hosts whose facts differ between the two inventories, and the first difference."""
    a, b = facts_of(ours, "ours"), facts_of(theirs, "peer")
    differ = [h for h in set(a) | set(b) if a.get(h) != b.get(h)]
    first = sorted(differ)[0] if differ else None
    return len(a), len(b), differ, (first, a.get(first), b.get(first)) if first else None


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_vm_info(bin_dir, info, parallel, facts=None):
    """The vm_info binary alone, as the plugin runs it: (wall s, VMs listed); `facts` as the
    plugin passes them (None: the module's default, every fact)."""
    args = {"api_host": "127.0.0.1", "api_port": info["port"], "api_password": PASSWORD,
            "api_fingerprint": info["fingerprint"], "parallel": parallel}
    if facts is not None:
        args["facts"] = facts
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir=WORK) as f:
        json.dump(args, f)
    start = time.time()
    out = subprocess.run([os.path.join(bin_dir, "vm_info"), f.name], capture_output=True, text=True)
    wall = time.time() - start
    os.unlink(f.name)
    result = json.loads(out.stdout)
    if result.get("failed"):
        sys.exit(f"vm_info failed: {result.get('msg')}")
    return wall, len(result["vms"])


# The plugin's parse in-process, in a fresh Python each run (its first parse, as a play's):
# what ansible-core's InventoryManager spends on the source, and within it the plugin's parse,
# its vm_info run and its adding of the hosts (`_populate`: ansible-core's add_host,
# set_variable and add_child, almost all of it). Less sensitive to the host's load than a
# whole command's wall time, which is mostly ansible-core's start.
PROFILE = r"""
import json, subprocess, sys, time
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader()
stages = {}
def timed(name, call):
    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            stages[name] = stages.get(name, 0) + time.perf_counter() - start
    return run
# From before the plugin's import, which sets up the collection loader (the baseline's
# InventoryManager does that itself).
start = time.perf_counter()
if sys.argv[1] != "localhost,":
    import importlib
    plugin = importlib.import_module("ansible_collections.sankofa.proxmox.plugins.inventory.proxmox").InventoryModule
    plugin.parse = timed("parse", plugin.parse)
    plugin._populate = timed("populate", plugin._populate)
    subprocess.run = timed("vm_info", subprocess.run)
InventoryManager(loader=DataLoader(), sources=[sys.argv[1]])
stages["manager"] = time.perf_counter() - start
print(json.dumps(stages))
"""


def profile_parse(config, env, runs):
    """Medians over `runs` fresh processes, in s: the InventoryManager's parse of the plugin's
    source and of `-i localhost,`, the plugin's parse, its vm_info run and its `_populate`."""
    path = os.path.join(tempfile.mkdtemp(dir=WORK), "profile.proxmox.yml")
    with open(path, "w") as f:
        json.dump(config, f)
    python = os.path.join(ROOT, ".venv", "bin", "python")
    samples = {}
    for _ in range(runs):
        for source, prefix in ((path, ""), ("localhost,", "baseline_")):
            out = subprocess.run([python, "-c", PROFILE, source], capture_output=True, text=True, env=env)
            if out.returncode != 0:
                sys.exit(f"the in-process profile failed: {out.stderr[-2000:]}")
            for k, v in json.loads(out.stdout).items():
                samples.setdefault(prefix + k, []).append(v)
    return {k: statistics.median(v) for k, v in samples.items()}, os.getloadavg()[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vms", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5, help="runs per client, interleaved")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--request-cost", default="10ms", help="pve-sim's time spent on each request")
    ap.add_argument("--modes", default="playbook,--graph,--list",
                    help="what runs the inventory: playbook (a play's start), --graph, --list")
    ap.add_argument("--who", default="baseline,bare,ours,ours-facts,peer",
                    help="the inventories compared (ours: default options; ours-facts; peer; baseline: "
                         "`-i localhost,`; bare: `-i` listing as many hosts as VMs, ansible-core's own cost "
                         "of that many hosts)")
    ap.add_argument("--profile-runs", type=int, default=5,
                    help="fresh processes for the in-process profile of the plugin's parse (0: none)")
    ap.add_argument("--vm-info-runs", type=int, default=5,
                    help="runs of the vm_info binary alone as the default options run it (0: none)")
    ap.add_argument("--parallel-sweep", default="1,2,3,4,6,8,16",
                    help="vm_info alone at these bounds (comma-separated; empty: none)")
    ap.add_argument("--report", default=os.path.join(ROOT, "bench", "results", "inventory.md"))
    a = ap.parse_args()
    load_before = os.getloadavg()
    proc, info = start_sim(a.bin_dir, a.request_cost)
    rows = {}
    sweep = []
    check = None
    profile = None
    alone = []
    try:
        t = time.time()
        populate(info, a.vms)
        print(f"populated {a.vms} VMs in {time.time() - t:.1f} s", file=sys.stderr)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".work", "collections"),
                   ANSIBLE_HOME=os.path.join(ROOT, ".work", "ansible-home"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_INVENTORY_UNPARSED_FAILED="1")
        os.makedirs(os.path.join(ROOT, ".work", "collections", "ansible_collections", "sankofa"), exist_ok=True)
        link = os.path.join(ROOT, ".work", "collections", "ansible_collections", "sankofa", "proxmox")
        if not os.path.exists(link):
            os.symlink(ROOT, link)
        ours_cfg = {"plugin": "sankofa.proxmox.proxmox", "api_host": "127.0.0.1", "api_port": info["port"],
                    "api_password": PASSWORD, "api_fingerprint": info["fingerprint"],
                    "vm_info_executable": os.path.join(a.bin_dir, "vm_info")}
        # The peer's `want_facts: true` data, read by ours.
        ours_facts_cfg = dict(ours_cfg, facts=["config", "snapshots", "agent"])
        # The peer as its documentation shows it with facts; pve-sim's certificate is
        # self-signed, so `validate_certs: false` (its own option). Its node hosts are left
        # out (ours lists VMs only); its requests for them are counted all the same.
        # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE, when set, override a session's
        # `verify = False` (psf/requests#3829), which is how the peer applies
        # `validate_certs: false`: they are left out of its environment.
        peer_env = {k: v for k, v in os.environ.items() if k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
        peer_env = dict(peer_env, ANSIBLE_HOME=os.path.join(WORK, "peer-home"), ANSIBLE_NOCOLOR="1",
                        ANSIBLE_INVENTORY_ENABLED="community.proxmox.proxmox", ANSIBLE_INVENTORY_UNPARSED_FAILED="1",
                        NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
        peer_cfg = {"plugin": "community.proxmox.proxmox", "url": f"https://127.0.0.1:{info['port']}",
                    "user": "root@pam", "password": PASSWORD, "validate_certs": False, "want_facts": True,
                    "want_proxmox_nodes_ansible_host": False}
        have_peer = not a.skip_peer and os.path.exists(os.path.join(PEER_BIN, "ansible-inventory"))
        last = {}
        for i in range(a.runs):
            for mode in a.modes.split(","):
                for who in [w for w in a.who.split(",") if w != "peer" or have_peer]:
                    if who != "peer":
                        configs = {"ours": ours_cfg, "ours-facts": ours_facts_cfg, "baseline": "localhost,",
                                   "bare": ",".join(f"vm{1000 + n}" for n in range(a.vms)) + ","}
                        r = run_inventory(os.path.join(ROOT, ".venv", "bin", "ansible-inventory"),
                                          configs[who], env, mode)
                    else:
                        r = run_inventory(os.path.join(PEER_BIN, "ansible-inventory"), peer_cfg, peer_env, mode)
                    inventory = r.pop("inventory")
                    if inventory is not None:
                        last[who] = inventory
                    rows.setdefault((mode, who), []).append(r)
                    print(json.dumps({"who": who, "mode": mode, "run": i, "wall_s": round(r["wall_s"], 3), "load": r["load"],
                                      "requests": r["requests"], "errors": r["errors"]}), file=sys.stderr)
        if have_peer and {"ours-facts", "peer"} <= set(last):
            check = same_data(last["ours-facts"], last["peer"])
        if a.profile_runs:
            profile = profile_parse(ours_cfg, env, a.profile_runs)
            print(f"in-process profile: {json.dumps(profile[0])}", file=sys.stderr)
        # As the plugin runs it with the default options: no per-VM fact, `parallel` 3.
        alone = [run_vm_info(a.bin_dir, info, 3, facts=[])[0] for _ in range(a.vm_info_runs)]
        for p in [int(x) for x in a.parallel_sweep.split(",") if x]:
            walls = [run_vm_info(a.bin_dir, info, p)[0] for _ in range(3)]
            sweep.append((p, statistics.median(walls)))
            print(f"vm_info parallel {p}: {sweep[-1][1]:.3f} s", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait()
    load_after = os.getloadavg()
    write_report(a, rows, sweep, check, load_before, load_after, profile, alone)


def write_report(a, rows, sweep, check, load_before, load_after, profile=None, alone=()):
    def fmt_load(avg):
        return " / ".join(f"{x:.2f}" for x in avg)

    lines = [f"# Inventory of {a.vms} VMs on 3 nodes", "",
             f"Commit `{COMMIT}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; host load average "
             f"(1/5/15 min) {fmt_load(load_before)} before, {fmt_load(load_after)} after; {os.cpu_count()} CPUs. "
             f"`bench/inventory.py` (pve-sim and vm_info {os.path.basename(os.path.normpath(a.bin_dir))} build, 3 workers as pveproxy, TLS, {a.request_cost} per request; "
             f"{a.vms // 4} VMs running with the guest agent answering, {a.vms // 10} with a snapshot, "
             f"{a.vms // 5} in a pool). Wall: the whole `ansible-playbook` of a play on all hosts with no task "
             "(`playbook`: what every play pays for the inventory before its first task), `ansible-inventory "
             "--graph` (the groups only) or `--list` (every host's vars printed: a debugging tool), "
             "runs interleaved (ours, ours with facts, …); `baseline` is the same command with `-i localhost,` "
             "(ansible-core's own start, no plugin), `bare` with `-i` listing as many bare hosts as there are "
             "VMs (ansible-core's own start and its own work for that many hosts, no plugin and no vars); "
             "the host's 1-minute load average at each run's end "
             "beside it (other work shares the host). CPU: the user and system time of the command and of what it "
             "ran (vm_info; not pve-sim), less sensitive to the load than the wall time.", "",
             "| command | inventory | runs | wall s median (min–max) | CPU s median (min–max) | requests per run | "
             "pve-sim ms per request, p50 / p95 | 1-min load at the runs, median (min–max) |",
             "|---|---|---|---|---|---|---|---|"]
    names = {"baseline": "none (`-i localhost,`)", "bare": f"none (`-i` listing {a.vms} bare hosts)",
             "ours": "sankofa.proxmox.proxmox (default options)",
             "ours-facts": "sankofa.proxmox.proxmox (`facts: [config, snapshots, agent]`)",
             "peer": "community.proxmox.proxmox (`want_facts: true`)"}
    medians = {}
    for (mode, who), rs in rows.items():
        walls = [r["wall_s"] for r in rs]
        medians[(mode, who)] = statistics.median(walls)
        ms = [x for r in rs for x in r["server_ms"]]
        cpus = [r["cpu_s"] for r in rs]
        lines.append(f"| `{mode}` | {names[who]} | {len(rs)} | {statistics.median(walls):.2f} "
                     f"({min(walls):.2f}–{max(walls):.2f}) | {statistics.median(cpus):.2f} ({min(cpus):.2f}–{max(cpus):.2f}) "
                     f"| {statistics.median(r['requests'] for r in rs):.0f} "
                     f"| {pct(ms, 50):.2f} / {pct(ms, 95):.2f} "
                     f"| {statistics.median(r['load'] for r in rs):.1f} "
                     f"({min(r['load'] for r in rs):.1f}–{max(r['load'] for r in rs):.1f}) |")
    for mode in a.modes.split(","):
        if (mode, "ours") in medians:
            lines += ["", f"`{mode}`, ours with the default options: **{medians[(mode, 'ours')]:.2f} s** "
                      "(median; target: at most 2 s)"
                      + "".join(f"; {names[who]} {medians[(mode, who)]:.2f} s" for who in ("baseline", "bare")
                                if (mode, who) in medians) + "."]
        if (mode, "ours-facts") in medians and (mode, "peer") in medians:
            ratio = medians[(mode, "ours-facts")] / medians[(mode, "peer")]
            lines += ["", f"`{mode}`, the same data: ours with facts over the peer's (medians) **{ratio:.3f}** "
                      "(target: at most 0.1)."]
    if check:
        n_ours, n_peer, differ, first = check
        lines += ["", f"Same hosts and data (node, status, pool group, snapshot names, agent addresses): "
                  f"{n_ours} hosts ours (with facts), {n_peer} the peer's, {len(differ)} differing"
                  + (f"; first: `{first}`" if first else "") + "."]
    def last_run(who):
        """The last run of `who`, in whichever mode ran last."""
        runs = [rs[-1] for (mode, w), rs in rows.items() if w == who]
        return runs[-1] if runs else None

    for who in ("ours", "ours-facts", "peer"):
        if last_run(who):
            lines += ["", f"{names[who]}: {last_run(who)['errors']} requests per run answered with an "
                      "error (the peer reads the agent of every VM with `agent: 1`, stopped ones too; PVE answers "
                      "500 and, as pve-http-server does after any error, closes the connection)."
                      if who == "peer" else
                      f"{names[who]}: {last_run(who)['errors']} requests per run answered with an error."]
    lines += ["", "Requests per run by kind (the last run of each):", "",
              "| request | ours | ours with facts | peer |", "|---|---|---|---|"]
    clients = ("ours", "ours-facts", "peer")
    last = {who: last_run(who)["by_kind"] for who in clients if last_run(who)}
    for k in sorted(set().union(*last.values())):
        cells = [str(last[who].get(k, 0)) if who in last else "-" for who in clients]
        lines.append(f"| `{k}` | " + " | ".join(cells) + " |")
    if profile:
        p, load = profile
        lines += ["", f"In-process (medians of {a.profile_runs} fresh Python processes, each parsing once as a play "
                  f"does; 1-min load {load:.1f} at the end): ansible-core's InventoryManager spent "
                  f"**{p['manager']:.3f} s** on the plugin's source against {p['baseline_manager']:.3f} s on "
                  f"`-i localhost,`; the plugin's parse {p['parse']:.3f} s, of which the vm_info run "
                  f"{p['vm_info']:.3f} s and adding the {a.vms} hosts (`_populate`: ansible-core's `add_host`, "
                  f"`set_variable` and `add_child`, almost all of it) {p['populate']:.3f} s; the plugin's parse "
                  f"without its vm_info run {p['parse'] - p['vm_info']:.3f} s."]
    if alone:
        lines += ["", f"The vm_info binary alone as the default options run it (no per-VM fact, `parallel` 3), "
                  f"{len(alone)} runs: median {statistics.median(alone):.3f} s ({min(alone):.3f}–{max(alone):.3f})."]
    if sweep:
        lines += ["", "The vm_info binary alone (what the plugin runs, here with all its facts, the module's default), "
                  "median of 3, by its `parallel` bound "
                  "(default 3, the plugin's too: pveproxy answers 3 requests at once; more in flight wait in its "
                  "queue, which the client's load relief reads as load):", "",
                  "| parallel | wall s |", "|---|---|"]
        lines += [f"| {p} | {w:.3f} |" for p, w in sweep]
    os.makedirs(os.path.dirname(a.report), exist_ok=True)
    with open(a.report, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
