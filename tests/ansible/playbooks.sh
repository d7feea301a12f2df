#!/usr/bin/env bash
# Runs every playbook under playbooks/ against pve-sim and checks what each should do.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
# The inventory plugin's unit tests: which per-VM reads its options cause.
PYTHONPATH="$ANSIBLE_COLLECTIONS_PATH" python3 tests/unit/plugins/inventory/test_proxmox.py
dir=.work/playbooks
tests/ansible/sim-ctl.sh stop "$dir" 2>/dev/null || true
trap 'tests/ansible/sim-ctl.sh stop "$dir"' EXIT
tests/ansible/sim-ctl.sh start "$dir" --import-rate 2G --nodes pve1,pve2,pve3 --time-scale 0.5
vars=(-i localhost, -e @"$dir/pve.yml")
recap() { grep -E '^localhost +:' "$1"; }
run() {
  local name=$1; shift
  echo "=== $name"
  ansible-playbook "${vars[@]}" "$@" | tee "$dir/$name.log"
}
run demo playbooks/demo.yml
recap "$dir/demo.log" | grep -q 'changed=2 '
run demo-again playbooks/demo.yml
recap "$dir/demo-again.log" | grep -q 'changed=0 '
run create playbooks/create_from_cloud_image.yml -e vm_name=web2
grep -qE 'web2 is VM [0-9]+ on pve1 \(running\)' "$dir/create.log"
run connect playbooks/create_and_connect.yml -e vm_name=web3 -e vm_connect=false
grep -qE 'web3 is VM [0-9]+ on pve1 at 10\.0\.' "$dir/connect.log"
run templates playbooks/template_and_clones.yml
recap "$dir/templates.log" | grep -q 'changed=2 '
grep -q 'app3 is VM [0-9]* (running), disk local-lvm:base-9000-disk-0/vm-' "$dir/templates.log"
run templates-again playbooks/template_and_clones.yml
recap "$dir/templates-again.log" | grep -q 'changed=0 '
run templates-teardown playbooks/teardown.yml -e '{"vm_ids": [], "vm_names": ["app1", "app2", "app3"]}'
run templates-teardown2 playbooks/teardown.yml -e '{"vm_ids": [9000], "vm_names": []}'
run async playbooks/async_import.yml
grep -q 'VM 120 on pve1: create' "$dir/async.log"
run defaults playbooks/module_defaults.yml
grep -q 'would update cores VM 130 on pve1' "$dir/defaults.log"
run teardown playbooks/teardown.yml -e '{"vm_ids": [100, 120], "vm_names": ["web2", "web3"]}'
recap "$dir/teardown.log" | grep -q 'failed=0'
curl -s --cacert "$dir/data/pve-root-ca.pem" -H 'Authorization: PVEAPIToken=root@pam!sankofa=5ec2e7a0-demo-token' \
  "https://127.0.0.1:$(python3 -c 'import json; print(json.load(open(".work/playbooks/data/sim.json"))["port"])')/api2/json/cluster/resources?type=vm" > "$dir/left.json"
left=$(python3 -c 'import json; print(len(json.load(open(".work/playbooks/left.json"))["data"]))')
[ "$left" = 0 ] || { echo "teardown left $left VMs" >&2; exit 1; }

# Secrets at -vvvv, with and without no_log, through a success and a failure.
for nolog in false true; do
  run "secrets-$nolog" playbooks/secrets_check.yml -vvvv -e use_no_log=$nolog
  for secret in Ci-Secret-From-Playbook-4242 pve-sim-demo 5ec2e7a0-demo-token; do
    if grep -q -- "$secret" "$dir/secrets-$nolog.log" "$dir/data/requests.jsonl"; then
      echo "secret $secret leaked (no_log=$nolog)" >&2; exit 1
    fi
  done
done

# 50 parallel creates with automatic ids through ansible-playbook, forks 50, 3 nodes.
inv="$dir/parallel.ini"
{ echo "[vms]"; for i in $(seq 0 49); do echo "par$i vm_node=pve$(( i % 3 + 1 ))"; done; } > "$inv"
run parallel playbooks/parallel_create.yml -i "$inv" -f 50
ids=$(grep -oE '"par[0-9]+=[0-9]+"' "$dir/parallel.log" | cut -d= -f2 | tr -d '"' | sort -u | wc -l)
[ "$ids" = 50 ] || { echo "parallel creates: $ids distinct ids, expected 50" >&2; exit 1; }
echo "playbooks: 11 passed, 0 failed"

# The demo's playbook again, as the README's quick start token (privsep, its role on the pool).
tests/ansible/scoped-demo.sh

# Live progress of a long import in the play's output (its own pve-sim, a slower import).
tests/ansible/progress.sh
