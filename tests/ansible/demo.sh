#!/usr/bin/env bash
# `make demo`: pve-sim with a cloud-image-like qcow2, playbooks/demo.yml twice, then stop.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
dir=.work/demo
tests/ansible/sim-ctl.sh stop "$dir" 2>/dev/null || true
trap 'tests/ansible/sim-ctl.sh stop "$dir"' EXIT
# Throttled like real storage: the import of the 2 GiB image takes a few seconds.
tests/ansible/sim-ctl.sh start "$dir" --import-rate 600M
echo
echo "=== First run: create VM 100 from local:import/noble-server-cloudimg-amd64.qcow2"
ansible-playbook -i localhost, -e @"$dir/pve.yml" playbooks/demo.yml
echo
echo "=== Second run: the VM matches, nothing to change"
ansible-playbook -i localhost, -e @"$dir/pve.yml" playbooks/demo.yml | tee "$dir/second-run.log"
grep -Eq 'localhost +: ok=[0-9]+ +changed=0 ' "$dir/second-run.log" || { echo "the second run changed something" >&2; exit 1; }
echo
echo "Demo done: VM 100 was built from the image, and the second run reported changed=0."
echo "The simulator's request log is in $dir/data/requests.jsonl; it has been stopped."
