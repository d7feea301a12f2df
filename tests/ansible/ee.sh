#!/usr/bin/env bash
# Checks the execution-environment metadata: ansible-builder reads the collection's
# meta/execution-environment.yml (introspect, on the installed tarball), and creates a build
# context for tests/ansible/ee/execution-environment.yml (create: no container engine needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
tarball=${1:?usage: tests/ansible/ee.sh build/sankofa-proxmox-VERSION.tar.gz}
dir=.work/ee
rm -rf "$dir" && mkdir -p "$dir/collections"
ansible-galaxy collection install --force "$tarball" -p "$dir/collections" > /dev/null 2>&1
[ -f "$dir/collections/ansible_collections/sankofa/proxmox/meta/execution-environment.yml" ] \
  || { echo "the tarball lacks meta/execution-environment.yml" >&2; exit 1; }
deps=$(ansible-builder introspect --sanitize "$dir/collections")
echo "$deps"
grep -qx 'python: \[\]' <<< "$deps" && grep -qx 'system: \[\]' <<< "$deps" \
  || { echo "unexpected EE dependencies" >&2; exit 1; }
# The EE definition takes the tarball from build/ under a fixed name.
cp "$tarball" build/sankofa-proxmox.tar.gz
ansible-builder create -f tests/ansible/ee/execution-environment.yml -c "$dir/context" > "$dir/create.log"
# Containerfile for podman, Dockerfile where docker is the runtime found.
grep -qs 'ansible-galaxy collection install' "$dir"/context/{Containerfile,Dockerfile} \
  || { echo "no Containerfile made" >&2; exit 1; }
[ -f "$dir/context/_build/collections/sankofa-proxmox.tar.gz" ] \
  || { echo "the collection is not in the build context" >&2; exit 1; }
echo "ee: 1 passed, 0 failed"
