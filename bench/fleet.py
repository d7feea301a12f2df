#!/usr/bin/env python3
"""The fleet bench: one play creating n VMs by name at once, ours against the peer.

Run alone:   bench/run.sh --only fleet [--fleet-sizes 10,50] [--fleet-costs 0,10] [--full]
        or:  .venv/bin/python bench/fleet.py [the same options]
(either writes bench/results/fleet.md; `--report NAME` another name under bench/results).
`make bench` runs it among the other experiments and puts its table into bench/results/latest.md.
Binaries: target/release by default; BENCH_BIN_DIR=target/debug points bench at a debug build
(pve-sim and vm from there; Ansible runs the modules in plugins/bin either way).

Why it exists: users run the vm module as a fleet (one play, `forks: 50`, a VM per host by name,
automatic ids), and a fleet can cost PVE far more than n single runs (issue 33). Per cell of the
grid, on a fresh 3-node pve-sim (`--nodes pve1,pve2,pve3`, `--workers 3` and
`--daemon-workers 3`, `--request-cost` and `--daemon-request-cost` C ms: a protected call pays
both, pveproxy's cost and then pvedaemon's after the proxy hop),
`--time-scale 0.5`), each client in turn on its own sim of the same options:
  - ours: `sankofa.proxmox.vm` with `name` per host, `cores: 1`, no vmid;
    the peer: community.proxmox `proxmox_kvm`, the same;
  - `ansible-playbook -f 50`; wall time of the playbook;
  - requests per VM (pve-sim's request log, the UI poll's left out) and the top endpoints, their
    paths normalised (node names, vmids, UPIDs);
  - failures (the hosts' results, Ansible's oneline callback) and duplicates: two hosts whose
    successful results name one vmid (one of them has no VM of its own), or two VMs of one name
    at the end (the end state read from pve-sim's VM list per node);
  - the web UI's poll: `GET /cluster/resources` every --ui-interval s from a thread of its own,
    with its own API token, on a keep-alive connection: p50/p95 during the fleet against the
    same poll on the idle sim before the fleet starts.
And a row of ten linked clones of one template (`-f 10`), the template made first with the vm
module, and a row of creates by name that each import a cloud image (a 50 MiB / 1 GiB qcow2
seeded in pve-sim's `local:import/`, copied at --import-rate 200M; ours `disks: [{import_from}]`,
the peer `proxmox_kvm` with `scsi0: local-lvm:0,import-from=…`, both in one task), `-f n`,
at 10 VMs (with `--full` also 50) for each request cost: its target is ≤ 20 requests per VM,
the task polls included.

Time, on 2 shared cores with the code of commit 50426cd: the default grid (10 and 50 VMs at 0 and 10 ms, and
the clones rows) takes about 5 minutes, which is what `make bench` runs. The full grid (10, 50
and 200 VMs at 0, 10 and 30 ms) takes about 25 minutes, more than a bench row should: it runs
with `--full` (`make bench-full`), or `--fleet-sizes 10,50,200 --fleet-costs 0,10,30`. Its
slowest cell, 200 VMs at 30 ms, took 163 s for ours (debug binaries; 7,500 requests: 30 ms on 3
workers is at least 75 s of them) and 157 s for the peer. Ours' requests per VM at 50 VMs and
0 ms vary between runs (40 to 107 seen): its waits depend on how the creates interleave. A cell that runs past --fleet-timeout is stopped and
reported as such.
"""
import argparse
import collections
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the Sim class, the clients' environments, percentiles)

