#!/usr/bin/env python3
"""Benchmark: the memory store under a fleet of concurrent writers (issue 19 item 7; not a test).

Seeds a store through the real ``MemoryStore`` with ``--lessons`` synthetic lessons (those of
bench/memory_select.py, each with 1 to 3 evidence rows from which ``support`` and ``rules`` are
derived) and ``--usage`` stamped usage rows (the lessons' ``outcomes`` replayed from them), then
forks ``--writers`` processes that each act as one host of one run: a real ``MemorySession``
(mode inject) and, for each of ``--rules`` rules, what the loop asks of it: ``decide`` (a read,
and a usage row of mode act when a lesson decides), ``lessons_for`` (the selection),
``saw`` (the usage rows of the lessons shown) and ``learn`` (extraction, recording and
reinforcement in one transaction), then ``close`` (the dream pass). The rules' outcomes are
scripted (a vendor fix that verified; a vendor fix that changed nothing, then Worker tasks that
verified; a vendor fix and Worker tasks that both failed), with tasks unique to the host and
rule, so every ``learn`` adds evidence rows no other host adds, and most add a lesson.

Each writer times every call, and the lock inside it (the wait for ``.lock`` and the time held,
through a ``MemoryStore`` subclass whose ``locked`` only measures). After the writers, the bench
checks that nothing was lost: every lesson, evidence row and usage row the writers' successful
calls must have written is there (the lesson and evidence keys from ``lessons.extract`` on the
same records, the usage keys from the lessons shown), the table totals are exactly the seeded
ones plus those, every usage row of the run carries its rule's outcome, every lesson's
``outcomes`` equals what its usage rows replay to (no lost update), and ``tools/lessons.py
doctor`` passes. Any lost row, a session that went off (a lock timeout, say) or a failing doctor
exits 1, after the figures are written.

Phases, in one run, so the figures compare as ratios, never as absolute seconds: ``--small``
lessons with 1 writer and with ``--writers``, then ``--lessons`` with 1 writer and with
``--writers``. Each phase starts from a freshly seeded store.

Prints a table and writes bench/results/<--name>.json.

Usage (from the repository root; about 4 minutes for the defaults on 2 cores, 6 before issue 19 item 7):
    .venv/bin/python bench/memory_fleet.py [--writers 32] [--lessons 10000] [--rules 3] [--small 100]
                                           [--usage N] [--dir DIR] [--lock-timeout S] [--name memory-fleet]
                                           [--code TEXT] [--before bench/results/OTHER.json]
"""

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import memory_select  # noqa: E402

from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import learning as G  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import lessons as L  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import store as S  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.session import MemorySession  # noqa: E402

SKILL = memory_select.SKILL
RULES = memory_select.RULES
CATEGORIES = memory_select.CATEGORIES
PREFIX = "xccdf_org.ssgproject.content_rule_"
#: the facts of memory_select.FINGERPRINTS[0] (Debian 12 in systemd-nspawn, content 0.1.76).
FACTS = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.8",
         "virtualization_role": "guest", "virtualization_type": "systemd-nspawn"}
CONTENT = "0.1.76"
RUN_ID = "fleet-bench"
OPS = ("decide", "select", "saw", "learn", "dream")


# ----------------------------------------------------------------------------- the seeded store
def category_of(rule):
    return CATEGORIES[RULES.index(rule) % len(CATEGORIES)]


