#!/usr/bin/python3
"""Checks the layer rule of STYLE.md: a folder under src/ includes only
itself and the folders beneath it (server -> store/persist -> filter; the
server's own folders: edge -> security -> observability -> config).

  tests/layering/check_layers.py [repo root]

Exit 1 and one line per offending #include otherwise. Run by ctest
(LayeringTest), so a new upward include fails the suite, not a review.
"""
import pathlib
import re
import sys

# Each folder and what it may include besides itself. Order matters only
# for readability: lowest first.
BELOW = {
    "base": set(),
    "filter": {"base"},
    "cluster": {"base"},
    "store": {"base", "filter"},
    "persist": {"base", "filter", "store"},
    "ingest": {"base", "filter", "cluster", "store", "persist"},
    "server/config": {"base", "filter", "cluster", "store", "persist", "ingest"},
}
BELOW["server/observability"] = BELOW["server/config"] | {"server/config"}
BELOW["server/security"] = BELOW["server/observability"] | {"server/observability"}
BELOW["server"] = BELOW["server/security"] | {"server/security"}
BELOW["client"] = {"base", "filter"}
BELOW["cli"] = {"base", "filter"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"src/([^"]+)"', re.M)


def folder_of(rel):
    """'server/security/x.h' -> 'server/security'; 'store/x.h' -> 'store'."""
    parts = rel.split("/")
    if parts[0] == "server" and len(parts) > 2:
        return "server/" + parts[1]
    return parts[0]


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    src = root / "src"
    errors = []
    files = 0
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cc"):
            continue
        files += 1
        here = folder_of(str(path.relative_to(src)))
        if here not in BELOW:
            errors.append(f"{path.relative_to(root)}: folder src/{here} has no "
                          "place in the layer table of tests/layering/check_layers.py")
            continue
        for m in INCLUDE.finditer(path.read_text()):
            there = folder_of(m.group(1))
            if there != here and there not in BELOW[here]:
                errors.append(f"{path.relative_to(root)}: src/{here} must not include "
                              f"src/{m.group(1)} (src/{there} is not beneath it)")
    for e in errors:
        print(e)
    if files == 0:
        print(f"no sources under {src}")
        return 1
    print(f"{files} files checked, {len(errors)} upward includes")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
