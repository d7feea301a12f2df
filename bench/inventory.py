#!/usr/bin/env python3
"""Inventory of 1,000 VMs on 3 nodes (issue 27's target): sankofa.proxmox.proxmox against
community.proxmox.proxmox, each through `ansible-inventory --list` on the same pve-sim, with
the same groups and per-VM data (the peer with want_facts, which reads each VM's config and
status as ours does). Prints the wall times and requests of each; `--vms N` for another size.

Run after `make build` (the release pve-sim and vm_info) and with the peer's venv that
bench/run.sh sets up (.work/bench/peer-venv); `--bin-dir target/debug` for a debug build."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import ssl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, ".work", "bench", "inventory")
PEER_BIN = os.path.join(ROOT, ".work", "bench", "peer-venv", "bin")
PASSWORD = "bench-password"
NODES = ["pve1", "pve2", "pve3"]
# pve-sim's certificate is made at its start; the set-up requests need no pinning.
INSECURE = ssl._create_unverified_context()


def start_sim(bin_dir):
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    cmd = [os.path.join(bin_dir, "pve-sim"), "--data-dir", os.path.join(WORK, "data"),
           "--listen", "127.0.0.1:0", "--auth-failure-delay", "0s", "--user", f"root@pam:{PASSWORD}",
           "--nodes", ",".join(NODES), "--time-scale", "0.01", "--stats-interval", "0s", "--workers", "3"]
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


def populate(info, count):
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
            api(info, "POST", f"/nodes/{node}/qemu", form, ticket)

    ids = list(range(1000, 1000 + count))
    threads = [threading.Thread(target=make, args=(ids[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = time.time() + 300
    while time.time() < deadline:
        listed = api(info, "GET", "/cluster/resources", {"type": "vm"}, ticket)
        if len([v for v in listed if "lock" not in v]) >= count:
            return
        time.sleep(0.5)
    sys.exit("the VMs were not all created")


def requests_since(info, start):
    path = os.path.join(WORK, "data", "requests.jsonl")
    with open(path) as f:
        return sum(1 for line in f if json.loads(line).get("ts", 0) >= start)


def run_inventory(ansible_inventory, config, env):
    d = tempfile.mkdtemp(dir=WORK)
    path = os.path.join(d, "bench.proxmox.yml")
    with open(path, "w") as f:
        json.dump(config, f)
    start = time.time()
    out = subprocess.run([ansible_inventory, "--list", "-i", path], capture_output=True, text=True, env=env)
    wall = time.time() - start
    if out.returncode != 0:
        reasons = [line for line in out.stderr.splitlines() if "Failed to parse" in line]
        sys.exit(f"{ansible_inventory} failed: {(reasons or [out.stderr[-2000:]])[0]}")
    hosts = len(json.loads(out.stdout).get("_meta", {}).get("hostvars", {}))
    return wall, hosts, start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vms", type=int, default=1000)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--skip-peer", action="store_true")
    a = ap.parse_args()
    proc, info = start_sim(a.bin_dir)
    try:
        populate(info, a.vms)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".work", "collections"),
                   ANSIBLE_HOME=os.path.join(ROOT, ".work", "ansible-home"), ANSIBLE_NOCOLOR="1")
        ours_cfg = {"plugin": "sankofa.proxmox.proxmox", "api_host": "127.0.0.1", "api_port": info["port"],
                    "api_password": PASSWORD, "api_fingerprint": info["fingerprint"],
                    "vm_info_executable": os.path.join(a.bin_dir, "vm_info"), "parallel": 16}
        wall, hosts, start = run_inventory(os.path.join(ROOT, ".venv", "bin", "ansible-inventory"), ours_cfg, env)
        print(json.dumps({"who": "sankofa.proxmox", "vms": a.vms, "hosts": hosts, "wall_s": round(wall, 3),
                          "requests": requests_since(info, start)}))
        if a.skip_peer:
            return
        peer_env = dict(os.environ, ANSIBLE_HOME=os.path.join(WORK, "peer-home"), ANSIBLE_NOCOLOR="1",
                        ANSIBLE_INVENTORY_ENABLED="community.proxmox.proxmox", ANSIBLE_INVENTORY_UNPARSED_FAILED="1", ANSIBLE_VERBOSITY="3", NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
        peer_cfg = {"plugin": "community.proxmox.proxmox", "url": f"https://127.0.0.1:{info['port']}",
                    "user": "root@pam", "password": PASSWORD, "validate_certs": False, "want_facts": True,
                    "want_proxmox_nodes_ansible_host": False}
        wall, hosts, start = run_inventory(os.path.join(PEER_BIN, "ansible-inventory"), peer_cfg, peer_env)
        print(json.dumps({"who": "community.proxmox", "vms": a.vms, "hosts": hosts, "wall_s": round(wall, 3),
                          "requests": requests_since(info, start)}))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
