"""The few git queries ``asv run --set-commit-hash`` makes, answered from the commit table of
``scripts/asv_history.sh prepare``, for a machine without git (the GPU machine has no history and may have no git).

    python3 scripts/asv_history_git.py TABLE ARGS...

TABLE: lines ``hash<TAB>unix date<TAB>...``, newest first. Answered: ``rev-parse NAME^{commit}`` (a full or
abbreviated hash of the table; ``main``, ``master`` and ``HEAD`` are its first line), ``rev-list -n 1 --format=%at
HASH``. ``config`` and ``name-rev`` fail as git does where nothing is set or named; anything else fails loudly.
"""

import sys


def main(table_path, *args):
    commits = []
    with open(table_path) as table:
        for line in table:
            if line.strip():
                full_hash, date = line.split("\t")[:2]
                commits.append((full_hash, int(date)))

    def lookup(name):
        name = name.removesuffix("^{commit}")
        if name in ("main", "master", "HEAD") and commits:
            return commits[0]
        found = [c for c in commits if len(name) >= 4 and c[0].startswith(name)]
        return found[0] if len(found) == 1 else None

    command = args[0] if args else ""
    if command == "config" or command == "name-rev":
        return 1  # nothing set / no name: asv falls back
    if command == "rev-parse" and len(args) == 2:
        commit = lookup(args[1])
        if commit is None:
            print(args[1])
            print(f"fatal: ambiguous argument '{args[1]}': unknown revision", file=sys.stderr)
            return 128
        print(commit[0])
        return 0
    if command == "rev-list" and args[1:4] == ("-n", "1", "--format=%at") and len(args) == 5:
        commit = lookup(args[4])
        if commit is None:
            print(f"fatal: bad revision '{args[4]}'", file=sys.stderr)
            return 128
        print(f"commit {commit[0]}\n{commit[1]}")
        return 0
    print(f"asv_history_git.py: git {' '.join(args)} is not answered here (no git on this machine)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
