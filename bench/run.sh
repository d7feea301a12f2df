#!/usr/bin/env bash
# `make bench`: builds, sets up the peer's venv (the `ansible` package with community.proxmox,
# and proxmoxer) and the plot venv (matplotlib), and runs bench/bench.py, which writes
# bench/results/latest.md and the PNG plots beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/ansible/env.sh
mkdir -p .work/bench .work/collections/ansible_collections/sankofa
ln -sfn "$PWD" .work/collections/ansible_collections/sankofa/proxmox
for v in peer plot; do
  venv=.work/bench/$v-venv
  if [ ! -x "$venv/bin/python" ] || [ "bench/$v-requirements.txt" -nt "$venv/.installed" ]; then
    py=$(tests/ansible/find-python.sh)
    "$py" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "bench/$v-requirements.txt"
    touch "$venv/.installed"
  fi
done
.venv/bin/python bench/bench.py "$@"
