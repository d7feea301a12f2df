#!/usr/bin/env bash
# playbooks/demo.yml (what `make demo` runs) with the README's quick start identity: a token
# with privilege separation holding the quick start's role on the pool `automation`, granted
# by the Permissions guide's own `pveum` commands (turned into pve-sim's user.cfg below). Both
# runs must succeed (the second with changed=0), VM 100 must land in the pool, and every
# request must have used the token. Run by tests/ansible/playbooks.sh (`make playbooks`).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
dir=.work/scoped-demo
guide=docs/docsite/rst/guide_permissions.rst
secret=7d3f9a10-scoped-demo-token
tests/ansible/sim-ctl.sh stop "$dir" 2>/dev/null || true
trap 'tests/ansible/sim-ctl.sh stop "$dir"' EXIT
mkdir -p "$dir"
# The guide's setup and quick start commands, as the user.cfg they leave (pve-access-control's
# syntax): pool, user, token, roles, ACLs.
python3 - "$guide" "$dir/user.cfg" <<'PY'
import re, shlex, sys
guide, out = sys.argv[1], sys.argv[2]
text = open(guide).read()
def commands(title):
    section = text.split(f"\n{title}\n", 1)[1].split("\n\n.. code-block:: console\n\n", 1)[1]
    lines = []
    for line in section.splitlines():
        if not line.startswith("   pveum "):
            break
        lines.append(shlex.split(line.strip())[1:])
    return lines
pools, users, tokens, roles, acls = {}, [], [], [], []
for cmd in commands("The setup") + commands("The quick start"):
    opts = {cmd[i][2:]: cmd[i + 1] for i in range(len(cmd)) if cmd[i].startswith("--")}
    words = [w for i, w in enumerate(cmd) if not w.startswith("--") and not (i and cmd[i - 1].startswith("--"))]
    match words[:2]:
        case ["pool", "add"]: pools[words[2]] = ""
        case ["pool", "modify"]: pools[words[2]] = opts["storage"]
        case ["user", "add"]: users.append(words[2])
        case ["user", "token"]: tokens.append((f"{words[3]}!{words[4]}", opts["privsep"]))
        case ["role", "add"]: roles.append((words[2], ",".join(opts["privs"].split())))
        case ["acl", "modify"]:
            who = ",".join(opts[k] for k in ("users", "tokens") if k in opts)
            acls.append((opts["propagate"], words[2], who, opts["roles"]))
        case _: sys.exit(f"{guide}: a pveum command this test does not know: {cmd}")
assert pools and tokens and roles and acls, (pools, tokens, roles, acls)
with open(out, "w") as f:
    f.write("user:root@pam:1:0:::root@example.com:::\n")
    for user in users:
        f.write(f"user:{user}:1:0::::::\n")
    for token, privsep in tokens:
        f.write(f"token:{token}:0:{privsep}::\n")
    for pool, storages in pools.items():
        f.write(f"pool:{pool}:::{storages}:\n")
    for role, privs in roles:
        f.write(f"role:{role}:{privs}:\n")
    for propagate, path, who, role in acls:
        f.write(f"acl:{propagate}:{path}:{who}:{role}:\n")
PY
token_id=$(sed -n 's/^token:\([^:]*\):.*/\1/p' "$dir/user.cfg")
[ "$(echo "$token_id" | wc -l)" = 1 ] || { echo "the guide's setup makes more than one token" >&2; exit 1; }
grep -q "^token:$token_id:0:1::$" "$dir/user.cfg" || { echo "the guide's token has no privilege separation" >&2; exit 1; }
tests/ansible/sim-ctl.sh start "$dir" --import-rate 2G --user-cfg "$dir/user.cfg" --token "$token_id=$secret"
# The connection vars sim-ctl wrote, with the token in place of root's password.
python3 - "$dir/pve.yml" "$dir/scoped.yml" "$token_id" "$secret" <<'PY'
import json, sys
src, out, token_id, secret = sys.argv[1:]
with open(out, "w") as f:
    for line in open(src):
        if not line.startswith(("pve_api_user:", "pve_api_password:", "pve_api_token_id:", "pve_api_token_secret:")):
            f.write(line)
    f.write(f"pve_api_token_id: {json.dumps(token_id)}\npve_api_token_secret: {json.dumps(secret)}\n")
    f.write('pve_pool: "automation"\n')
PY
vars=(-i localhost, -e @"$dir/scoped.yml")
recap() { grep -E '^localhost +:' "$1"; }
echo "=== scoped-demo (token $token_id, the quick start's role on /pool/automation)"
ansible-playbook "${vars[@]}" playbooks/demo.yml | tee "$dir/first.log"
recap "$dir/first.log" | grep -qE 'changed=2 .*failed=0' || { echo "the scoped demo did not make the image and VM 100" >&2; exit 1; }
echo "=== scoped-demo again"
ansible-playbook "${vars[@]}" playbooks/demo.yml | tee "$dir/again.log"
recap "$dir/again.log" | grep -qE 'changed=0 .*failed=0' || { echo "the scoped demo's second run changed something" >&2; exit 1; }
python3 - "$dir/data/requests.jsonl" "$dir/data/sim.json" "$token_id" <<'PY'
import json, sys, urllib.request, ssl
log, info, token_id = sys.argv[1:]
requests = [json.loads(line) for line in open(log) if line.strip()]
users = {r["user"] for r in requests if r.get("user")}
assert users == {token_id}, f"requests were made as {users}, not only as {token_id}"
tasks = [json.loads(line) for line in open(log.replace("requests.jsonl", "tasks.jsonl")) if line.strip()]
types = sorted(t["type"] for t in tasks)
assert all(f":{token_id}:" in t["upid"] for t in tasks), tasks
assert "qmcreate" in types and "download" in types, types
s = json.load(open(info))
ctx = ssl.create_default_context(cafile=s["ca"])
req = urllib.request.Request(f"https://{s['host']}:{s['port']}/api2/json/pools/automation",
                             headers={"Authorization": "PVEAPIToken=root@pam!sankofa=5ec2e7a0-demo-token"})
members = json.load(urllib.request.urlopen(req, context=ctx))["data"]["members"]
vms = [m["vmid"] for m in members if m.get("type") == "qemu"]
assert vms == [100], f"pool automation holds {vms}, not VM 100"
print(f"scoped-demo: VM 100 in pool automation; {len(requests)} requests and the tasks {types}, all by {token_id}")
PY
echo "scoped-demo: passed"
