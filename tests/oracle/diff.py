"""pve-sim against PVE's own code: the same create/update/delete sequences sent to pve-sim's API
and to the PVE oracle (../shared/pve-oracle, PVE's unmodified Perl run by its own driver), and
what each stores compared: GET config, GET pending, the config file's text, and refusals
(status class, the parameters that failed, the message's gist).

    python3 tests/oracle/diff.py [--oracle DIR] [--sim BIN] [--only SUBSTRING] [--json OUT] [-v]

The scenarios are data, tests/oracle/scenarios.json: `api` entries (create, update, update_method,
volumes as the oracle takes them; an update with `call` is another API call of the VM instead,
`move_disk` or `unlink` with the update's other keys as its parameters, run on the oracle's side
under the harness's calls.pl, which hands it to PVE's move_vm_disk or unlink; a stopped VM only) and `set` entries (one key, several values, each through a
create and an update). `running` makes the VM running between the create and the updates:
pve-sim starts it; the oracle's VM never runs, so the harness runs the oracle's own oracle.pl
under its running_vm.pl, which fakes a running VM and a QEMU that accepts the hotplug commands
(`RUNNING_FAKES`). `fakes` notes a scenario whose answer rests on what the oracle fakes;
`decided` marks one whose difference comes from those fakes and says why PVE's code sides with
pve-sim (it is listed, not counted as agreeing). This harness only talks to the oracle (one
JSON request a line on its stdin, one answer a line on its stdout; for a running VM through its
own running_vm.pl, which runs the oracle's oracle.pl as it is and replaces in memory only what
stands for QEMU); none of the oracle's code is in this repository. Only what is random on both sides is masked: generated MACs and UUIDs (ones
the request gave stay), `ctime`, digests and `$5$` password hashes.

Exit status: 0 when every scenario agrees, 1 when some differ, 2 when the oracle or pve-sim
is missing.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE = "pve"
VMID = 100
# The oracle runs as root@pam with a ticket; so does pve-sim's side (a root@pam API token is
# not root to PVE's permission checks: only the ticket's root@pam bypasses them).
PASSWORD = "oracle-0d1ff000"

MAC = re.compile(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def masker(request_text):
    """Masks what either side makes at random; values the request itself gave are kept."""
    given_macs = {m.upper() for m in MAC.findall(request_text)}
    given_uuids = {u.lower() for u in UUID.findall(request_text)}

    def mask(text):
        text = MAC.sub(lambda m: m.group(0) if m.group(0).upper() in given_macs else "<MAC>", text)
        text = UUID.sub(lambda m: m.group(0) if m.group(0).lower() in given_uuids else "<UUID>", text)
        text = re.sub(r"ctime=\d+", "ctime=<TIME>", text)
        text = re.sub(r"\$5\$[^\s\"\\,]+", "<SHA256CRYPT>", text)
        return text

    def mask_value(value):
        if isinstance(value, str):
            # Not random, but pve-sim's admin endpoint never shows a plain cipassword (secrets
            # stay out of output): the oracle's file text is shown the same way.
            value = re.sub(r"^cipassword: (?!\$)\S.*$", "cipassword: ********", value, flags=re.M)
        if isinstance(value, str):
            return mask(value)
        if isinstance(value, list):
            return [mask_value(v) for v in value]
        if isinstance(value, dict):
            return {k: ("<DIGEST>" if k == "digest" else mask_value(v)) for k, v in value.items()}
        return value

    return mask_value


def gist(message):
    """A refusal's message without what only says where in PVE's Perl it was raised."""
    if message is None:
        return None
    message = re.sub(r" at /\S+ line \d+\.?", "", str(message))
    return " ".join(message.split())


def form(params):
    """A parameter object as a form body; a list is a repeated key, None a key without `=`."""
    if isinstance(params, str):
        return params
    parts = []
    for key, value in params.items():
        for one in value if isinstance(value, list) else [value]:
            if one is None:
                parts.append(urllib.parse.quote(key))
            else:
                parts.append(f"{urllib.parse.quote(key)}={urllib.parse.quote(str(one), safe='')}")
    return "&".join(parts)


# ------------------------------------------------------------------------------- scenarios

def expand(spec):
    """scenarios.json's entries as API sequences: `api` entries as they are, `set` entries
    (one key, several values) as one create and one update per value (only the update on a
    running VM)."""
    out = []
    for entry in spec:
        if "set" in entry:
            key = entry["set"]
            base = entry.get("base", {})
            running = bool(entry.get("running"))
            for value in entry["values"]:
                for via in entry.get("via", ["update"] if running else ["create", "update"]):
                    s = {"name": f"{entry['name']}: {key}={value!r} via {via}", "volumes": entry.get("volumes"),
                         "running": running}
                    if via == "create":
                        s["create"] = dict(base, **{key: value})
                    else:
                        s["create"] = dict(base)
                        s["update"] = [{key: value}]
                    out.append(s)
        else:
            out.append(entry)
    return out


# ------------------------------------------------------------------------------- the oracle

RUNNING_VM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "running_vm.pl")
CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.pl")

# An update's `call`: PVE's API method (calls.pl) and pve-sim's request for it.
CALL_METHODS = {"move_disk": ("move_vm_disk", "POST"), "unlink": ("unlink", "PUT")}


def has_calls(scenario):
    return any("call" in u for u in scenario.get("update") or [] if isinstance(u, dict))

# What the running-VM scenarios rest on: the oracle's VM never runs, so the harness runs its
# oracle.pl under running_vm.pl (the harness's own Perl, nothing of PVE's), which makes
# check_running answer a pid and fakes QEMU below vmconfig_hotplug_pending's decisions.
RUNNING_FAKES = ("a running VM (the harness's running_vm.pl: check_running answers a pid; QEMU accepts every "
                 "device_add/device_del, link, medium, throttle and balloon command; taps and systemd accept "
                 "every change; no other QMP command is answered and there is no monitor socket, so CPU and memory hotplug fail)")


def run_oracle(oracle_dir, scenarios):
    """The stopped-VM scenarios through one oracle process, the running-VM ones through another
    run under the harness's running_vm.pl; the answers in the scenarios' order."""
    answers = [None] * len(scenarios)
    for running, calls in ((False, False), (True, False), (False, True)):
        picked = [i for i, s in enumerate(scenarios)
                  if bool(s.get("running")) == running and has_calls(s) == calls]
        if not picked:
            continue
        preamble = CALLS if calls else RUNNING_VM if running else None
        for i, answer in zip(picked, run_oracle_process(oracle_dir, [scenarios[i] for i in picked], preamble)):
            answers[i] = answer
    return answers


def oracle_update(update):
    """An update as the oracle takes it: a `call` named by `harness-call` for calls.pl."""
    if not isinstance(update, dict) or "call" not in update:
        return update
    params = {k: v for k, v in update.items() if k != "call"}
    params["harness-call"] = CALL_METHODS[update["call"]][0]
    return params


def run_oracle_process(oracle_dir, scenarios, preamble):
    """Scenarios through one oracle process (its run.sh, or its oracle.pl under one of the
    harness's preambles); its answers in order."""
    lines = []
    for i, s in enumerate(scenarios):
        req = {"fn": "api", "id": i, "vmid": VMID, "create": s.get("create", {}),
               "update": [oracle_update(u) for u in s.get("update", [])]}
        if s.get("update_method"):
            req["update_method"] = s["update_method"]
        if s.get("volumes"):
            req["volumes"] = s["volumes"]
        lines.append(json.dumps(req))
    env = dict(os.environ, ORACLE_NO_MASK="1")
    if preamble:
        # run.sh's environment (the oracle's inc.sh, Perl's hash order fixed), then the harness's
        # preamble running the oracle's own oracle.pl.
        command = ["bash", "-c", '. "$1/inc.sh"; export PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0; '
                   'exec nice perl "$2" "$1/oracle.pl"', "preamble", oracle_dir, preamble]
    else:
        command = [os.path.join(oracle_dir, "run.sh")]
    proc = subprocess.run(command, input="\n".join(lines) + "\n", capture_output=True, text=True, env=env)
    answers = {}
    for line in proc.stdout.splitlines():
        a = json.loads(line)
        answers[a["id"]] = a.get("out") or {"error": a.get("error")}
    if len(answers) != len(scenarios):
        sys.exit(f"oracle answered {len(answers)} of {len(scenarios)} requests:\n{proc.stderr[-3000:]}")
    return [answers[i] for i in range(len(scenarios))]


def oracle_outcome(call):
    """A call's outcome as the harness compares it."""
    if call is None:
        return None
    err = call.get("http_error")
    if err:
        return refusal(err.get("code", 500), err.get("errors"), err.get("message"))
    status = call.get("task_exitstatus")
    if status is not None and status != "OK" and not status.startswith("WARNINGS"):
        return {"class": "task-failed", "gist": gist(status)}
    return {"class": "ok"}


def refusal(code, errors, message):
    out = {"class": f"{int(code) // 100}xx"}
    if errors:
        out["errors"] = {k: gist(v) for k, v in sorted(errors.items())}
    else:
        out["gist"] = gist(message)
    return out


def oracle_result(answer):
    res = {"create": oracle_outcome(answer.get("create")),
           "update": [oracle_outcome(u) for u in answer.get("update") or []]}
    if answer.get("config") is not None:
        res["config"] = answer["config"]
        res["pending"] = sorted(answer.get("pending") or [], key=lambda p: p["key"])
        res["file"] = answer.get("raw")
    return res


# ------------------------------------------------------------------------------- pve-sim

class Sim:
    """One pve-sim with node `pve` and the oracle's preset volumes."""

    def __init__(self, binary, work):
        self.work = work
        img = os.path.join(work, "disk.qcow2")
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", img, "2G"], check=True)
        self.proc = subprocess.Popen(
            [binary, "--data-dir", os.path.join(work, "data"), "--listen", "127.0.0.1:0", "--plain-http",
             "--nodes", NODE, "--auth-failure-delay", "0s", "--user", f"root@pam:{PASSWORD}", "--stats-interval", "0", "--time-scale", "0.001",
             "--seed-image", img],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=open(os.path.join(work, "sim.err"), "w"))
        self.info = json.loads(self.proc.stdout.readline())
        self.admin = urllib.parse.urlparse(self.info["admin"])
        self.auth = {}
        form = urllib.parse.urlencode({"username": "root@pam", "password": PASSWORD})
        _, _, login = self.request("POST", "/access/ticket", form)
        ticket = login["data"]
        self.auth = {"Cookie": f"PVEAuthCookie={ticket['ticket']}",
                     "CSRFPreventionToken": ticket["CSRFPreventionToken"]}
        local = os.path.join(work, "data", "nodes", NODE, "local")
        # The oracle's preset volumes, with its sizes (sparse files here).
        for name, size in [("template/iso/debian-12.iso", 658505728), ("template/iso/virtio-win.iso", 753524736),
                           ("snippets/user.yaml", 512)]:
            with open(os.path.join(local, name), "wb") as f:
                f.truncate(size)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()

    def request(self, method, path, body=None, admin=False):
        host, port = (self.admin.hostname, self.admin.port) if admin else ("127.0.0.1", self.info["port"])
        conn = http.client.HTTPConnection(host, port, timeout=120)
        headers = {} if admin else dict(self.auth)
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, ("" if admin else "/api2/json") + path, body=body, headers=headers)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        conn.close()
        try:
            data = json.loads(text) if not admin else text
        except json.JSONDecodeError:
            data = {"message": text}
        return resp.status, resp.reason, data

    def wait_task(self, upid):
        quoted = urllib.parse.quote(upid, safe="")
        for _ in range(1200):
            _, _, d = self.request("GET", f"/nodes/{NODE}/tasks/{quoted}/status")
            if (d.get("data") or {}).get("status") == "stopped":
                return d["data"].get("exitstatus")
            time.sleep(0.05)
        return "timeout waiting for the task"

    def outcome(self, status, reason, data):
        if status != 200:
            message = data.get("message") if isinstance(data, dict) else None
            return refusal(status, data.get("errors") if isinstance(data, dict) else None, message or reason)
        upid = data.get("data")
        if isinstance(upid, str) and upid.startswith("UPID:"):
            exit_status = self.wait_task(upid)
            if exit_status != "OK" and not str(exit_status).startswith("WARNINGS"):
                return {"class": "task-failed", "gist": gist(exit_status)}
        return {"class": "ok"}

    def run(self, s):
        create = s.get("create", {})
        body = form({"vmid": VMID}) + ("&" + form(create) if create else "")
        res = {"create": self.outcome(*self.request("POST", f"/nodes/{NODE}/qemu", body)), "update": []}
        if s.get("running"):
            started = self.outcome(*self.request("POST", f"/nodes/{NODE}/qemu/{VMID}/status/start", ""))
            if started != {"class": "ok"}:
                res["start"] = started
        method = s.get("update_method", "PUT")
        for u in s.get("update", []):
            if isinstance(u, dict) and "call" in u:
                call_method = CALL_METHODS[u["call"]][1]
                params = {k: v for k, v in u.items() if k != "call"}
                res["update"].append(self.outcome(*self.request(
                    call_method, f"/nodes/{NODE}/qemu/{VMID}/{u['call']}", form(params))))
                continue
            res["update"].append(self.outcome(*self.request(method, f"/nodes/{NODE}/qemu/{VMID}/config", form(u))))
        status, _, conf = self.request("GET", f"/nodes/{NODE}/qemu/{VMID}/config")
        if status == 200:
            res["config"] = conf.get("data")
            _, _, pend = self.request("GET", f"/nodes/{NODE}/qemu/{VMID}/pending")
            res["pending"] = sorted((p for p in pend.get("data") or []
                                     if p.get("pending") is not None or p.get("delete")), key=lambda p: p["key"])
            _, _, text = self.request("GET", f"/config-file/{VMID}", admin=True)
            res["file"] = json.loads(text).get("data")
        self.destroy()
        return res

    def destroy(self):
        status, _, d = self.request("POST", f"/nodes/{NODE}/qemu/{VMID}/status/stop", "")
        if status == 200 and isinstance(d.get("data"), str):
            self.wait_task(d["data"])
        self.request("PUT", f"/nodes/{NODE}/qemu/{VMID}/config", "delete=protection")
        status, _, d = self.request("DELETE", f"/nodes/{NODE}/qemu/{VMID}?purge=1&destroy-unreferenced-disks=1")
        if status == 200 and isinstance(d.get("data"), str):
            self.wait_task(d["data"])
        status, _, _ = self.request("GET", f"/nodes/{NODE}/qemu/{VMID}/config")
        if status == 200:
            raise SystemExit(f"pve-sim: VM {VMID} could not be destroyed between scenarios")


