#!/usr/bin/env python3
"""List C functions longer than a limit (issue 20: none over 150 lines in
driver/ and passes/planner/).  A function is a line opening at column 0
with '(' that reaches a '{' closing its signature, up to the matching '}'
at column 0.  A folder stands for its .c and .h files, subfolders included.

usage: scripts/fn_lengths.py [--max N] FILE_OR_DIR...   (exit 1 if any is over)
tests/structure/test_structure_limits.py runs it on driver/ and passes/planner/.
"""
import os
import re
import sys


def functions(path):
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"^[A-Za-z_].*\(", line) and not line.startswith(("#", "typedef")) \
                and not line.rstrip().endswith(";"):
            j = i
            while j < len(lines) and "{" not in lines[j] and not lines[j].rstrip().endswith(";"):
                j += 1
            if j < len(lines) and "{" in lines[j]:
                if lines[j].count("{") == lines[j].count("}"):  # a one-line body
                    i = j + 1
                    continue
                k = j + 1
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                name = re.findall(r"([A-Za-z_]\w*)\s*\(", line)
                yield (name[0] if name else line.strip()), i + 1, k - i + 1
                i = k
        i += 1


def source_files(paths):
    """The files named, and the .c / .h files under the folders named."""
    files = []
    for a in paths:
        if os.path.isdir(a):
            for root, dirs, names in os.walk(a):
                dirs.sort()
                files += sorted(os.path.join(root, f) for f in names if f.endswith((".c", ".h")))
        else:
            files.append(a)
    return files


def over_limit(paths, limit=150):
    """(file, line, name, length) of every function over `limit` lines."""
    return [(f, line, name, n) for f in source_files(paths)
            for name, line, n in functions(f) if n > limit]


def main(argv):
    limit = 150
    if argv[:1] == ["--max"]:
        limit, argv = int(argv[1]), argv[2:]
    over = over_limit(argv, limit)
    for f, line, name, n in over:
        print("%s:%d: %s is %d lines (max %d)" % (f, line, name, n, limit))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
