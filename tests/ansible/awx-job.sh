#!/usr/bin/env bash
# `make awx-job`: playbooks/demo.yml run twice as AWX and Automation Controller run a job, through
# ansible-runner (the engine they use) on a private data dir of the layout they write:
#   env/extravars    the job's extra vars (here: the pve-sim connection vars sim-ctl.sh writes)
#   env/envvars      the job's environment (ANSIBLE_COLLECTIONS_PATH: the collection installed
#                    from the tarball, argument 1, as an execution environment or a project's
#                    collections/requirements.yml installs it)
#   env/settings     runner's own settings (job and idle timeouts)
#   inventory/hosts  the job's inventory
#   project/         the project checkout the playbook comes from
# and checks each job's events (artifacts/<ident>/job_events/*.json, what AWX stores and shows):
# one runner_on_ok per host and task and no failure, the first job changed and the second not,
# the modules run from the installed copy, no secret in any event, and the first job's import
# (pve-sim at --import-rate 100M: about 20 s) shown live: at least three progress lines in the
# job's stdout and events before the vm task's runner_on_ok (the job runs at -vvv: one line
# per progress sample; the second job imports nothing and shows none).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
tarball=${1:?usage: tests/ansible/awx-job.sh build/sankofa-proxmox-VERSION.tar.gz (make dist writes it)}
dir=$root/.work/awx-job
tests/ansible/sim-ctl.sh stop "$dir" 2>/dev/null || true
rm -rf "$dir/job" "$dir/collections"
mkdir -p "$dir/job/env" "$dir/job/inventory" "$dir/job/project" "$dir/collections"
trap 'tests/ansible/sim-ctl.sh stop "$dir"' EXIT
tests/ansible/sim-ctl.sh start "$dir" --import-rate 100M > /dev/null
ansible-galaxy collection install --force "$tarball" -p "$dir/collections" > /dev/null 2>&1

job=$dir/job
cp "$dir/pve.yml" "$job/env/extravars"
cp playbooks/demo.yml "$job/project/demo.yml"
printf 'localhost ansible_connection=local ansible_python_interpreter=%s\n' "$(command -v python3)" \
  > "$job/inventory/hosts"
# Only the installed copy: not this checkout's link that the other tests use.
cat > "$job/env/envvars" <<EOF
---
ANSIBLE_COLLECTIONS_PATH: $dir/collections
ANSIBLE_HOME: $dir/ansible-home
ANSIBLE_NOCOLOR: "1"
EOF
cat > "$job/env/settings" <<'EOF'
---
job_timeout: 600
idle_timeout: 300
EOF

# ident, whether the job must report a change
for run in first:changed second:unchanged; do
  ident=${run%%:*}
  ansible-runner run "$job" -p demo.yml --ident "$ident" -vvv > "$dir/$ident.log" 2>&1 \
    || { cat "$dir/$ident.log"; echo "the $ident job failed (runner: $(cat "$job/artifacts/$ident/status" 2>/dev/null))" >&2; exit 1; }
  python3 - "$job/artifacts/$ident" "${run#*:}" "$dir/collections" <<'PY'
import glob, json, os, sys
artifacts, expected, installed = sys.argv[1], sys.argv[2], sys.argv[3]
status = open(os.path.join(artifacts, "status")).read().strip()
rc = open(os.path.join(artifacts, "rc")).read().strip()
events = [json.load(open(p)) for p in glob.glob(os.path.join(artifacts, "job_events", "*.json"))]
events.sort(key=lambda e: e["counter"])
problems = []
if (status, rc) != ("successful", "0"):
    problems.append(f"runner status {status}, rc {rc}")
kinds = [e["event"] for e in events]
for bad in ("runner_on_failed", "runner_on_unreachable", "runner_on_skipped", "runner_on_async_failed"):
    if bad in kinds:
        problems.append(f"{kinds.count(bad)} {bad} events")