# ------------------------------------------------------------------------------- comparing

def differences(ours, theirs):
    """The parts where pve-sim and the oracle differ, as (what, pve-sim, oracle)."""
    out = []
    for part in ("create", "start", "update", "config", "pending", "file"):
        if ours.get(part) != theirs.get(part):
            out.append((part, ours.get(part), theirs.get(part)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oracle", default=os.path.join(ROOT, "..", "shared", "pve-oracle"))
    ap.add_argument("--sim", default=None)
    ap.add_argument("--scenarios", default=os.path.join(ROOT, "tests", "oracle", "scenarios.json"))
    ap.add_argument("--only", default=None, help="run only scenarios whose name contains this")
    ap.add_argument("--json", default=None, help="write every scenario's result here")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every difference in full")
    args = ap.parse_args()

    oracle = os.path.abspath(args.oracle)
    if not os.path.exists(os.path.join(oracle, "run.sh")):
        print(f"oracle-diff: skipped - the PVE oracle is not installed at {oracle} "
              "(it is a development tool; see issue 34)")
        return 2
    sim_bin = args.sim or next((p for p in (os.path.join(ROOT, "target", d, "pve-sim") for d in ("debug", "release"))
                                if os.path.exists(p)), None)
    if not sim_bin:
        print("oracle-diff: pve-sim is not built (cargo build -p pve-sim)")
        return 2

    with open(args.scenarios) as f:
        scenarios = expand(json.load(f))
    if args.only:
        scenarios = [s for s in scenarios if args.only in s["name"]]

    theirs = [oracle_result(a) for a in run_oracle(oracle, scenarios)]
    work = tempfile.mkdtemp(prefix="oracle-diff-")
    sim = Sim(sim_bin, work)
    try:
        ours = [sim.run(s) for s in scenarios]
    finally:
        sim.stop()
    shutil.rmtree(work, ignore_errors=True)

    agree = 0
    decided = []
    report = []
    for s, o, t in zip(scenarios, ours, theirs):
        mask = masker(json.dumps(s))
        o, t = mask(o), mask(t)
        diffs = differences(o, t)
        report.append({"name": s["name"], "agree": not diffs, "pve-sim": o, "oracle": t, "fakes": s.get("fakes"),
                       "running": bool(s.get("running"))})
        if not diffs:
            agree += 1
            continue
        if s.get("decided"):
            # A difference the oracle's fakes make; PVE's code decided for pve-sim.
            decided.append(s)
            print(f"DECIDED {s['name']}: {s['decided']}")
            continue
        fakes = "; ".join(f for f in (s.get("fakes"), RUNNING_FAKES if s.get("running") else None) if f)
        print(f"DIFF {s['name']}" + (f"  [depends on the oracle's fakes: {fakes}]" if fakes else ""))
        for part, a, b in diffs:
            if args.verbose:
                print(f"  {part}:\n    pve-sim: {json.dumps(a)}\n    oracle:  {json.dumps(b)}")
            else:
                print(f"  {part}: pve-sim {json.dumps(a)[:300]}\n  {' ' * len(part)}  oracle  {json.dumps(b)[:300]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    running = sum(1 for s in scenarios if s.get("running"))
    if running:
        print(f"oracle-diff: {running} of the scenarios update a running VM, which the oracle fakes: {RUNNING_FAKES}")
    print(f"oracle-diff: {agree} of {len(scenarios)} scenarios agree"
          + (f"; {len(decided)} more differ only where the oracle fakes, decided from PVE's code (DECIDED above)"
             if decided else ""))
    return 0 if agree + len(decided) == len(scenarios) else 1


if __name__ == "__main__":
    sys.exit(main())
