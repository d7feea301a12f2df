"""Compares pve-sim's table of protected endpoints (sim/src/schema/endpoints.rs) with PVE's API
schema (a pve-api-*.json as the API viewer's apidoc.js holds it, given as the argument): every
row must name a method and path the schema has, with the schema's `protected` flag and handler
name. A developer's check: the schema file is not in this repository, so no test needs it.

    python3 sim/dev/check_protected.py /path/to/pve-api-9.1.json
"""

import json
import pathlib
import re
import sys

TABLE = pathlib.Path(__file__).resolve().parent.parent / "src" / "schema" / "endpoints.rs"
ROW = re.compile(r'endpoint\(\s*"(\w+)",\s*"([^"]+)",\s*"[^"]*",\s*"([^"]+)",\s*(true|false),?\s*\)')


def schema_methods(nodes, out):
    for node in nodes:
        for method, info in (node.get("info") or {}).items():
            out[(method, node["path"])] = (bool(info.get("protected")), info.get("name"))
        schema_methods(node.get("children") or [], out)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    schema = schema_methods(json.loads(pathlib.Path(sys.argv[1]).read_text()), {})
    rows = ROW.findall(TABLE.read_text())
    if not rows:
        sys.exit(f"no rows found in {TABLE}")
    wrong = []
    for method, path, handler, protected in rows:
        found = schema.get((method, path))
        if found is None:
            wrong.append(f"{method} {path}: not in the schema")
        elif found != (protected == "true", handler):
            wrong.append(f"{method} {path}: table says protected={protected} handler={handler}, "
                         f"schema says protected={str(found[0]).lower()} handler={found[1]}")
    for line in wrong:
        print(line)
    print(f"{len(rows)} rows checked, {len(wrong)} differ")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