NODES = ["pve1", "pve2", "pve3"]
DEFAULT_SIZES, FULL_SIZES = "10,50", "10,50,200"
DEFAULT_COSTS, FULL_COSTS = "0,10", "0,10,30"
DEFAULT_IMPORT_SIZES, FULL_IMPORT_SIZES = "10", "10,50"
# The imports rows' image (50 MiB of data in a 1 GiB disk) and pve-sim's copy rate for it.
IMPORT_IMAGE_MB, IMPORT_VIRTUAL_MB, IMPORT_RATE = 50, 1024, "200M"
UI_TOKEN_ID, UI_TOKEN_SECRET = "root@pam!webui", "6d1f4c1e-0b7e-4bb6-9a44-2f4e3c6b5a10"
TEMPLATE_VMID = 9000
CLIENTS = {"ours": "sankofa.proxmox.vm", "peer": "community.proxmox.proxmox_kvm"}
# Targets (issue 33): requests per VM for a blank create by name, and the UI poll's p95 against idle.
MAX_REQUESTS_PER_VM = 12
# ... and for a create that imports a cloud image, the task polls included.
MAX_IMPORT_REQUESTS_PER_VM = 20
MAX_UI_SLOWDOWN = 2.0
# The UI polls before the play, 50 ms apart: its idle latency.
IDLE_POLLS = 40
# "Not growing with n": within this factor of the same cost's smallest fleet.
GROWTH_SLACK = 1.1


def add_arguments(ap):
    """The fleet's options, on bench.py's parser or this file's own."""
    ap.add_argument("--fleet-sizes", default=None,
                    help=f"comma-separated fleet sizes (default {DEFAULT_SIZES}; with --full {FULL_SIZES})")
    ap.add_argument("--fleet-costs", default=None,
                    help=f"comma-separated request costs in ms (default {DEFAULT_COSTS}; with --full {FULL_COSTS})")
    ap.add_argument("--fleet-forks", type=int, default=50, help="ansible-playbook -f (default 50)")
    ap.add_argument("--fleet-timeout", type=float, default=900, help="seconds before a cell's playbook is stopped")
    ap.add_argument("--ui-interval", type=float, default=0.25,
                    help="the UI poll's period in s (default 0.25: enough polls in a short cell for a p95 that is not its maximum)")
    ap.add_argument("--pin", choices=("on", "off"), default="on" if (os.cpu_count() or 1) >= 2 else "off",
                    help="on (the default with 2 cores or more): pve-sim and the UI poll on CPU 0, the plays on the others "
                         "(`taskset`), as a PVE node and a controller are two machines; off: all share every core")
    ap.add_argument("--no-clones", action="store_true", help="leave out the linked-clones row")
    ap.add_argument("--client-nice", type=int, default=10,
                    help="the niceness ansible-playbook runs at (default 10; 0: as the bench): on one host it "
                         "shares the cores with pve-sim, where a controller and a PVE node are two machines")
    ap.add_argument("--fleet-import-sizes", default=None,
                    help=f"comma-separated sizes of the cloud-image import rows, `-f` each size (default "
                         f"{DEFAULT_IMPORT_SIZES}; with --full {FULL_IMPORT_SIZES}; empty: none)")


def grid(args):
    sizes = args.fleet_sizes or (FULL_SIZES if args.full else DEFAULT_SIZES)
    costs = args.fleet_costs or (FULL_COSTS if args.full else DEFAULT_COSTS)
    return [int(x) for x in sizes.split(",") if x], [int(x) for x in costs.split(",") if x]


def import_sizes(args):
    sizes = args.fleet_import_sizes
    if sizes is None:
        sizes = FULL_IMPORT_SIZES if args.full else DEFAULT_IMPORT_SIZES
    return [int(x) for x in sizes.split(",") if x]


def normalise(path, nodes=NODES):
    """An endpoint's path with node names, vmids and UPIDs as placeholders, its query left out."""
    parts = []
    for seg in path.split("?")[0].split("/"):
        if seg in nodes:
            seg = "{node}"
        elif seg.isdigit():
            seg = "{vmid}"
        elif seg.startswith("UPID:"):
            seg = "{upid}"
        parts.append(seg)
    return "/".join(parts)