def seed_docs(n, usage_n, seed=19):
    """(lessons, evidence rows, usage rows) for a seeded store of ``n`` lessons."""
    rng = random.Random(seed)
    docs = memory_select.synthetic(n, seed=seed)
    evidence = []
    for i, doc in enumerate(docs):
        rule = next(iter(doc["rules"]))
        rows = []
        for k in range(rng.randint(1, 3)):
            if doc["kind"] == L.POSITIVE:
                kind, reason = L.OUTCOME, "verified"
            elif doc["kind"] == L.CAUTION:
                kind, reason = L.OUTCOME, "environment:read_only_proc_sys"
            else:
                kind, reason = L.ATTEMPT, rng.choice(("fix_failed", "fix_ineffective", "no_effect"))
            run, host = "seed-%03d" % rng.randint(0, 199), "seed%02d" % rng.randint(0, 31)
            rows.append(L.Evidence(lesson=doc["id"], source_kind=kind, source_id="%s/%s/%s/%d" % (run, host, rule, k + 1),
                                   run_id=run, host=host, time="2026-11-%02dT%02d:00:00Z" % (rng.randint(1, 29), rng.randint(0, 23)),
                                   detail="seed evidence %d.%d: %s" % (i, k, "z" * rng.randint(20, 200)), rule=rule,
                                   attempt=k + 1, source=rng.choice(("vendor", "worker")), reason=reason).to_doc())
        L.derive(doc, rows)
        evidence.extend(rows)
    usage = []
    live = [doc for doc in docs if doc["status"] != L.RETIRED]
    by_lesson = {}
    for i in range(usage_n if live else 0):
        doc = rng.choice(live)
        rule = next(iter(doc["rules"]))
        run, host = "seed-u%05d" % i, "seed%02d" % rng.randint(0, 31)
        outcome = rng.choice(("remediated", "escalated"))
        row = G.usage_rows([doc], run, host, rule, category_of(rule), 1, G.INJECT,
                           now="2026-11-30T%02d:00:00.000000Z" % rng.randint(0, 23))[0]
        row.update(followed=rng.choice((True, False, None)), outcome=outcome,
                   reason="verified" if outcome == "remediated" else "fix_failed", from_memory=False,
                   outcome_time="2026-11-30T%02d:30:00.000000Z" % rng.randint(0, 23))
        usage.append(row)
        by_lesson.setdefault(doc["id"], []).append(row)
    for doc in docs:
        doc["outcomes"] = G.replay(doc, by_lesson.get(doc["id"], []))[1]
    return docs, evidence, usage


def seed_store(path, n, usage_n):
    docs, evidence, usage = seed_docs(n, usage_n)
    with S.MemoryStore(path).transaction() as tx:
        tx.lessons.insert_multiple(docs)
        tx.evidence.insert_multiple(evidence)
        tx.usage.insert_multiple(usage)


def sizes(path):
    """{table file: bytes} of the store's five table files."""
    out = {}
    for name in S.TABLES:
        full = os.path.join(path, name + ".json")
        out[name] = os.path.getsize(full) if os.path.exists(full) else 0
    return out


# ----------------------------------------------------------------------------- one host
class TimedStore(S.MemoryStore):
    """The real store; ``locked`` also notes the seconds waited for the lock and held."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.waits, self.helds = [], []

    @contextlib.contextmanager
    def locked(self, timeout=None):
        began = time.perf_counter()
        try:
            with super().locked(timeout):
                got = time.perf_counter()
                self.waits.append(got - began)
                try:
                    yield
                finally:
                    self.helds.append(time.perf_counter() - got)
        except S.MemoryStoreError:
            if len(self.waits) == len(self.helds):  # not acquired: the whole time was a wait
                self.waits.append(time.perf_counter() - began)
                self.helds.append(0.0)
            raise


class Events:
    """The session's event sink: counts, and keeps memory_error / memory_degraded events."""

    def __init__(self):
        self.count = 0
        self.problems = []

    def emit(self, event, rule=None, attempt=None, **data):
        self.count += 1
        if event in ("memory_error", "memory_degraded"):
            self.problems.append(dict(data, event=event))
        return {}


def rec(number, source, verdict, reason, tasks=None, error=None):
    """An Attempt.__dict__-like record (tests/unit/.../test_memory_lessons.py's ``rec``)."""
    return {"number": number, "source": source, "tasks": tasks or [], "gate": None,
            "report": {"ok": error is None, "changed": True, "error": error, "modules": [], "task_results": []},
            "verdict": verdict, "reason": reason, "detail": error or "", "reflection": None,
            "result": "pass" if verdict == "passed" else "fail", "gate_refusals": []}