hosts = {line.split()[0] for line in open(os.path.join(os.path.dirname(os.path.dirname(artifacts)), "inventory", "hosts"))}
tasks = [e["event_data"]["task"] for e in events if e["event"] == "playbook_on_task_start"]
ok = [e["event_data"] for e in events if e["event"] == "runner_on_ok"]
if not tasks:
    problems.append("no playbook_on_task_start events")
for task in tasks:
    per_host = sorted(d["host"] for d in ok if d["task"] == task)
    if per_host != sorted(hosts):
        problems.append(f"task {task!r}: runner_on_ok for {per_host}, not once for each of {sorted(hosts)}")
stats = [e["event_data"] for e in events if e["event"] == "playbook_on_stats"]
if len(stats) != 1:
    problems.append(f"{len(stats)} playbook_on_stats events")
else:
    changed = {h: n for h, n in stats[0].get("changed", {}).items() if n}
    if expected == "changed" and set(changed) != hosts:
        problems.append(f"the first job changed {changed}, not every host")
    if expected == "unchanged" and changed:
        problems.append(f"the second job changed {changed}")
    if stats[0].get("failures") or stats[0].get("dark"):
        problems.append(f"failures {stats[0].get('failures')}, unreachable {stats[0].get('dark')}")
VM_TASK = "Create, import, configure and start VM 100"
vm = [d for d in ok if d["task"] == VM_TASK]
# The live progress (plugins/plugin_utils/binary_module.py): Display lines, which runner keeps
# as verbose events and in the job's stdout, before the task's result.
vm_ok = next((e["counter"] for e in events if e["event"] == "runner_on_ok" and e["event_data"]["task"] == VM_TASK), None)
prefix = "TASK [%s] VM 100: import " % VM_TASK
progress = [(e["counter"], line) for e in events for line in e.get("stdout", "").splitlines()
            if line.startswith(prefix) and line.endswith(("%", ")"))]
stdout_progress = [line for line in open(os.path.join(artifacts, "stdout")).read().splitlines() if line.startswith(prefix)]
if expected == "changed":
    before = [line for counter, line in progress if vm_ok is not None and counter < vm_ok]
    if len(before) < 3:
        problems.append(f"{len(before)} progress lines before the vm task's result, expected 3 or more: {progress[:3]}")
    if len(stdout_progress) != len(progress):
        problems.append(f"{len(stdout_progress)} progress lines in the job's stdout, {len(progress)} in its events")
    else:
        print(f"ok: job {os.path.basename(artifacts)}: {len(before)} progress lines before the vm task's result, e.g. {before[len(before) // 2]!r}")
elif progress:
    problems.append(f"the second job showed progress lines: {progress[:2]}")
if vm and vm[0]["res"].get("changed") != (expected == "changed"):
    problems.append(f"the vm task reported changed={vm[0]['res'].get('changed')}")
if vm and vm[0]["res"].get("vmid") != 100:
    problems.append(f"the vm task's result names vmid {vm[0]['res'].get('vmid')}")
text = "\n".join(json.dumps(e) for e in events)
# -vvv: each module's path is in a verbose event's stdout.
used = [line for e in events for line in e.get("stdout", "").splitlines()
        if "Using module file" in line and "sankofa" in line]
ours = os.path.join(installed, "ansible_collections", "sankofa", "proxmox", "plugins", "bin")
if not used or not all(ours in line for line in used):
    problems.append(f"the modules did not run from the installed tarball: {used[:2]}")
for secret in ("pve-sim-demo", "5ec2e7a0-demo-token", "demo-only-password"):
    if secret in text:
        problems.append(f"a secret ({secret[:4]}…) is in the job events")
if problems:
    sys.exit(f"{artifacts}: " + "; ".join(problems))
print(f"ok: job {os.path.basename(artifacts)}: {len(events)} events, {len(ok)} runner_on_ok over "
      f"{len(tasks)} tasks and {len(hosts)} host(s), {expected}")
PY
done
echo "awx-job: 2 passed, 0 failed"