class UiPoll:
    """The web UI's poll: `GET /cluster/resources` with its own API token on one keep-alive
    connection (re-opened when the server closes it), every `interval` s; latencies in ms as the
    client sees them (queueing included), and the polls that failed."""

    def __init__(self, sim, interval):
        self.sim = sim
        self.interval = interval
        self.latency_ms = []
        self.errors = 0
        self.conn = None
        self.stop_flag = threading.Event()
        self.thread = None

    def connect(self):
        ctx = ssl.create_default_context(cafile=self.sim.info["ca"])
        ctx.check_hostname = False
        return http.client.HTTPSConnection("127.0.0.1", self.sim.port, context=ctx, timeout=120)

    def once(self):
        headers = {"Authorization": f"PVEAPIToken={UI_TOKEN_ID}={UI_TOKEN_SECRET}"}
        started = time.monotonic()
        for attempt in (1, 2):
            try:
                if self.conn is None:
                    self.conn = self.connect()
                self.conn.request("GET", "/api2/json/cluster/resources", headers=headers)
                resp = self.conn.getresponse()
                resp.read()
                if resp.status != 200:
                    self.errors += 1
                    return
                self.latency_ms.append((time.monotonic() - started) * 1000)
                return
            except (OSError, http.client.HTTPException):
                # A keep-alive connection the server closed: one new connection, as a browser does.
                self.conn = None
                if attempt == 2:
                    self.errors += 1

    def sample(self, count, spacing):
        """`count` polls, `spacing` s apart, now (the idle baseline)."""
        for _ in range(count):
            self.once()
            time.sleep(spacing)
        out, self.latency_ms = self.latency_ms, []
        return out

    def start(self):
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_flag.is_set():
            started = time.monotonic()
            self.once()
            self.stop_flag.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def stop(self):
        self.stop_flag.set()
        self.thread.join()
        out, self.latency_ms = self.latency_ms, []
        return out


def start_sim(name, cost_ms, extra=()):
    return bench.Sim(name, ["--nodes", ",".join(NODES), "--time-scale", "0.5",
                            "--request-cost", f"{cost_ms}ms", "--daemon-request-cost", f"{cost_ms}ms",
                            "--daemon-workers", "3", "--token", f"{UI_TOKEN_ID}={UI_TOKEN_SECRET}", *extra])


def play_env(who, sim):
    """(the playbook's task module arguments' connection part, bin dir, environment) for a client."""
    conn = {"api_host": "127.0.0.1", "api_port": sim.port, "api_password": bench.PASSWORD}
    if who == "ours":
        conn["api_fingerprint"] = sim.info["fingerprint"]
        bin_dir = os.path.join(bench.ROOT, ".venv", "bin")
        env = dict(os.environ, ANSIBLE_HOME=os.path.join(bench.ROOT, ".work", "ansible-home"),
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(bench.ROOT, ".work", "collections"))
    else:
        conn.update({"api_user": "root@pam", "validate_certs": False})
        bin_dir = bench.PEER_BIN
        env = bench.peer_env()
    env["ANSIBLE_HOST_KEY_CHECKING"] = "False"
    env["ANSIBLE_STDOUT_CALLBACK"] = "oneline"
    return conn, bin_dir, env


# The niceness of the plays (`--client-nice`), set by `experiment`.
CLIENT_NICE = 10
# The CPUs the plays run on (`--pin`: all but pve-sim's), set by `experiment`; None: any.
CLIENT_CPUS = None