def entry(short, outcome, reason, category, attempts, detail=""):
    """The host report's rule entry (RuleOutcome.to_dict() with the short rule)."""
    return {"rule": short, "outcome": outcome, "reason": reason, "attempts": attempts, "category": category,
            "detail": detail, "modules": ["ansible.builtin.lineinfile"], "changed_tasks": [], "attempt_log": [],
            "lessons_shown": [], "from_memory": None, "side_effects": []}


def scripted(short, category, host, index):
    """(rule entry, attempt records) of one rule: three shapes in turn, tasks unique per host and rule."""
    vendor = [{"name": "vendor fix for %s" % short, "ansible.builtin.lineinfile": {
        "path": "/etc/scapforge-bench/%s.conf" % short, "regexp": "^%s" % short, "line": "%s = 1" % short}}]
    worker = [{"name": "worker fix", "ansible.builtin.lineinfile": {
        "path": "/etc/scapforge-bench/%s/%s.conf" % (host, short), "regexp": "^bench", "line": "bench %s %d" % (host, index)}}]
    shape = index % 3
    if shape == 0:
        return entry(short, "remediated", "verified", category, 1), [rec(1, "vendor", "passed", "verified", vendor)]
    if shape == 1:
        return entry(short, "remediated", "verified", category, 2), [
            rec(1, "vendor", "no_effect", "no_effect", vendor), rec(2, "worker", "passed", "verified", worker)]
    error = "bench failure %s on %s: exit status 3" % (short, host)
    return entry(short, "escalated", "fix_failed", category, 2, error), [
        rec(1, "vendor", "failed", "fix_failed", vendor, error=error),
        rec(2, "worker", "failed", "fix_failed", worker, error=error)]


def writer(path, index, rules, lock_timeout, barrier, queue):
    """One host: a MemorySession over ``path``, the loop's calls for each rule, then close."""
    host = "host%02d" % index
    events = Events()
    session = MemorySession.open(path, "inject", False, FACTS, CONTENT, SKILL, RUN_ID, host, events)
    session.store = TimedStore(path, lock_timeout=lock_timeout)
    ops, rule_ops = [], []
    expect = {"lessons": set(), "evidence": set(), "usage": set(), "maybe_usage": set()}
    tally = {"created": 0, "confirmed": 0, "decisions": 0, "shown": 0}

    def call(name, work):
        store = session.store
        store.waits, store.helds = [], []
        if session.broken is not None:  # off: the call does nothing, it is not timed
            ops.append({"op": name, "skipped": True, "ok": False})
            return work()
        began = time.perf_counter()
        result = work()
        spent = time.perf_counter() - began
        wait, held = sum(store.waits), sum(store.helds)
        ops.append({"op": name, "s": spent, "wait": wait, "held": held, "tx": len(store.helds),
                    "read": spent - wait - held, "ok": session.broken is None})
        return result

    barrier.wait()
    started = time.perf_counter()
    for number, rule in enumerate(rules):
        first_op = len(ops)
        full, category = PREFIX + rule, category_of(rule)
        rule_entry, records = scripted(rule, category, host, number)
        rule_usage = set()
        decision = call("decide", lambda: session.decide(full, category, llm=True))
        if decision is not None and ops[-1]["ok"]:
            tally["decisions"] += 1
            rule_usage.add(G.usage_key(RUN_ID, host, rule, 0, decision.lesson, G.ACT))
        _block, ids = call("select", lambda: session.lessons_for(full, category))
        call("saw", lambda: session.saw(full, category, 1, ids, records[-1]["tasks"]))
        if ops[-1]["ok"]:
            tally["shown"] += len(ids)
            rule_usage.update(G.usage_key(RUN_ID, host, rule, 1, lesson, G.INJECT) for lesson in ids)
        made = call("learn", lambda: session.learn(rule_entry, records, from_memory=False))
        if ops[-1]["ok"]:
            report = {"host": host, "run_id": RUN_ID, "rules": {rule: rule_entry}}
            for cand in L.extract(report, {rule: records}, session.fingerprint, SKILL, run_id=RUN_ID, host=host):
                expect["lessons"].add(cand.dedupe_key)
                expect["evidence"].update((cand.id, ev.source_kind, ev.source_id) for ev in cand.evidence)
            tally["created"] += len(made.get("created") or [])
            tally["confirmed"] += len(made.get("confirmed") or [])
            expect["usage"].update(rule_usage)  # written, and stamped with the outcome, by the rule's end
        else:  # the session went off: rows logged before may or may not be in the store, never stamped
            expect["maybe_usage"].update(rule_usage)
        done = ops[first_op:]
        if all(op["ok"] for op in done):
            rule_ops.append({"held": sum(op["held"] for op in done), "tx": sum(op["tx"] for op in done)})
    block = call("dream", session.close)
    queue.put({"host": host, "ops": ops, "rule_ops": rule_ops, "wall": time.perf_counter() - started, "block": block,
               "problems": events.problems, "tally": tally,
               "expect": {k: sorted(v) for k, v in expect.items()}})


