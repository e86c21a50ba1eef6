#!/usr/bin/env python3
"""Benchmark: lesson selection time with 10,000 lessons (issue 6's closing note; not a test).

Builds ``n`` synthetic lessons (4 fingerprints, 20 categories, 500 rules, all three kinds, a
tenth retired) in a TinyDB table and times ``selection.select`` for random rules, twice:
with the table in memory (``MemoryStorage``: the selection's own cost) and in a JSON file
on disk (TinyDB's ``JSONStorage``: what a fork pays when it reads the store fresh, as the
memory store's transactions do). Prints milliseconds per call (median and max) and the
file size.

Usage (from the repository root):
    .venv/bin/python bench/memory_select.py [--n 10000] [--calls 30]
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from tinydb import TinyDB  # noqa: E402
from tinydb.storages import MemoryStorage  # noqa: E402

from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import lessons as L  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import selection as S  # noqa: E402

SKILL = "anssi-debian12"
FINGERPRINTS = [{"os": "debian", "os_version": "12", "virtualization": virt, "content_version": version,
                 "skill": SKILL} for virt in ("systemd-nspawn", "kvm") for version in ("0.1.76", "0.1.75")]
CATEGORIES = ["cat%02d" % i for i in range(20)]
RULES = ["rule_%03d" % i for i in range(500)]


def synthetic(n, seed=6):
    """``n`` lesson documents shaped as lessons.Lesson.to_doc()."""
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        rule = rng.choice(RULES)
        kind = rng.choice(L.KINDS)
        scoped = kind != L.CAUTION and rng.random() < 0.8
        cue = "cue %d: %s when %s" % (i, rule, "x" * rng.randint(20, 200))
        scope = {"skill": SKILL, "rule": rule if scoped else None,
                 "category": CATEGORIES[RULES.index(rule) % 20] if scoped else None}
        key = L.dedupe_key(kind, scope, cue, "action %d" % i, FINGERPRINTS[i % 4])
        docs.append(L.Lesson(id=L.lesson_id(key), kind=kind, status=L.RETIRED if i % 10 == 0 else L.CONFIRMED,
                             scope=scope, cue=cue, action="action %d: %s" % (i, "y" * rng.randint(20, 300)),
                             fingerprint=FINGERPRINTS[i % 4], weight=round(rng.random(), 2), support=rng.randint(1, 9),
                             created="2026-11-30T00:00:00Z", updated="2026-11-30T%02d:00:00Z" % rng.randint(0, 23),
                             dedupe_key=key, rules={rule: {"reason": "fix_failed", "vendor": None}}).to_doc())
    return docs


def timed(table, calls, seed=7):
    rng = random.Random(seed)
    times, shown = [], []
    for _ in range(calls):
        rule = rng.choice(RULES)
        started = time.perf_counter()
        chosen = S.select(table, rule, CATEGORIES[RULES.index(rule) % 20], SKILL, FINGERPRINTS[0])
        S.render(chosen)
        times.append((time.perf_counter() - started) * 1000.0)
        shown.append(len(chosen))
    return statistics.median(times), max(times), statistics.mean(shown)


def bench_select(n=10000, calls=30):
    """Print and return {"memory_ms", "json_ms", "json_bytes"}: median ms per select+render."""
    docs = synthetic(n)
    memory = TinyDB(storage=MemoryStorage).table("lessons")
    memory.insert_multiple(docs)
    mem_median, mem_max, shown = timed(memory, calls)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lessons.json")
        disk = TinyDB(path).table("lessons")
        disk.insert_multiple(docs)
        size = os.path.getsize(path)
        json_median, json_max, _ = timed(disk, calls)
    print("select+render over %d lessons, %d calls, %.1f lessons shown on average" % (n, calls, shown))
    print("  in memory (MemoryStorage):  median %.1f ms, max %.1f ms" % (mem_median, mem_max))
    print("  from disk (JSONStorage, %.1f MB): median %.1f ms, max %.1f ms" % (size / 1e6, json_median, json_max))
    return {"memory_ms": mem_median, "json_ms": json_median, "json_bytes": size}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    bench_select(args.n, args.calls)
