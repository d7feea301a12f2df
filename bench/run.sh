#!/usr/bin/env bash
# `make bench`: builds, sets up the peer's venv (the `ansible` package with community.proxmox,
# and proxmoxer), and runs bench/bench.py, which writes bench/results/latest.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/env.sh
mkdir -p .work/bench .work/collections/ansible_collections/sankofa
ln -sfn "$PWD" .work/collections/ansible_collections/sankofa/proxmox
peer=.work/bench/peer-venv
if [ ! -x "$peer/bin/ansible" ]; then
  py=$(tests/find-python.sh)
  "$py" -m venv "$peer"
  "$peer/bin/pip" install --quiet --disable-pip-version-check -r bench/peer-requirements.txt
fi
.venv/bin/python bench/bench.py "$@"