def run_play(sim, who, hosts, spec, forks, timeout):
    """One play, a task per host (`spec` with the connection added); (wall s, hosts failed,
    duplicate vmids among the hosts' successful results, timed out)."""
    inv = os.path.join(sim.dir, "inventory.ini")
    with open(inv, "w") as f:
        f.write("[vms]\n" + "".join(f"{h} node={node}\n" for h, node in hosts))
    conn, bin_dir, env = play_env(who, sim)
    module = CLIENTS[who]
    play = [{"hosts": "vms", "connection": "local", "gather_facts": False,
             "vars": {"ansible_python_interpreter": os.path.join(bin_dir, "python")},
             "tasks": [{"name": "create", module: {**conn, **spec}}]}]
    pb = os.path.join(sim.dir, "play.yml")
    with open(pb, "w") as f:
        json.dump(play, f)
    started = time.monotonic()
    timed_out = False
    try:
        nice = ["nice", "-n", str(CLIENT_NICE)] if CLIENT_NICE > 0 else []
        pin = ["taskset", "-c", CLIENT_CPUS] if CLIENT_CPUS else []
        p = subprocess.run([*pin, *nice, os.path.join(bin_dir, "ansible-playbook"), "-i", inv, "-f", str(forks), pb],
                           capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=timeout)
        out = p.stdout
    except subprocess.TimeoutExpired as e:
        timed_out = True
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    wall = time.monotonic() - started
    with open(os.path.join(sim.dir, "play.out"), "w") as f:
        f.write(out)
    # The oneline callback: `vm3 | CHANGED => {...}`, `vm4 | FAILED! => {...}`, the result's JSON
    # on one line; a host without a line (a stopped play) counts as failed.
    results = {}
    for m in re.finditer(r"^(\S+) \| ([A-Z]+!?)(?: => (\{.*\}))?$", out, re.M):
        try:
            result = json.loads(m.group(3)) if m.group(3) else {}
        except json.JSONDecodeError:
            result = {}
        results[m.group(1)] = (m.group(2) in ("SUCCESS", "CHANGED") and not result.get("failed"), result.get("vmid"))
    failed = sum(1 for h, _ in hosts if not results.get(h, (False, None))[0])
    # Two hosts that each say they made (or found) one vmid: one of them has no VM of its own.
    ids = [str(vmid) for ok, vmid in results.values() if ok and vmid is not None]
    return wall, failed, len(ids) - len(set(ids)), timed_out


def end_state(sim):
    """The VMs pve-sim holds at the end: [(vmid, name)], from each node's VM list (which reads the
    configs; /cluster/resources names a VM only once pvestatd's next round has seen it)."""
    out = []
    for node in NODES:
        out += [(r.get("vmid"), r.get("name")) for r in bench.api_get(sim, f"/nodes/{node}/qemu") or []]
    return out


def measure(sim, who, hosts, spec, forks, timeout, ui_interval, before_requests=0):
    """Runs the play with the UI poll beside it; the cell's figures."""
    ui = UiPoll(sim, ui_interval)
    idle = ui.sample(IDLE_POLLS, 0.05)
    ui.start()
    wall, failed, duplicate_ids, timed_out = run_play(sim, who, hosts, spec, forks, timeout)
    during = ui.stop()
    # Idle again, the cluster as the play left it: the polls during the play list between
    # none and all of its VMs, and a longer listing takes longer whatever the load.
    idle_after = ui.sample(IDLE_POLLS, 0.05)
    reqs = [r for r in sim.requests()[before_requests:] if r.get("user") != UI_TOKEN_ID]
    sent = [r for r in reqs if r["method"] == "POST" and (r["path"].endswith("/qemu") or r["path"].endswith("/clone"))]
    creates = [r for r in sent if r["status"] == 200]
    names = collections.Counter(name for _, name in end_state(sim))
    wanted = {h for h, _ in hosts}
    endpoints = collections.Counter(f"{r['method']} {normalise(r['path'])}" for r in reqs)
    n = len(hosts)
    return {"who": who, "n": n, "wall_s": wall, "failed": failed, "timed_out": timed_out,
            "present": sum(1 for h in wanted if names.get(h)),
            "duplicate_ids": duplicate_ids,
            "duplicate_names": sum(c - 1 for name, c in names.items() if name in wanted and c > 1),
            "requests": len(reqs), "creates": len(creates), "creates_sent": len(sent),
            "top": endpoints.most_common(5), "ui_idle_ms": idle, "ui_idle_after_ms": idle_after, "ui_ms": during, "ui_errors": ui.errors,
            # How long the UI's own polls waited for their pveproxy worker (pve-sim's log), the
            # part of their latency the fleet's requests ahead of them on that worker make.
            "ui_queued_ms": [r["queued_ms"] for r in sim.requests()[before_requests:]
                             if r.get("user") == UI_TOKEN_ID and "queued_ms" in r],
            # How long the fleet's requests waited for a pveproxy worker (pve-sim's own measure):
            # the queue the load relief reads from the requests' times.
            "queued_ms": [r["queued_ms"] for r in reqs if r.get("daemon") == "pveproxy" and "queued_ms" in r]}