# ----------------------------------------------------------------------------- one phase
def quantile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def figures(values):
    """{"n", "median_ms", "p95_ms", "max_ms"} of a list of seconds."""
    if not values:
        return {"n": 0, "median_ms": None, "p95_ms": None, "max_ms": None}
    return {"n": len(values), "median_ms": round(statistics.median(values) * 1000.0, 1),
            "p95_ms": round(quantile(values, 0.95) * 1000.0, 1), "max_ms": round(max(values) * 1000.0, 1)}


def check(path, before, results):
    """What the writers' successful calls must have left in the store, against what is there.

    Lessons and evidence rows: those ``lessons.extract`` gives for every rule whose ``learn``
    returned with the session on (a lesson of the same dedupe key counts once). Usage rows:
    those of every rule whose ``learn`` succeeded, each stamped with the rule's outcome; the
    rows of a rule whose session went off may be there or not (``maybe``), never more."""
    expect = {k: set() for k in ("lessons", "evidence", "usage", "maybe_usage")}
    for result in results:
        for k in expect:
            expect[k].update(tuple(x) if isinstance(x, list) else x for x in result["expect"][k])
    confirmed = sum(r["tally"]["confirmed"] for r in results)
    with S.MemoryStore(path).snapshot() as view:
        lessons, evidence, usage = view.lessons.all(), view.evidence.all(), view.usage.all()
    keys = [d.get("dedupe_key") for d in lessons]
    ev_keys = [L.evidence_key(d) for d in evidence]
    us_keys = [d.get("key") for d in usage]
    ours = {d.get("key") for d in usage if d.get("run_id") == RUN_ID}
    by_lesson = {}
    for row in usage:
        by_lesson.setdefault(row.get("lesson"), []).append(row)
    unstamped = [r["key"] for r in usage if r.get("key") in expect["usage"] and r.get("outcome") is None]
    drift = [d["id"] for d in lessons if (d.get("outcomes") or {"remediated": 0, "escalated": 0})
             != G.replay(d, by_lesson.get(d["id"], []))[1]]
    out = {
        "lessons": {"before": before["lessons"], "after": len(lessons), "expected_new": len(expect["lessons"]),
                    "missing": len(expect["lessons"] - set(keys)), "duplicates": len(keys) - len(set(keys))},
        "evidence": {"before": before["evidence"], "after": len(evidence), "expected_new": len(expect["evidence"]) + confirmed,
                     "missing": len(expect["evidence"] - set(ev_keys)), "duplicates": len(ev_keys) - len(set(ev_keys))},
        "usage": {"before": before["usage"], "after": len(usage), "expected_new": len(expect["usage"]),
                  "maybe": len(ours & (expect["maybe_usage"] - expect["usage"])),
                  "missing": len(expect["usage"] - set(us_keys)), "duplicates": len(us_keys) - len(set(us_keys))},
        "usage_unstamped": len(unstamped),
        "outcomes_drift": len(drift),
    }
    lost = 0
    for name in ("lessons", "evidence", "usage"):
        row = out[name]
        row["unexplained"] = row["after"] - row["before"] - row["expected_new"] - row.get("maybe", 0)
        lost += row["missing"] + row["duplicates"] + abs(row["unexplained"])
    out["lost"] = lost + len(unstamped) + len(drift)
    return out


