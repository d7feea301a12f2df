#!/usr/bin/env bash
# Installs a collection tarball (argument 1) into a temp dir and runs its vm module once on
# this machine through `ansible localhost`, with a bad argument so that no Proxmox VE is needed:
# the answer must come from the binary of this machine's platform (plugins/bin/<platform>/vm)
# and name the argument. galaxy-smoke.sh runs it here; the release workflow runs it on each of
# its runners (Linux x86_64 and aarch64, macOS x86_64 and arm64).
set -euo pipefail
tarball=${1:?usage: tests/ansible/platform-smoke.sh build/sankofa-proxmox-VERSION.tar.gz}
platform=$(uname -s | tr '[:upper:]' '[:lower:]')-$(uname -m | sed 's/^arm64$/aarch64/')
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ansible-galaxy collection install --force "$tarball" -p "$dir/installed" > /dev/null 2>&1
if out=$(ANSIBLE_COLLECTIONS_PATH="$dir/installed" ANSIBLE_HOME="$dir/home" ANSIBLE_NOCOLOR=1 \
  ansible localhost -m sankofa.proxmox.vm -a 'api_host=127.0.0.1 vmid=banana' -vvv 2>&1); then
  echo "$out"; echo "the vm module accepted vmid=banana" >&2; exit 1
fi
grep -q "Using module file .*/sankofa/proxmox/plugins/bin/$platform/vm" <<< "$out" \
  || { echo "$out"; echo "not the $platform binary of the installed tarball" >&2; exit 1; }
grep -q "argument 'vmid' is of type str and we were unable to convert to int" <<< "$out" \
  || { echo "$out"; echo "the $platform binary did not answer" >&2; exit 1; }
echo "platform-smoke: 1 passed, 0 failed ($platform)"
