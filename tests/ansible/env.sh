# Sourced by the test scripts: use this checkout's venv and collection, never ~/.ansible.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# ANSIBLE_VENV picks another venv (the oldest ansible-core claimed, say).
export PATH="${ANSIBLE_VENV:-$root/.venv}/bin:$PATH"
export ANSIBLE_HOME="$root/.work/ansible-home"
export ANSIBLE_COLLECTIONS_PATH="$root/.work/collections"
export ANSIBLE_LOCAL_TEMP="$root/.work/ansible-tmp"
export ANSIBLE_REMOTE_TEMP="$root/.work/ansible-remote-tmp"
export ANSIBLE_NOCOLOR=1
