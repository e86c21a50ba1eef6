#!/usr/bin/env python3
"""Look at what the remediation loop learned, merge memory stores (issue 6, items 8-9), and
check and repair a store (issue 19, item 6).

Run with the collection's virtual environment from the checkout::

    .venv/bin/python tools/lessons.py list [--path DIR] [--skill S] [--category C] [--rule R]
                                           [--kind K] [--status S[,S]|all] [--json]
    .venv/bin/python tools/lessons.py show ID [--path DIR] [--json]
    .venv/bin/python tools/lessons.py merge SRC DEST [--check] [--json]
    .venv/bin/python tools/lessons.py doctor [--path DIR] [--json]
    .venv/bin/python tools/lessons.py repair [--path DIR] [--json]

The store defaults to $SCAPFORGE_MEMORY_PATH, else ~/.scapforge/memory. ``list`` leaves out
retired lessons unless ``--status`` names them (or ``all``). ``list``/``show`` only read (no
lock, nothing written); ``merge`` writes DEST under its lock. The functions underneath are the
ones the ``scapforge.remediation.lessons`` lookup and the ``memory_merge`` action use
(plugin_utils/memory/admin.py).

``doctor`` reads meta.json, every table and attempts/*.json and lists the moved-aside copies
(``<file>.corrupt-<UTC>``) not recovered yet, one problem a line; it writes nothing. ``repair``
takes the store's lock, rebuilds a corrupt meta.json from the schema number it still names,
moves every corrupt table aside (as a run does) and writes the whole documents of every
moved-aside copy back into the live table, listing what it recovered and every piece it
dropped (document id and byte range); a repaired copy is renamed ``<copy>.repaired`` (kept).

Exit status: 0 done (``doctor``: healthy; ``repair``: repaired, or nothing to repair); 1 a store
error (corrupt table, schema, lock timeout, missing source), an unknown lesson id, a problem
``doctor`` found or one ``repair`` could not fix, each named; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import admin  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import lessons as L  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.errors import MemoryStoreError  # noqa: E402
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.store import (  # noqa: E402
    DEFAULT_LOCK_TIMEOUT, DEFAULT_PATH)

#: list columns: (header, width cap in characters; None = as wide as the widest value).
COLUMNS = (("ID", None), ("KIND", None), ("STATUS", None), ("SUPPORT", None), ("WEIGHT", None),
           ("SKILL", 20), ("CATEGORY", 16), ("RULE", 40), ("CUE", 70))


def _cell(value, cap):
    text = "-" if value in (None, "") else str(value)
    return L.clean_text(text, cap) if cap else text


def lesson_row(doc):
    """The list columns of one lesson, as strings."""
    scope = doc.get("scope") or {}
    return [doc.get("id"), doc.get("kind"), doc.get("status"), doc.get("support"),
            "%.2f" % float(doc.get("weight", 0.0)), scope.get("skill"), scope.get("category"),
            scope.get("rule"), doc.get("cue")]


def format_table(docs):
    """The lessons as an aligned text table (header first), one line per lesson."""
    rows = [[h for h, _ in COLUMNS]] + [[_cell(v, cap) for v, (_, cap) in zip(lesson_row(d), COLUMNS)]
                                        for d in docs]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def format_lesson(doc):
    """One lesson and its evidence rows, for a human."""
    scope = doc.get("scope") or {}
    fp = doc.get("fingerprint") or {}
    outcomes = doc.get("outcomes") or {}
    out = [
        "lesson      %s  %s  %s" % (doc.get("id"), doc.get("kind"), doc.get("status")),
        "scope       skill=%s category=%s rule=%s" % (scope.get("skill"), scope.get("category") or "-",
                                                      scope.get("rule") or "-"),
        "fingerprint %s" % " ".join("%s=%s" % (k, fp.get(k)) for k in L.FINGERPRINT_KEYS),
        "cue         %s" % doc.get("cue"),
        "action      %s" % doc.get("action"),
        "reason      %s" % (doc.get("reason") or "-"),
        "support     %s   weight %.2f   confidence %.2f   outcomes remediated=%s escalated=%s" % (
            doc.get("support"), float(doc.get("weight", 0.0)), float(doc.get("confidence", 0.0)),
            outcomes.get("remediated", 0), outcomes.get("escalated", 0)),
        "created     %s   updated %s" % (doc.get("created"), doc.get("updated")),
    ]
    if doc.get("tasks"):
        out.append("tasks       %s" % L.summarise_tasks(doc["tasks"]))
    for rule, info in sorted((doc.get("rules") or {}).items()):
        out.append("rule        %s: %s%s" % (rule, info.get("reason") or "-",
                                             " (content's fix: %s)" % info["vendor"] if info.get("vendor") else ""))
    rows = doc.get("evidence") or []
    out.append("evidence    %d row(s)" % len(rows))
    for row in rows:
        out.append("  %s  %-10s %s  %s  %s" % (row.get("time") or "-", row.get("source_kind"), row.get("source_id"),
                                               row.get("reason") or "-", L.clean_text(row.get("detail") or "", 200)))
    return "\n".join(out)


def cmd_list(args):
    docs = admin.list_lessons(args.path, skill=args.skill, category=args.category, rule=args.rule,
                              kind=args.kind, status=args.status, with_evidence=args.evidence)
    if args.json:
        print(json.dumps(docs, indent=1, sort_keys=True))
        return 0
    print(format_table(docs))
    print("%d lesson(s) in %s (status %s)" % (len(docs), os.path.abspath(os.path.expanduser(args.path)),
                                              ", ".join(admin.statuses(args.status))))
    return 0


def cmd_show(args):
    doc = admin.get_lesson(args.path, args.id)
    if doc is None:
        print("no lesson %s in %s" % (args.id, os.path.abspath(os.path.expanduser(args.path))), file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=1, sort_keys=True) if args.json else format_lesson(doc))
    return 0


def cmd_merge(args):
    result = admin.merge_stores(args.src, args.dest, check=args.check, lock_timeout=args.lock_timeout)
    if args.json:
        print(json.dumps(result, indent=1, sort_keys=True))
        return 0
    print("%s %s into %s: lessons +%d (%d in both, %d changed), evidence +%d, usage +%d (%d stamped); "
          "%s now holds %d lessons, %d evidence rows, %d usage rows" % (
              "would merge" if args.check else "merged", result["src"], result["dest"], result["lessons_added"],
              result["lessons_in_both"], result["lessons_changed"], result["evidence_added"], result["usage_added"],
              result["usage_stamped"], "dest would hold" if args.check else "dest",
              result["dest_lessons"], result["dest_evidence"], result["dest_usage"]))
    return 0


def format_dropped(row):
    """One dropped piece of a repaired table, for a human."""
    what = "document %s" % row["id"] if row.get("id") is not None else "data"
    where = " (bytes %s-%s)" % (row["start"], row["end"]) if row.get("start") is not None else ""
    return "  dropped %s%s%s: %s" % (what, " of table %s" % row["table"] if row.get("table") else "", where, row["why"])


def cmd_doctor(args):
    result = admin.doctor(args.path)
    if args.json:
        print(json.dumps(result, indent=1, sort_keys=True))
    else:
        for problem in result["problems"]:
            print("%s: %s" % (problem["file"], problem["problem"]))
        print("%s: %d file(s) checked, %s" % (result["path"], len(result["checked"]), "%d problem(s)" % len(
            result["problems"]) if result["problems"] else "healthy"))
    return 1 if result["problems"] else 0


def cmd_repair(args):
    result = admin.repair(args.path, lock_timeout=args.lock_timeout)
    if args.json:
        print(json.dumps(result, indent=1, sort_keys=True))
        return 1 if result["problems"] else 0
    for done in result["repaired"]:
        print("%s: rebuilt from %s%s: %d document(s) recovered%s, %d already there, %d piece(s) dropped" % (
            done["file"], done["from"], " (just moved aside)" if done.get("moved_to") else "", len(done["recovered"]),
            " (%s)" % ", ".join(done["recovered"]) if done["recovered"] else "", len(done["already_there"]),
            len(done["dropped"])))
        for row in done["dropped"]:
            print(format_dropped(row))
    for problem in result["problems"]:
        print("not repaired: %s" % problem, file=sys.stderr)
    print("%s: %s" % (result["path"], "%d table(s) repaired" % len(result["repaired"]) if result["repaired"]
                      else "nothing to repair" if not result["problems"] else "nothing repaired"))
    return 1 if result["problems"] else 0


def parser():
    """The argument parser (subcommands list, show, merge, doctor, repair)."""
    top = argparse.ArgumentParser(prog="tools/lessons.py", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="command", required=True)
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument("--path", default=admin.default_path(),
                       help="memory store directory (default: $%s or %s)" % (admin.ENV_PATH, DEFAULT_PATH))
    store.add_argument("--json", action="store_true", help="print JSON instead of text")

    ls = sub.add_parser("list", parents=[store], help="list lessons (retired ones only with --status)")
    ls.add_argument("--skill")
    ls.add_argument("--category")
    ls.add_argument("--rule", help="short or full XCCDF rule id: the lesson's rule or one its evidence names")
    ls.add_argument("--kind", choices=L.KINDS)
    ls.add_argument("--status", help="comma-separated statuses, or all (default: candidate,confirmed)")
    ls.add_argument("--evidence", action="store_true", help="with --json: add each lesson's evidence rows")
    ls.set_defaults(func=cmd_list)

    show = sub.add_parser("show", parents=[store], help="one lesson and its evidence rows")
    show.add_argument("id", help="lesson id (L + 12 hex digits)")
    show.set_defaults(func=cmd_show)

    merge = sub.add_parser("merge", help="merge store SRC into store DEST")
    merge.add_argument("src")
    merge.add_argument("dest")
    merge.add_argument("--check", action="store_true", help="report what would be added, write nothing")
    merge.add_argument("--lock-timeout", type=float, default=DEFAULT_LOCK_TIMEOUT,
                       help="seconds to wait for DEST's lock (default %(default)s)")
    merge.add_argument("--json", action="store_true", help="print JSON instead of text")
    merge.set_defaults(func=cmd_merge)

    doctor = sub.add_parser("doctor", parents=[store], help="check meta.json, every table and attempts/*.json")
    doctor.set_defaults(func=cmd_doctor)

    repair = sub.add_parser("repair", parents=[store], help="rebuild corrupt tables from what parses, under the lock")
    repair.add_argument("--lock-timeout", type=float, default=DEFAULT_LOCK_TIMEOUT,
                        help="seconds to wait for the store's lock (default %(default)s)")
    repair.set_defaults(func=cmd_repair)
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    if getattr(args, "status", None) is not None:
        try:
            admin.statuses(args.status)
        except ValueError as exc:
            parser().error(str(exc))
    try:
        return args.func(args)
    except MemoryStoreError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
