#!/usr/bin/env bash
# Installs the collection tarball `make dist` wrote (argument 1) into a temp dir, checks that
# its Linux binaries (plugins/bin/linux-*/) need at most glibc 2.17, and runs one ad-hoc `ansible
# localhost -m sankofa.proxmox.vm` call against the installed copy, which runs the binary of
# this controller's platform.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
tarball=${1:?usage: tests/ansible/galaxy-smoke.sh build/sankofa-proxmox-VERSION.tar.gz (make dist writes it)}
dir=.work/galaxy
rm -rf "$dir/installed" && mkdir -p "$dir/installed"
listing=$(tar tvzf "$tarball")
platform=$(uname -s | tr '[:upper:]' '[:lower:]')-$(uname -m | sed 's/^arm64$/aarch64/')
for m in vm image snapshot vm_info; do
  grep -q -- "-rwxr-xr-x .* plugins/bin/$platform/$m\$" <<< "$listing" || { echo "the tarball lacks an executable plugins/bin/$platform/$m" >&2; exit 1; }
  grep -q -- " plugins/modules/$m.py\$" <<< "$listing" || { echo "the tarball lacks plugins/modules/$m.py (what ansible-doc -l lists)" >&2; exit 1; }
  grep -q -- " plugins/action/$m.py\$" <<< "$listing" || { echo "the tarball lacks plugins/action/$m.py (what runs the binary)" >&2; exit 1; }
done
if grep -Eq ' (target|\.venv|\.work|bench)/' <<< "$listing"; then echo "the tarball carries build outputs" >&2; exit 1; fi
ansible-galaxy collection install --force "$tarball" -p "$dir/installed" > /dev/null 2>&1
# Older controllers (RHEL 8, Ubuntu 20.04, Debian 11) have glibc 2.28-2.31: the binaries users
# install must not need more than 2.17.
installed="$dir/installed/ansible_collections/sankofa/proxmox"
for bin in "$installed"/plugins/bin/linux-*/*; do
  name=${bin#"$installed/"}
  need=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
  if [ "$(printf '%s\n2.17\n' "$need" | sort -V | tail -1)" != "2.17" ]; then
    echo "$name needs glibc $need (more than 2.17)" >&2; exit 1
  fi
  echo "$name: needs glibc $need"
done
tests/ansible/platform-smoke.sh "$tarball"
tests/ansible/sim-ctl.sh stop "$dir" 2>/dev/null || true
trap 'tests/ansible/sim-ctl.sh stop "$dir"' EXIT
tests/ansible/sim-ctl.sh start "$dir" > /dev/null
read -r port fp < <(python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(s["port"], s["fingerprint"])' "$dir/data/sim.json")
export ANSIBLE_COLLECTIONS_PATH="$PWD/$dir/installed"
ANSIBLE_DOC="$(ansible-doc sankofa.proxmox.vm)"
grep -q 'import_from' <<< "$ANSIBLE_DOC" || { echo "ansible-doc does not render the vm module" >&2; exit 1; }
# `ansible-doc -l` lists every module of the installed copy, each with its short description.
listed=$(ansible-doc -l sankofa.proxmox 2>&1)
for doc in "$installed"/plugins/modules/*.yml; do
  m=$(basename "$doc" .yml)
  grep -Eq "^sankofa\.proxmox\.$m +[A-Z]" <<< "$listed" || { echo "$listed"; echo "ansible-doc -l does not list sankofa.proxmox.$m" >&2; exit 1; }
done
grep -qi 'warning' <<< "$listed" && { echo "$listed"; echo "ansible-doc -l warned" >&2; exit 1; }
out=$(PROXMOX_PASSWORD=pve-sim-demo ansible localhost -m sankofa.proxmox.vm \
  -a "api_host=127.0.0.1 api_port=$port api_fingerprint=$fp node=pve1 vmid=150 name=adhoc disks=[{\"slot\":\"scsi0\",\"storage\":\"local-lvm\",\"size\":\"1G\"}] cores=1" -vvv)
echo "$out" | grep -q "Using module file .*/galaxy/installed/ansible_collections/sankofa/proxmox/plugins/bin/$platform/vm" || { echo "$out"; echo "not the installed copy" >&2; exit 1; }
echo "$out" | grep -q '"vmid": 150' || { echo "$out"; exit 1; }
echo "$out" | grep -q 'pve-sim-demo' && { echo "the password leaked into the output" >&2; exit 1; }
echo "galaxy-smoke: 1 passed, 0 failed"
