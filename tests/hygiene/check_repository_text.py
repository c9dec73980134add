#!/usr/bin/python3
"""Checks that no tracked file names a place that exists only on one
developer's machine: an absolute path under a home or work folder
(/home/..., /Users/..., /root/..., /work/...). Such a path works for its
author and fails, or silently means something else, for everyone else;
scripts locate the checkout from their own path, CMake from
PROJECT_SOURCE_DIR, and docs name paths relative to the repository.

  tests/hygiene/check_repository_text.py [repo root]

Reads the files git tracks (every file below the root when it is not a
git checkout); binary files are skipped. Exit 1 with one line per hit.
Run by ctest (RepositoryTextTest).
"""
import pathlib
import re
import subprocess
import sys

RULES = [
    ("a path on a developer's machine",
     re.compile(r"(?<![\w.~-])/(?:home|Users|root|work)/[\w.-]")),
]


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"],
                             check=True, capture_output=True).stdout
        return [root / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in root.rglob("*") if p.is_file()
                and not any(part.startswith(("build", ".git"))
                            for part in p.relative_to(root).parts)]


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    me = pathlib.Path(__file__).resolve()
    hits = 0
    for path in tracked_files(root):
        if path.resolve() == me or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary (images, golden filters)
        text = data.decode("utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for what, rule in RULES:
                if rule.search(line):
                    hits += 1
                    print(f"{path.relative_to(root)}:{lineno}: {what}: "
                          f"{line.strip()[:120]}")
    if hits:
        print(f"{hits} line(s) name what a reader of the repository cannot "
              "open; say it relative to the repository, or in words")
        return 1
    print("no machine paths in tracked files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