def doctor(path):
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "lessons.py"), "doctor", "--path", path],
                          capture_output=True, text=True, check=False)
    return done.returncode, (done.stdout + done.stderr).strip().splitlines()[-1:]


def phase(base, name, n, usage_n, writers, rules, lock_timeout):
    """Seed a fresh store of ``n`` lessons, run ``writers`` hosts of ``rules`` rules, check it."""
    path = os.path.join(base, name)
    shutil.rmtree(path, ignore_errors=True)
    began = time.perf_counter()
    seed_store(path, n, usage_n)
    seeded_s = time.perf_counter() - began
    size_before = sizes(path)
    with S.MemoryStore(path).snapshot() as view:
        before = {"lessons": len(view.lessons), "evidence": len(view.evidence), "usage": len(view.usage)}
    ctx = multiprocessing.get_context("fork")
    barrier, queue = ctx.Barrier(writers + 1), ctx.Queue()
    plans = [random.Random(1000 + i).sample(RULES, rules) for i in range(writers)]
    procs = [ctx.Process(target=writer, args=(path, i, plans[i], lock_timeout, barrier, queue)) for i in range(writers)]
    for proc in procs:
        proc.start()
    barrier.wait()
    began = time.perf_counter()
    results = [queue.get() for _ in procs]
    wall = time.perf_counter() - began
    for proc in procs:
        proc.join()
    crashed = [p.exitcode for p in procs if p.exitcode != 0]
    ops = [op for r in results for op in r["ops"] if not op.get("skipped")]
    by = {name_: [op for op in ops if op["op"] == name_] for name_ in OPS}
    learn = by["learn"]
    held = sum(op["held"] for op in ops)
    writes = [op for op in ops if op["tx"]]
    out = {
        "lessons": n, "usage_seeded": usage_n, "writers": writers, "rules": rules, "seed_s": round(seeded_s, 2),
        "wall_s": round(wall, 2), "rules_per_s": round(writers * rules / wall, 2),
        "lock_held_share_of_wall": round(held / wall, 3),
        "lock_wait_share_of_writes": round(sum(op["wait"] for op in writes) / max(1e-9, sum(op["s"] for op in writes)), 3),
        "rule_held": figures([r["held"] for res in results for r in res["rule_ops"]]),
        "rule_transactions": round(statistics.mean([r["tx"] for res in results for r in res["rule_ops"]] or [0]), 2),
        "learn": figures([op["s"] for op in learn]),
        "learn_wait": figures([op["wait"] for op in learn]),
        "learn_held": figures([op["held"] for op in learn]),
        "decide": figures([op["read"] for op in by["decide"]]),
        "select": figures([op["s"] for op in by["select"]]),
        "saw": figures([op["s"] for op in by["saw"]]),
        "dream": figures([op["s"] for op in by["dream"]]),
        "size_before": size_before, "size_after": sizes(path),
        "sessions_off": [{"host": r["host"], "reason": r["block"].get("reason")} for r in results if r["block"].get("state") == "off"],
        "problems": [dict(p, host=r["host"]) for r in results for p in r["problems"]][:10],
        "crashed": crashed,
        "tally": {k: sum(r["tally"][k] for r in results) for k in ("created", "confirmed", "decisions", "shown")},
    }
    out["check"] = check(path, before, results)
    out["doctor_rc"], out["doctor"] = doctor(path)
    return out


# ----------------------------------------------------------------------------- report
def ms(fig, key):
    value = fig[key]
    return "-" if value is None else "%.0f" % value


