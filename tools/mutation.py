#!/usr/bin/env python3
"""Mutation testing of the engine's decision modules (``make mutation``; not part of ``make test``).

mutmut 2.x (pinned in tools/mutation-requirements.txt) mutates a module in place and runs the
module's unit tests against each mutant. So that the checkout is never modified, even when a run
is killed half-way, every module is mutated in its own copy of the tree under ``.mutation/<name>/``
(git's tracked and unignored files; the tracked symlink
.collections/ansible_collections/scapforge/remediation -> ../../.. then points at the copy).
mutmut 3.x is not used: it runs mutants from a ``mutants/`` directory under their file-derived
module names, and our code is imported as ``ansible_collections.scapforge.remediation...``.

Prints one line per module and, last, ``mutation score: N killed of M (P %)``. Counted as
killed: ``killed``, ``timeout`` (the tests ran past mutmut's limit: the mutant hangs) and
``suspicious`` (the tests failed, only slower than usual); not killed: ``survived``; skipped
mutants (none here) are not counted. Every survivor's diff goes to ``.mutation/survivors.txt``.

    tools/mutation.py [--jobs N] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import sqlite3
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, ".mutation")
UTILS_TESTS = "tests/unit/plugins/plugin_utils/"
RUN_TESTS = UTILS_TESTS + "_run/"
MEMORY_TESTS = UTILS_TESTS + "memory/"
#: name -> (module to mutate, the unit tests that judge it)
MODULES = {
    "decisions": ("plugins/plugin_utils/_run/decisions.py", [RUN_TESTS + "test_decisions.py", RUN_TESTS + "test_decisions_pinned.py"]),
    "state": ("plugins/plugin_utils/_run/state.py", [RUN_TESTS + "test_state.py"]),
    "attempts": ("plugins/plugin_utils/attempts.py",
                 [UTILS_TESTS + "test_attempts.py", UTILS_TESTS + "test_attempt_decisions.py",
                  RUN_TESTS + "test_decisions.py", RUN_TESTS + "test_state.py"]),
    "outcomes": ("plugins/plugin_utils/outcomes.py",
                 [UTILS_TESTS + "test_outcomes_safety.py", UTILS_TESTS + "test_outcome_codes.py",
                  RUN_TESTS + "test_decisions.py", RUN_TESTS + "test_state.py"]),
    # what memory decides, credits and needs (issue 19)
    "selection": ("plugins/plugin_utils/memory/selection.py", [MEMORY_TESTS + "test_memory_selection.py"]),
    "learning": ("plugins/plugin_utils/memory/learning.py", [MEMORY_TESTS + "test_memory_learning.py"]),
    "preconditions": ("plugins/plugin_utils/memory/preconditions.py", [MEMORY_TESTS + "test_memory_preconditions.py"]),
}
KILLED = ("ok_killed", "bad_timeout", "ok_suspicious")
SURVIVED = ("bad_survived",)


def copy_tree(dest: str) -> None:
    """A fresh copy of the checkout's tracked and unignored files (symlinks as symlinks)."""
    if os.path.lexists(dest):
        shutil.rmtree(dest)
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src, dst = os.path.join(ROOT, name), os.path.join(dest, name)
        if not os.path.lexists(src):  # deleted in the work tree, not yet in git
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isfile(src):
            shutil.copy2(src, dst)


def mutate(name: str) -> dict:
    """Run mutmut over one module in its own copy; return its counts and survivors."""
    path, tests = MODULES[name]
    tree = os.path.join(WORK, name)
    copy_tree(tree)
    python = os.path.join(ROOT, ".venv", "bin", "python")
    # its own --basetemp: pytest prunes old basetemp dirs of concurrent runs, a false "killed"
    runner = "%s -m pytest -x -q -p no:cacheprovider --basetemp=%s %s" % (
        python, os.path.join(tree, ".pytest-tmp"), " ".join(tests))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               ANSIBLE_CONFIG=os.path.join(tree, "ansible.cfg"))
    started = time.monotonic()
    # -b: seconds on top of twice the clean run before a mutant counts as hanging (a busy machine)
    proc = subprocess.run([python, "-m", "mutmut", "run", "--paths-to-mutate", path, "--tests-dir", "tests",
                           "--runner", runner, "-b", "20", "--simple-output", "--no-progress"],
                          cwd=tree, env=env, capture_output=True, text=True)
    cache = os.path.join(tree, ".mutmut-cache")
    if not os.path.isfile(cache):
        raise SystemExit("mutmut made no results for %s (exit %d):\n%s%s" % (name, proc.returncode, proc.stdout,
                                                                            proc.stderr))
    with sqlite3.connect(cache) as db:
        rows = db.execute("SELECT m.id, m.status FROM Mutant m").fetchall()
    counts: dict[str, int] = {}
    for _id, status in rows:
        counts[status] = counts.get(status, 0) + 1
    if counts.get("untested"):
        raise SystemExit("mutmut left %d mutants of %s untested (exit %d):\n%s%s" % (
            counts["untested"], name, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:]))
    survivors = []
    for mutant_id, status in rows:
        if status in SURVIVED:
            shown = subprocess.run([python, "-m", "mutmut", "show", str(mutant_id)], cwd=tree, env=env,
                                   capture_output=True, text=True).stdout
            survivors.append("# %s mutant %d\n%s" % (name, mutant_id, shown.strip()))
    return {"name": name, "path": path, "counts": counts, "survivors": survivors,
            "seconds": time.monotonic() - started}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="modules mutated at once (default 2)")
    parser.add_argument("--only", nargs="*", choices=sorted(MODULES), help="these modules only")
    args = parser.parse_args(argv)
    names = args.only or list(MODULES)
    os.makedirs(WORK, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(mutate, names))
    killed = total = 0
    lines = []
    for r in results:
        k = sum(r["counts"].get(s, 0) for s in KILLED)
        n = k + sum(r["counts"].get(s, 0) for s in SURVIVED)
        killed, total = killed + k, total + n
        detail = ", ".join("%s %d" % (s, c) for s, c in sorted(r["counts"].items()))
        print("%-10s %s: %d killed of %d (%s) in %.0f s" % (r["name"], r["path"], k, n, detail, r["seconds"]))
        lines.extend(r["survivors"])
    with open(os.path.join(WORK, "survivors.txt"), "w", encoding="utf-8") as out:
        out.write("\n\n".join(lines) + "\n")
    print("survivors' diffs: %s (%d)" % (os.path.relpath(os.path.join(WORK, "survivors.txt"), ROOT), len(lines)))
    print("timeouts and suspicious (slow but failing) mutants count as killed")
    print("mutation score: %d killed of %d (%.1f %%)" % (killed, total, 100.0 * killed / total if total else 0.0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
