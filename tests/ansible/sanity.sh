#!/usr/bin/env bash
# ansible-test sanity on an installed copy of the collection (ansible-test needs the path
# .../ansible_collections/sankofa/proxmox), offline-safe: ansible-test's get-pip download is
# replaced by tests/ansible/sanity/get_pip_shim.py, and HOME points into .work so nothing lands in ~.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
root=$PWD
dir=$root/.work/sanity
rm -rf "$dir/root" && mkdir -p "$dir/root" "$dir/home"
ansible-galaxy collection install --force . -p "$dir/root" > /dev/null
coll="$dir/root/ansible_collections/sankofa/proxmox"
export HOME="$dir/home"
mkdir -p "$HOME/.ansible/test/cache"
# ansible-test bootstraps pip in its test venvs (python_requirements.get_venv_packages):
# 25.2 for ansible-core 2.21, 23.1.2 for 2.16.
for v in 25_2 23_1_2; do
  cp tests/ansible/sanity/get_pip_shim.py "$HOME/.ansible/test/cache/get_pip_$v.py"
done
cd "$coll"
# ansible-test lists the collection's files through git: the built binaries are ignored by
# the checkout's .gitignore, so drop it in this copy, or they would not count as present.
rm -f .gitignore
git init -q . && git add -A && git -c user.name=ci -c user.email=ci@localhost commit -qm sanity
py=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
ansible-test sanity --python "$py" --color no 2>&1 | tee "$dir/sanity.log"
echo "sanity: 1 passed, 0 failed"