def table(phases):
    head = ("phase", "writers", "lessons", "wall s", "rules/s", "held/rule p50", "tx/rule", "learn p50", "p95", "max", "wait p50", "held p50", "decide p50",
            "select p50", "p95", "saw p50", "dream p50", "lessons.json MB", "lost", "off")
    rows = [head]
    for name, p in phases.items():
        rows.append((name, str(p["writers"]), str(p["lessons"]), "%.1f" % p["wall_s"], "%.2f" % p["rules_per_s"],
                     ms(p["rule_held"], "median_ms"), "%.1f" % p["rule_transactions"], ms(p["learn"], "median_ms"),
                     ms(p["learn"], "p95_ms"), ms(p["learn"], "max_ms"), ms(p["learn_wait"], "median_ms"),
                     ms(p["learn_held"], "median_ms"), ms(p["decide"], "median_ms"), ms(p["select"], "median_ms"),
                     ms(p["select"], "p95_ms"), ms(p["saw"], "median_ms"), ms(p["dream"], "median_ms"),
                     "%.1f -> %.1f" % (p["size_before"]["lessons"] / 1e6, p["size_after"]["lessons"] / 1e6),
                     str(p["check"]["lost"]), str(len(p["sessions_off"]))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def ratio(a, b):
    return None if not a or not b else round(a / b, 2)


def ratios(phases, small, big, writers):
    s1, sw, b1, bw = (phases.get(k) for k in ("%d/1" % small, "%d/%d" % (small, writers), "%d/1" % big, "%d/%d" % (big, writers)))
    out = {}
    if s1 and b1:
        out["learn_p50_store_size"] = ratio(b1["learn"]["median_ms"], s1["learn"]["median_ms"])
        out["learn_held_p50_store_size"] = ratio(b1["learn_held"]["median_ms"], s1["learn_held"]["median_ms"])
        out["rule_held_p50_store_size"] = ratio(b1["rule_held"]["median_ms"], s1["rule_held"]["median_ms"])
        out["select_p50_store_size"] = ratio(b1["select"]["median_ms"], s1["select"]["median_ms"])
    if b1 and bw:
        out["learn_p50_writers"] = ratio(bw["learn"]["median_ms"], b1["learn"]["median_ms"])
        out["learn_p95_writers"] = ratio(bw["learn"]["p95_ms"], b1["learn"]["p95_ms"])
        out["learn_held_p50_writers"] = ratio(bw["learn_held"]["median_ms"], b1["learn_held"]["median_ms"])
        out["select_p50_writers"] = ratio(bw["select"]["median_ms"], b1["select"]["median_ms"])
        out["throughput_writers"] = ratio(bw["rules_per_s"], b1["rules_per_s"])
    if s1 and sw:
        out["learn_p50_writers_small"] = ratio(sw["learn"]["median_ms"], s1["learn"]["median_ms"])
    return out


def compare(before, after):
    """{phase: {figure: after / before}} for the phases both runs have."""
    out = {}
    for name in after:
        if name not in before:
            continue
        b, a = before[name], after[name]
        out[name] = {"wall": ratio(a["wall_s"], b["wall_s"]), "rules_per_s": ratio(a["rules_per_s"], b["rules_per_s"]),
                     "held_per_rule_p50": ratio(a["rule_held"]["median_ms"], b["rule_held"]["median_ms"]),
                     "learn_held_p50": ratio(a["learn_held"]["median_ms"], b["learn_held"]["median_ms"]),
                     "learn_p95": ratio(a["learn"]["p95_ms"], b["learn"]["p95_ms"]),
                     "select_p50": ratio(a["select"]["median_ms"], b["select"]["median_ms"]),
                     "sessions_off": "%d -> %d" % (len(b["sessions_off"]), len(a["sessions_off"]))}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=32)
    parser.add_argument("--lessons", type=int, default=10000)
    parser.add_argument("--rules", type=int, default=3, help="rules per writer (default %(default)s)")
    parser.add_argument("--small", type=int, default=100, help="lessons of the small baseline store (0: no baseline)")
    parser.add_argument("--usage", type=int, default=None, help="seeded usage rows (default: as many as lessons)")
    parser.add_argument("--phases", default="all", help="all, or a comma list of small1,smallN,big1,bigN")
    parser.add_argument("--lock-timeout", type=float, default=S.DEFAULT_LOCK_TIMEOUT)
    parser.add_argument("--code", default="", help="what code this run measures, for the result file")
    parser.add_argument("--dir", help="where the stores go (default: a temporary directory, removed)")
    parser.add_argument("--name", default="memory-fleet", help="bench/results/<name>.json")
    parser.add_argument("--before", help="a result file of an earlier run (other code) to embed and compare with")
    args = parser.parse_args(argv)
    plan = [("small1", args.small, 1), ("smallN", args.small, args.writers), ("big1", args.lessons, 1),
            ("bigN", args.lessons, args.writers)]
    wanted = {"small1", "smallN", "big1", "bigN"} if args.phases == "all" else set(args.phases.split(","))
    plan = [p for p in plan if p[0] in wanted and p[1] > 0]
    base = args.dir or tempfile.mkdtemp(prefix="memory-fleet-")
    os.makedirs(base, exist_ok=True)
    phases = {}
    began = time.perf_counter()
    try:
        for key, n, writers in plan:
            name = "%d/%d" % (n, writers)
            usage_n = n if args.usage is None else args.usage
            print("phase %s: %d lessons, %d usage rows, %d writer(s) x %d rules ..." % (key, n, usage_n, writers, args.rules),
                  flush=True)
            phases[name] = phase(base, "%s-%d-%d" % (key, n, writers), n, usage_n, writers, args.rules, args.lock_timeout)
            p = phases[name]
            print("  wall %.1f s, learn p50 %s ms, lost %d, off %d, doctor rc %d" % (
                p["wall_s"], ms(p["learn"], "median_ms"), p["check"]["lost"], len(p["sessions_off"]), p["doctor_rc"]),
                flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    result = {"date": time.strftime("%Y-%m-%d"), "code": args.code, "cpus": os.cpu_count(), "load_avg_1m_end": round(os.getloadavg()[0], 2),
              "command": " ".join(["bench/memory_fleet.py"] + (argv if argv is not None else sys.argv[1:])),
              "total_s": round(time.perf_counter() - began, 1), "phases": phases,
              "ratios": ratios(phases, args.small, args.lessons, args.writers)}
    print()
    print(table(phases))
    print()
    for key, value in result["ratios"].items():
        print("  %s: %sx" % (key, value))
    if args.before:
        with open(args.before, encoding="utf-8") as handle:
            before = json.load(handle)
        result["before"] = before
        result["after_vs_before"] = compare(before["phases"], phases)
        print()
        print("before (%s):" % before.get("code", args.before))
        print(table(before["phases"]))
        print()
        for name, row in result["after_vs_before"].items():
            print("  %s after/before: %s" % (name, ", ".join("%s %sx" % (k, v) for k, v in row.items())))
    for name, p in phases.items():
        for k in ("lessons", "evidence", "usage"):
            c = p["check"][k]
            print("  %s %s: %d -> %d rows, %d expected new, %d missing, %d duplicated, %d unexplained" % (
                name, k, c["before"], c["after"], c["expected_new"], c["missing"], c["duplicates"], c["unexplained"]))
        if p["sessions_off"]:
            print("  %s: %d session(s) off, e.g. %s" % (name, len(p["sessions_off"]), p["sessions_off"][0]["reason"]))
    out = os.path.join(ROOT, "bench", "results", args.name + ".json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print("wrote %s" % os.path.relpath(out, ROOT))
    bad = [name for name, p in phases.items() if p["check"]["lost"] or p["sessions_off"] or p["doctor_rc"] or p["crashed"]]
    if bad:
        print("FAILED: lost rows, a session off, a crashed writer or a failing doctor in %s" % ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
