#!/usr/bin/env bash
# Prints the path of a Python >= 3.12 (current ansible-core needs it), or explains what to install.
# With two arguments (`3.10 3.12`), one between those versions (the oldest ansible-core we test).
set -u
lo=${1:-3.12}
hi=${2:-3.99}
candidates=()
[ -n "${PYTHON:-}" ] && candidates+=("$PYTHON")
candidates+=(python3.13 python3.12 python3.11 python3.10 python3)
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
for d in "$root"/versions/3.1[0-9]*/bin/python3 /usr/local/bin/python3.1[0-9] /usr/bin/python3.1[0-9]; do
  [ -x "$d" ] && candidates+=("$d")
done
for c in "${candidates[@]}"; do
  p=$(command -v "$c" 2>/dev/null) || continue
  if "$p" -c 'import sys, venv
lo, hi = (tuple(int(x) for x in v.split(".")) for v in sys.argv[1:3])
sys.exit(0 if lo <= sys.version_info[:2] <= hi else 1)' "$lo" "$hi" 2>/dev/null; then
    echo "$p"
    exit 0
  fi
done
cat >&2 <<MSG
No Python between $lo and $hi found (ansible-core 2.21 needs >= 3.12; 2.16 runs on 3.10-3.12).
Install one, then re-run:
  Debian/Ubuntu:  sudo apt-get install python3.12 python3.12-venv   (or python3.13)
  pyenv:          pyenv install 3.12
  or point PYTHON at one:  make demo PYTHON=/path/to/python3.12
MSG
exit 1