def fleet_cell(who, n, cost, forks, timeout, ui_interval):
    sim = start_sim(f"fleet-{who}-{n}-{cost}", cost)
    try:
        hosts = [(f"vm{i}", NODES[i % len(NODES)]) for i in range(n)]
        spec = {"node": "{{ node }}", "name": "{{ inventory_hostname }}", "cores": 1}
        row = measure(sim, who, hosts, spec, forks, timeout, ui_interval)
    finally:
        sim.stop()
    row["cost"] = cost
    return row


def imports_cell(who, n, cost, timeout, ui_interval):
    """n creates by name at once (`-f n`), each importing the cloud image into its scsi0."""
    img = bench.make_image(IMPORT_IMAGE_MB, IMPORT_VIRTUAL_MB)
    vol = f"local:import/{os.path.basename(img)}"
    # pve-sim on every core here (`--pin` gives it one): its qemu-img imports, ten at once,
    # are the node's own work, which a PVE node does on cores of its own beside pveproxy's.
    pinned, bench.SIM_CPUS = bench.SIM_CPUS, None
    try:
        sim = start_sim(f"fleet-imports-{who}-{n}-{cost}", cost, ["--seed-image", img, "--import-rate", IMPORT_RATE])
    finally:
        bench.SIM_CPUS = pinned
    try:
        hosts = [(f"vm{i}", NODES[i % len(NODES)]) for i in range(n)]
        spec = {"node": "{{ node }}", "name": "{{ inventory_hostname }}", "cores": 1}
        if who == "ours":
            spec.update({"timeout": "10m", "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": vol}]})
        else:
            spec.update({"timeout": 600, "scsi": {"scsi0": f"local-lvm:0,import-from={vol}"}})
        row = measure(sim, who, hosts, spec, n, timeout, ui_interval)
    finally:
        sim.stop()
    row["cost"] = cost
    return row


