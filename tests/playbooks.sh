#!/usr/bin/env bash
# Runs every playbook under playbooks/ against pve-sim and checks what each should do.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/env.sh
dir=.work/playbooks
tests/sim-ctl.sh stop "$dir" 2>/dev/null || true
trap 'tests/sim-ctl.sh stop "$dir"' EXIT
tests/sim-ctl.sh start "$dir" --import-rate 2G
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
grep -q 'web2 is VM 101 on pve1 (running)' "$dir/create.log"
run async playbooks/async_import.yml
grep -q 'VM 120 on pve1: create' "$dir/async.log"
run defaults playbooks/module_defaults.yml
grep -q 'would update cores VM 130 on pve1' "$dir/defaults.log"
run teardown playbooks/teardown.yml -e '{"vm_ids": [100, 120], "vm_names": ["web2"]}'
recap "$dir/teardown.log" | grep -q 'failed=0'
curl -s --cacert "$dir/data/pve-root-ca.pem" -H 'Authorization: PVEAPIToken=root@pam!sankofa=5ec2e7a0-demo-token' \
  "https://127.0.0.1:$(python3 -c 'import json; print(json.load(open(".work/playbooks/data/sim.json"))["port"])')/api2/json/cluster/resources?type=vm" > "$dir/left.json"
left=$(python3 -c 'import json; print(len(json.load(open(".work/playbooks/left.json"))["data"]))')
[ "$left" = 0 ] || { echo "teardown left $left VMs" >&2; exit 1; }
echo "playbooks: 6 passed, 0 failed"
