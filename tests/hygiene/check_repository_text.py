#!/usr/bin/python3
"""Checks that no tracked file names what a reader of the repository cannot
open:

- a place that exists only on one developer's machine: an absolute path
  under a home or work folder (/home/..., /Users/..., /root/..., /work/...).
  Such a path works for its author and fails, or silently means something
  else, for everyone else; scripts locate the checkout from their own path,
  CMake from PROJECT_SOURCE_DIR, and docs name paths relative to the
  repository.
- the project's tracker or its working notes: the word issue or session
  followed by a number, a benchmark named after an issue number, a
  developer's extra git work tree by its git name. A reader cannot open
  the tracker, so a comment that cites it instead of saying the reason or
  the feature says nothing to them; say the reason in words.

  tests/hygiene/check_repository_text.py [repo root]

Reads the files git tracks (every file below the root when it is not a
git checkout); binary files are skipped. Exit 1 with one line per hit.
Run by ctest (RepositoryTextTest).
"""
import pathlib
import re
import subprocess
import sys

MACHINE_PATH = "a path on a developer's machine"
TRACKER = "a tracker or notes reference"

RULES = [
    (MACHINE_PATH,
     re.compile(r"(?<![\w.~-])/(?:home|Users|root|work)/[\w.-]")),
    (TRACKER, re.compile(r"\b[Ii]ssue[ -]#?\d+")),
    (TRACKER, re.compile(r"[Ii]ssue_?\d+")),  # BM_Issue15Patterns
    (TRACKER, re.compile(r"\b[Ss]ession[ -]#?\d+")),  # "session-7" too
    # Spelt in two parts so that this file's own text does not match it.
    (TRACKER, re.compile("work" + "tree")),
]

# A tracker number wrapped onto the next line of a comment:
#   "... (issue" / "// 16): ..."
WRAPPED = re.compile(r"\b(?:[Ii]ssue|[Ss]ession)\s*$")
WRAPPED_NEXT = re.compile(r"^\s*(?://+|#+|\*|--|;+)?\s*\d")

# Files the tracker rules skip (none: every tracked file is held to them).
TRACKER_EXEMPT_FILES = set()

# A product use of the words the tracker rules match (none so far; a TLS
# session, a user's feed session and the session stream are fine as long as
# no number follows "session"). Prefer rewording; an entry is
# (path relative to the root, a substring of the line that is allowed).
TRACKER_ALLOWED = [
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


def allowed(rel, line):
    return any(rel == path and text in line for path, text in TRACKER_ALLOWED)


def hits_in(rel, text):
    """(line number, what, line) for every rule a line of `text` breaks."""
    lines = text.splitlines()
    tracker_checked = rel not in TRACKER_EXEMPT_FILES
    for lineno, line in enumerate(lines, 1):
        for what, rule in RULES:
            if what == TRACKER and (not tracker_checked or allowed(rel, line)):
                continue
            if rule.search(line):
                yield lineno, what, line
        if (tracker_checked and lineno < len(lines) and WRAPPED.search(line)
                and WRAPPED_NEXT.match(lines[lineno])
                and not allowed(rel, line)):
            yield lineno, TRACKER, line


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
        rel = path.relative_to(root).as_posix()
        for lineno, what, line in hits_in(rel, text):
            hits += 1
            print(f"{rel}:{lineno}: {what}: {line.strip()[:120]}")
    if hits:
        print(f"{hits} line(s) name what a reader of the repository cannot "
              "open; say it relative to the repository, or in words")
        return 1
    print("no machine paths or tracker references in tracked files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
