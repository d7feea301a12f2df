#!/usr/bin/env bash
# Prints the path of a Python >= 3.12 (current ansible-core needs it), or explains what to install.
set -u
candidates=()
[ -n "${PYTHON:-}" ] && candidates+=("$PYTHON")
candidates+=(python3.13 python3.12 python3)
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
for d in "$root"/versions/3.1[2-9]*/bin/python3 /usr/local/bin/python3.1[2-9] /usr/bin/python3.1[2-9]; do
  [ -x "$d" ] && candidates+=("$d")
done
for c in "${candidates[@]}"; do
  p=$(command -v "$c" 2>/dev/null) || continue
  if "$p" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
    echo "$p"
    exit 0
  fi
done
cat >&2 <<'MSG'
No Python >= 3.12 found (ansible-core 2.21 needs it). Install one, then re-run:
  Debian/Ubuntu:  sudo apt-get install python3.12 python3.12-venv   (or python3.13)
  pyenv:          pyenv install 3.12
  or point PYTHON at one:  make demo PYTHON=/path/to/python3.12
MSG
exit 1
