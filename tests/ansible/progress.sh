#!/usr/bin/env bash
# Live progress in the play's output (plugins/plugin_utils/binary_module.py, progress.py): a long
# import (pve-sim at --import-rate 100M: a 2 GiB image takes about 20 s) through
# ansible-playbook, and where the action plugin shows its progress and where it does not:
#  - the display's thresholds, as unit tests (tests/unit/plugins/plugin_utils/test_progress.py);
#  - a local connection: at least three progress lines in the output between the task's banner
#    and its result, and check mode, diff and a module failure read as Ansible reads them;
#  - -v: a line for every progress sample the wait saw (the result's tasks[0].progress.history);
#  - async, no_log, and a host reached through another connection (tests/ansible/platforms'
#    fake_uname, which runs commands here as a remote host would): no progress line, and
#    (but for no_log) the result still carries tasks[].progress.
# Run by tests/ansible/playbooks.sh (make playbooks, make oldest-ansible); needs
# `make build venv collection`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
dir=$PWD/.work/progress
tests/ansible/sim-ctl.sh stop "$dir" 2>/dev/null || true
trap 'tests/ansible/sim-ctl.sh stop "$dir"' EXIT
PYTHONPATH="$ANSIBLE_COLLECTIONS_PATH" python3 tests/unit/plugins/plugin_utils/test_progress.py
tests/ansible/sim-ctl.sh start "$dir" --import-rate 100M > /dev/null
export ANSIBLE_CONNECTION_PLUGINS=$PWD/tests/ansible/platforms/connection_plugins
printf 'local ansible_connection=local\n' > "$dir/local.ini"
printf "remote ansible_connection=fake_uname fake_uname='%s'\n" "$(uname -sm)" > "$dir/remote.ini"
passed=0

# run NAME INVENTORY [ansible-playbook options]: the import playbook, its output in $dir/NAME.log
# and, each line with the time it came, in $dir/NAME.stamped
run() {
  local name=$1 inventory=$2; shift 2
  ansible-playbook -i "$dir/$inventory" -e @"$dir/pve.yml" "$@" tests/ansible/progress/import.yml 2>&1 \
    | python3 -u -c 'import sys, time
for line in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.time(), line))' > "$dir/$name.stamped" \
    || { cut -d' ' -f2- "$dir/$name.stamped"; echo "progress: the $name run failed" >&2; exit 1; }
  cut -d' ' -f2- "$dir/$name.stamped" > "$dir/$name.log"
  grep -Eq ' : ok=[0-9]+ +changed=[0-9]+ +unreachable=0 +failed=0 ' "$dir/$name.log" \
    || { cat "$dir/$name.log"; echo "progress: the $name run had a failure" >&2; exit 1; }
}
# lines NAME: the progress lines of the import task, up to its result ("changed: [host]")
lines() {
  awk '/^TASK \[Import a cloud image into a new VM\] \*/ {on = 1; next}
       on && /^(changed|ok|fatal|failed): \[/ {exit}
       on && /^TASK \[Import a cloud image into a new VM\] VM [0-9]+: import .* [0-9]+ %/ {print}' "$dir/$1.log"
}
# samples NAME: how many progress samples the wait saw (the playbook shows it)
samples() { grep -oE 'progress samples: [0-9]+' "$dir/$1.log" | grep -oE '[0-9]+$'; }
none() {
  local name=$1 why=$2
  if grep -q 'Import a cloud image into a new VM\] VM' "$dir/$name.log"; then
    cat "$dir/$name.log"; echo "progress: $why showed progress lines" >&2; exit 1
  fi
  echo "ok: $why: no progress line${3:+, }${3:-}"
  passed=$((passed + 1))
}

run live local.ini -e vm_id=201 -e vm_checks=true
shown=$(lines live | wc -l)
[ "$shown" -ge 3 ] || { cat "$dir/live.log"; echo "progress: $shown progress lines before the result, expected 3 or more" >&2; exit 1; }
grep -q 'Check mode and the failure came through as Ansible reads them' "$dir/live.log"
# Shown while the import ran, not at its end: the first line came seconds before the result.
early=$(awk '$2 == "TASK" && $3 == "[Import" && / VM [0-9]+: import / {print $1; exit}' "$dir/live.stamped")
result=$(awk '$2 == "changed:" {print $1; exit}' "$dir/live.stamped")
python3 -c "import sys; sys.exit(0 if float('$result') - float('$early') >= 5 else 1)" \
  || { cat "$dir/live.stamped"; echo "progress: the first progress line came $early, the result $result: not live" >&2; exit 1; }
echo "ok: a local connection: $shown progress lines before the task's result, the first $(python3 -c "print(round($result - $early))") s before it:"
lines live | sed 's/^/    /'
passed=$((passed + 1))

run verbose local.ini -e vm_id=202 -v
shown=$(lines verbose | wc -l)
[ "$shown" = "$(samples verbose)" ] && [ "$shown" -ge 3 ] \
  || { cat "$dir/verbose.log"; echo "progress: -v showed $shown lines for $(samples verbose) samples" >&2; exit 1; }
echo "ok: -v: a line for each of the $shown progress samples"
passed=$((passed + 1))

run async local.ini -e vm_id=203 -e vm_async=600
none async "async" "$(samples async) samples in the result"
run nolog local.ini -e vm_id=204 -e vm_no_log=true
none nolog "no_log"
run remote remote.ini -e vm_id=205
none remote "another connection (fake_uname)" "$(samples remote) samples in the result"
echo "progress: $passed passed, 0 failed"