def clones_cell(who, cost, ui_interval, timeout, n=10):
    """Ten linked clones of one template on pve1 (`-f 10`); the template made first with our vm
    module (for both clients), its requests left out of the figures."""
    sim = start_sim(f"fleet-clones-{who}-{cost}", cost)
    try:
        tpl = bench.ours(sim, {"node": "pve1", "vmid": TEMPLATE_VMID, "name": "tpl", "template": True, "cores": 1,
                               "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]})
        if tpl.get("failed"):
            raise RuntimeError(f"the template for the clones row could not be made: {tpl.get('msg')}")
        # The peer finds the template by name in /cluster/resources, which names a VM once
        # pvestatd's next round (pve-sim's --stats-interval, 10 s) has seen it: a template made
        # well before its clones, as users make them.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                r.get("name") == "tpl" for r in bench.api_get(sim, "/cluster/resources?type=vm") or []):
            time.sleep(0.5)
        before = len(sim.requests())
        hosts = [(f"clone{i}", "pve1") for i in range(n)]
        if who == "ours":
            spec = {"node": "pve1", "name": "{{ inventory_hostname }}", "clone": {"vmid": TEMPLATE_VMID}}
        else:
            spec = {"node": "pve1", "name": "{{ inventory_hostname }}", "clone": "tpl", "full": False}
        row = measure(sim, who, hosts, spec, n, timeout, ui_interval, before)
    finally:
        sim.stop()
    row["cost"] = cost
    return row


def experiment(args, have_peer):
    """Every cell of the grid, then the clones and the imports rows; {"cells": [...], "clones": [...],
    "imports": [...]}."""
    global CLIENT_NICE, CLIENT_CPUS
    CLIENT_NICE = args.client_nice
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin == "on" and len(cpus) >= 2:
        bench.SIM_CPUS, CLIENT_CPUS = str(cpus[0]), ",".join(str(c) for c in cpus[1:])
        # The UI poll (a browser, a machine of its own) beside pve-sim, away from the plays' forks.
        os.sched_setaffinity(0, {cpus[0]})
    sizes, costs = grid(args)
    whos = ("ours", "peer") if have_peer else ("ours",)
    cells, clones, imports = [], [], []
    for cost in costs:
        for n in sizes:
            for who in whos:
                print(f"fleet: {who}, {n} VMs, {cost} ms per request", file=sys.stderr, flush=True)
                cells.append(fleet_cell(who, n, cost, args.fleet_forks, args.fleet_timeout, args.ui_interval))
    if not args.no_clones:
        for cost in costs:
            for who in whos:
                print(f"fleet: {who}, 10 linked clones, {cost} ms per request", file=sys.stderr, flush=True)
                clones.append(clones_cell(who, cost, args.ui_interval, args.fleet_timeout))
    for cost in costs:
        for n in import_sizes(args):
            for who in whos:
                print(f"fleet: {who}, {n} creates importing a cloud image, {cost} ms per request", file=sys.stderr,
                      flush=True)
                imports.append(imports_cell(who, n, cost, args.fleet_timeout, args.ui_interval))
    return {"cells": cells, "clones": clones, "imports": imports, "forks": args.fleet_forks, "nice": args.client_nice,
            "ui_interval": args.ui_interval, "pin": args.pin}


def p50_p95(xs):
    if not xs:
        return "-"
    return f"{bench.percentile(xs, 50):.0f} / {bench.percentile(xs, 95):.0f}" + ("" if len(xs) >= 10 else f" (n={len(xs)})")


def idle_p95(row):
    """The UI poll's idle p95: the larger of the cluster's before the play (no VMs) and as the
    play left it (all of them), between which the polls during the play listed."""
    return max(bench.percentile(xs, 95) for xs in (row["ui_idle_ms"], row.get("ui_idle_after_ms") or row["ui_idle_ms"]))


def verdicts(row, peer_row, smallest, budget):
    """The targets a row meets and misses: [(target, met)]; the request budget per VM `budget`
    where the issue sets one (blank creates, creates that import an image), none for the clones."""
    out = [("0 failures, 0 duplicates", row["failed"] == 0 and not row["timed_out"] and row["present"] == row["n"]
            and row["duplicate_ids"] == 0 and row["duplicate_names"] == 0)]
    if row["who"] == "ours" and budget is not None:
        per_vm = row["requests"] / row["n"]
        ok = per_vm <= budget
        if smallest is not None and smallest is not row:
            ok = ok and per_vm <= GROWTH_SLACK * smallest["requests"] / smallest["n"]
        out.append((f"≤ {budget} requests/VM, not growing", ok))
    if row["who"] == "ours" and peer_row is not None:
        out.append(("wall ≤ peer", row["wall_s"] <= peer_row["wall_s"]))
    if row["ui_ms"] and row["ui_idle_ms"]:
        out.append((f"UI p95 ≤ {MAX_UI_SLOWDOWN:g}× idle",
                    row["ui_errors"] == 0
                    and bench.percentile(row["ui_ms"], 95) <= MAX_UI_SLOWDOWN * idle_p95(row)))
    return out


def row_line(label, row, peer_row, smallest, budget=MAX_REQUESTS_PER_VM):
    name = CLIENTS[row["who"]]
    top = "; ".join(f"{ep} {c / row['n']:.1f}" for ep, c in row["top"])
    missed = [t for t, ok in verdicts(row, peer_row, smallest, budget) if not ok]
    verdict = "met" if not missed else "**not met**: " + ", ".join(missed)
    wall = f"{row['wall_s']:.1f}" + (" (stopped)" if row["timed_out"] else "")
    ui_errors = f", {row['ui_errors']} failed" if row["ui_errors"] else ""
    return (f"| {label} | {name} | {wall} | {row['present']}/{row['n']} | {row['failed']} | "
            f"{row['duplicate_ids']} / {row['duplicate_names']} | {row['requests'] / row['n']:.1f} | "
            f"{row.get('creates_sent', 0) / row['n']:.2f} ({row['creates'] / row['n']:.2f}) | {top} | {p50_p95(row['ui_idle_ms'])}"
            f"{'; ' + p50_p95(row['ui_idle_after_ms']) if row.get('ui_idle_after_ms') else ''} | "
            f"{p50_p95(row['ui_ms'])}{ui_errors} | {p50_p95(row.get('ui_queued_ms', []))} | {p50_p95(row.get('queued_ms', []))} | {verdict} |")


def report_lines(fleet):
    """The fleet section of a report (markdown lines)."""
    if not fleet or not (fleet.get("cells") or fleet.get("clones") or fleet.get("imports")):
        return []
    out = ["", f"## Fleets: one play creating VMs by name at once (`ansible-playbook -f {fleet['forks']}`)", "",
           "A fresh 3-node pve-sim per client and cell (`--nodes pve1,pve2,pve3 --workers 3 --daemon-workers 3 "
           "--time-scale 0.5`, `--request-cost` and `--daemon-request-cost` as given: a protected call pays both), VMs by name with `cores: 1` and automatic ids, spread over the nodes; "
           "ours `sankofa.proxmox.vm`, the peer community.proxmox `proxmox_kvm`, each play's `ansible-playbook` at "
           f"nice {fleet.get('nice', 0)} (0: not lowered)" + (
               ", pve-sim and the UI poll pinned to CPU 0 and the plays to the others (`--pin`: a PVE node and a "
               "controller are two machines)" if fleet.get("pin") == "on" else
               ", all on every core (on this one host the plays share the cores with pve-sim, where a controller and "
               "a PVE node are two machines)") + ". Requests: pve-sim's request log, "
           "the UI poll's left out; top endpoints per VM, paths normalised. Duplicates: two hosts whose successful "
           "results name one vmid / two VMs of one name at the end (pve-sim's VM list per node). VMs at end: "
           "the hosts whose VM is there (a host can succeed without one). UI poll: `GET "
           f"/cluster/resources` every {fleet['ui_interval']:g} s with its own API token on a keep-alive "
           f"connection during the play; idle: {IDLE_POLLS} of the same polls before it (no VMs) and after it (the "
           "play's VMs listed), the target against the larger p95 (a longer listing takes longer whatever the load: "
           "at 200 VMs and 0 ms, 2.3 ms against 0.8 with none); the UI's wait for its "
           "worker: how long its polls waited for their pveproxy worker's event loop (pve-sim's `queued_ms`). pveproxy queue: how long the fleet's requests "
           "waited for a pveproxy worker, from pve-sim's request log (`queued_ms`), the UI poll's left out. Targets: 0 failures and 0 "
           f"duplicates; requests per VM ≤ {MAX_REQUESTS_PER_VM} (ours) and within {GROWTH_SLACK:g}× of the same "
           "cost's smallest fleet; wall ≤ the peer's; the UI poll's p95 ≤ 2× idle. The clones rows: the template "
           "made first with our vm module on pve1 (its requests not counted), ten clones of it by name on pve1; "
           "the request budget is not applied there (it is the blank create's). The imports rows: creates by name "
           f"that each import a {IMPORT_IMAGE_MB} MiB / {IMPORT_VIRTUAL_MB // 1024} GiB qcow2 from `local:import/` "
           f"(pve-sim `--import-rate {IMPORT_RATE}`), `-f` the row's size, both clients in one task, pve-sim on every core (its qemu-img imports are the node's work); budget "
           f"≤ {MAX_IMPORT_REQUESTS_PER_VM} requests per VM, the task polls included.", "",
           "| cell | client | wall s | VMs at end | failed | duplicate ids / names | requests per VM | creates sent per VM (succeeded) | "
           "top endpoints (per VM) | UI idle p50 / p95 ms (before; after) | UI during p50 / p95 ms | UI's wait for its worker p50 / p95 ms | "
           "pveproxy queue p50 / p95 ms | targets |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    cells = fleet.get("cells", [])
    for row in cells:
        peer_row = next((p for p in cells if p["who"] == "peer" and p["n"] == row["n"] and p["cost"] == row["cost"]), None)
        same_cost = [r for r in cells if r["who"] == row["who"] and r["cost"] == row["cost"]]
        smallest = min(same_cost, key=lambda r: r["n"]) if same_cost else None
        out.append(row_line(f"{row['n']} VMs, {row['cost']} ms", row, peer_row if row["who"] == "ours" else None,
                            smallest))
    for row in fleet.get("clones", []):
        peer_row = next((p for p in fleet["clones"] if p["who"] == "peer" and p["cost"] == row["cost"]), None)
        out.append(row_line(f"{row['n']} linked clones (`-f {row['n']}`), {row['cost']} ms", row,
                            peer_row if row["who"] == "ours" else None, None, budget=None))
    imports = fleet.get("imports", [])
    for row in imports:
        peer_row = next((p for p in imports if p["who"] == "peer" and p["n"] == row["n"] and p["cost"] == row["cost"]),
                        None)
        same_cost = [r for r in imports if r["who"] == row["who"] and r["cost"] == row["cost"]]
        smallest = min(same_cost, key=lambda r: r["n"]) if same_cost else None
        out.append(row_line(f"{row['n']} creates importing a cloud image (`-f {row['n']}`), {row['cost']} ms", row,
                            peer_row if row["who"] == "ours" else None, smallest, budget=MAX_IMPORT_REQUESTS_PER_VM))
    return out


def measured_commit():
    """The last commit that changed what the bench measures (the modules, pve-sim, the lock file)."""
    return subprocess.run(["git", "log", "-1", "--format=%h", "--", "src", "pve", "sim", "Cargo.lock", "Cargo.toml"],
                          capture_output=True, text=True, cwd=bench.ROOT).stdout.strip() or "unknown"


def main():
    ap = argparse.ArgumentParser(description="The fleet bench (bench/results/fleet.md).")
    ap.add_argument("--full", action="store_true", help=f"the full grid: {FULL_SIZES} VMs at {FULL_COSTS} ms")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--report", default="fleet", help="the report's file name under bench/results (default fleet)")
    add_arguments(ap)
    args = ap.parse_args()
    have_peer = not args.no_peer and os.path.exists(os.path.join(bench.PEER_BIN, "ansible"))
    fleet = experiment(args, have_peer)
    os.makedirs(bench.WORK, exist_ok=True)
    with open(os.path.join(bench.WORK, f"{args.report}.json"), "w") as f:
        json.dump({"commit": bench.COMMIT, "fleet": fleet}, f)
    lines = ["# Fleet benchmark", "", f"Run: `{' '.join(['bench/fleet.py'] + sys.argv[1:])}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, commit {bench.COMMIT} "
             f"(the code measured last changed at {measured_commit()}), binaries from "
             f"{os.path.relpath(bench.BIN_DIR, bench.ROOT)}."] + report_lines(fleet) + [""]
    out = os.path.join(bench.ROOT, "bench", "results", f"{args.report}.md")
    with open(out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
