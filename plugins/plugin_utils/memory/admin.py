# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Looking at what was learned and combining stores (issue 6, items 8 and 9).

One implementation behind the front ends: the ``scapforge.remediation.lessons`` lookup,
the ``scapforge.remediation.memory_merge`` action and ``tools/lessons.py``.

- :func:`list_lessons` / :func:`get_lesson` only READ: they go through :func:`read_view`, a
  :meth:`MemoryStore.snapshot` (no lock, nothing moved aside, nothing migrated), so looking at
  a store while a run writes it neither waits nor changes anything.
- :func:`doctor` checks every file of a store without changing it; :func:`repair` rebuilds the
  corrupt tables from what parses, under the store's lock (issue 19 item 6).
- :func:`merge_stores` reads ``src`` through the same view and writes ``dest`` inside
  ``dest``'s transaction (its lock), with :func:`learning.merge` doing the union; in check
  mode the merge runs on an in-memory copy of ``dest`` and nothing is written.
"""

from __future__ import annotations

import contextlib
import os
import re
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps, safety
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import learning
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import lessons as L
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory import store as S
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.errors import (
    MemoryCorrupt, MemorySchemaError, MemoryStoreError)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.store import (
    DEFAULT_LOCK_TIMEOUT, DEFAULT_PATH, SCHEMA_VERSION, MemoryStore)

try:
    from tinydb import TinyDB
    from tinydb.storages import MemoryStorage
    from tinydb.table import Document
except ImportError:
    deps.missing("tinydb")

#: environment variable naming the store (the lookup's ``path`` option reads it too).
ENV_PATH = "SCAPFORGE_MEMORY_PATH"
#: statuses listed unless asked otherwise: retired lessons are kept for their evidence but
#: never selected (seed 004), so a listing of "what memory knows" leaves them out by default.
DEFAULT_STATUSES = (L.CANDIDATE, L.CONFIRMED)
#: ``status`` value that means every status.
ALL = "all"
#: the tables a merge touches (learning.merge).
MERGED_TABLES = ("lessons", "evidence", "usage")
#: the schema number a damaged meta.json still names.
_SCHEMA_RE = re.compile(rb'"schema"\s*:\s*(\d+)')


def default_path() -> str:
    """The store path when none is given: ``$SCAPFORGE_MEMORY_PATH``, else ``~/.scapforge/memory``
    (issue 6's ``scapforge_memory_path`` default); not expanded."""
    return os.environ.get(ENV_PATH) or DEFAULT_PATH


def _abspath(path: str) -> str:
    return os.path.abspath(os.path.expanduser(str(path)))


def statuses(values: t.Iterable[str] | str | None) -> tuple[str, ...]:
    """Normalise a status filter: None or empty -> :data:`DEFAULT_STATUSES`; ``"all"`` (alone or
    in the list) -> every status; a comma-separated string is split. Raises ValueError naming
    an unknown status."""
    if values is None:
        return DEFAULT_STATUSES
    if isinstance(values, str):
        values = values.split(",")
    wanted = [str(v).strip() for v in values if str(v).strip()]
    if not wanted:
        return DEFAULT_STATUSES
    if ALL in wanted:
        return L.STATUSES
    bad = [v for v in wanted if v not in L.STATUSES]
    if bad:
        raise ValueError("unknown lesson status %s (valid: %s, %s)" % (", ".join(map(repr, bad)),
                                                                       ", ".join(L.STATUSES), ALL))
    return tuple(s for s in L.STATUSES if s in wanted)


@contextlib.contextmanager
def read_view(path: str) -> t.Iterator[t.Any]:
    """``with read_view(path) as view:`` -- the store's tables read-only (``view.lessons``,
    ``.evidence``, ``.usage``, ... as in :class:`store.Transaction`), or None when ``path``
    does not exist (nothing was learned there yet).

    Never writes: unlike a bare :meth:`MemoryStore.snapshot`, a store at an older schema is
    refused instead of migrated. Raises MemoryCorrupt (a table file that is not valid JSON,
    named by ``.table``; left in place), MemorySchemaError (older, newer or unknown schema),
    MemoryStoreError (``path`` is not a directory, I/O errors).
    """
    full = _abspath(path)
    if not os.path.exists(full):
        yield None
        return
    if not os.path.isdir(full):
        raise MemoryStoreError("memory store path %s is not a directory" % full)
    store = MemoryStore(full)
    found = store.schema()
    if found is not None and found < SCHEMA_VERSION:
        raise MemorySchemaError(found, SCHEMA_VERSION, "reading it would migrate it and this view never "
                                "writes; the next run with memory on, or a merge into it, migrates it "
                                "(with a backup)")
    with store.snapshot() as view:
        yield view


def _scope(doc: t.Mapping) -> dict:
    return doc.get("scope") or {}


def matches(doc: t.Mapping, skill: str | None = None, category: str | None = None, rule: str | None = None,
            kind: str | None = None, status: t.Iterable[str] = DEFAULT_STATUSES,
            ids: t.Iterable[str] | None = None) -> bool:
    """Whether a lesson document passes the filters (None: no filter).

    skill, category: equal to ``scope.skill`` / ``scope.category`` (a skill-wide lesson has no
    category and matches no category filter); rule: short or full XCCDF rule id, matching the
    lesson's own ``scope.rule`` or any rule its evidence names (``rules``: a skill-wide caution
    such as read_only_proc_sys is listed under every sysctl rule it was seen on); kind: equal;
    status: one of; ids: one of.
    """
    scope = _scope(doc)
    if skill is not None and scope.get("skill") != skill:
        return False
    if category is not None and scope.get("category") != category:
        return False
    if rule is not None:
        short = safety.short_rule_id(rule)
        if scope.get("rule") != short and short not in (doc.get("rules") or {}):
            return False
    if kind is not None and doc.get("kind") != kind:
        return False
    if doc.get("status") not in tuple(status):
        return False
    return ids is None or doc.get("id") in set(ids)


def sort_key(doc: t.Mapping) -> tuple:
    """Listing order: skill, category, rule (skill-wide lessons first), kind (positive,
    negative, caution), id."""
    scope = _scope(doc)
    kind = doc.get("kind")
    return (scope.get("skill") or "", scope.get("category") or "", scope.get("rule") or "",
            L.KINDS.index(kind) if kind in L.KINDS else len(L.KINDS), doc.get("id") or "")


def evidence_sort_key(row: t.Mapping) -> tuple:
    """Evidence order: time, source kind, source id."""
    return (row.get("time") or "", row.get("source_kind") or "", row.get("source_id") or "")


def _check_kind(kind: str | None) -> None:
    if kind is not None and kind not in L.KINDS:
        raise ValueError("unknown lesson kind %r (valid: %s)" % (kind, ", ".join(L.KINDS)))


def list_lessons(path: str, skill: str | None = None, category: str | None = None, rule: str | None = None,
                 kind: str | None = None, status: t.Iterable[str] | str | None = None,
                 ids: t.Iterable[str] | None = None, with_evidence: bool = False) -> list[dict]:
    """The lessons of the store at ``path`` that pass the filters (:func:`matches`; ``status``
    through :func:`statuses`, default candidate and confirmed), in :func:`sort_key` order.

    Each item is the stored lesson document as a plain dict (id, kind, status, scope, cue,
    action, fingerprint, tasks, reason, weight, confidence, support, outcomes, created,
    updated, dedupe_key, rules, pattern, credit, utility; see ``lessons.Lesson``); with
    ``with_evidence`` it also has ``evidence``: its evidence rows (``lessons.Evidence``) in
    :func:`evidence_sort_key` order. A store that does not exist gives []. Read-only
    (:func:`read_view`); raises what it raises, and ValueError for an unknown kind or status.
    """
    _check_kind(kind)
    wanted = statuses(status)
    id_set = None if ids is None else {str(i) for i in ids}
    with read_view(path) as view:
        if view is None:
            return []
        found = [dict(doc) for doc in view.lessons.all()
                 if matches(doc, skill, category, rule, kind, wanted, id_set)]
        if with_evidence and found:
            rows: dict[str, list] = {doc["id"]: [] for doc in found}
            for row in view.evidence.all():
                if row.get("lesson") in rows:
                    rows[row["lesson"]].append(dict(row))
            for doc in found:
                doc["evidence"] = sorted(rows[doc["id"]], key=evidence_sort_key)
    return sorted(found, key=sort_key)


def get_lesson(path: str, lesson_id: str) -> dict | None:
    """One lesson with its ``evidence`` rows (whatever its status), None when the store or
    the lesson does not exist. Read-only; raises as :func:`list_lessons`."""
    found = list_lessons(path, status=ALL, ids=[lesson_id], with_evidence=True)
    return found[0] if found else None


# ----------------------------------------------------------------------------- merge
def _scratch_copy(view: t.Any) -> t.Any:
    """The merged tables of a read-only view copied into an in-memory TinyDB (doc ids kept),
    so :func:`learning.merge` can run on it without touching the disk; an empty one for None."""
    db = TinyDB(storage=MemoryStorage)
    scratch = type("ScratchTables", (), {})()
    for name in MERGED_TABLES:
        table = db.table(name)
        if view is not None:
            docs = [Document(dict(doc), doc_id=doc.doc_id) for doc in getattr(view, name).all()]
            if docs:
                table.insert_multiple(docs)
        setattr(scratch, name, table)
    return scratch


def _merge_into(src: t.Any, dst: t.Any) -> dict:
    """Run :func:`learning.merge` and say what changed in ``dst`` (counts, see
    :func:`merge_stores`)."""
    lessons_before = {doc.doc_id: dict(doc) for doc in dst.lessons.all()}
    usage_before = {doc.doc_id: dict(doc) for doc in dst.usage.all()}
    counts = learning.merge(src, dst)
    lessons_after = {doc.doc_id: dict(doc) for doc in dst.lessons.all()}
    usage_after = {doc.doc_id: dict(doc) for doc in dst.usage.all()}
    result = {
        "lessons_added": counts["lessons_added"],
        "lessons_in_both": counts["lessons_updated"],
        "lessons_changed": sum(1 for i, doc in lessons_before.items() if lessons_after.get(i) != doc),
        "evidence_added": counts["evidence_added"],
        "usage_added": counts["usage_added"],
        "usage_stamped": sum(1 for i, doc in usage_before.items() if usage_after.get(i) != doc),
        "dest_lessons": len(dst.lessons),
        "dest_evidence": len(dst.evidence),
        "dest_usage": len(dst.usage),
    }
    result["changed"] = any(result[k] for k in ("lessons_added", "lessons_changed", "evidence_added",
                                                "usage_added", "usage_stamped"))
    return result


def merge_stores(src: str, dest: str, check: bool = False, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> dict:
    """Merge the store at ``src`` into the store at ``dest`` (issue 6, item 8).

    ``src`` is read through :func:`read_view` (no lock, never written); ``dest`` is written
    inside its own transaction (lock wait up to ``lock_timeout`` seconds; created, mode 0700,
    when missing; migrated first when at an older schema). The union is
    :func:`learning.merge`: lessons by dedupe key, evidence by (lesson, source kind, source
    id), usage rows by key, support/weight/confidence recomputed; merging the same source
    twice adds nothing the second time. ``check``: the merge runs on an in-memory copy of
    ``dest`` and nothing is written anywhere.

    Returns {"changed": dest gained or changed anything (would have, in check mode),
    "lessons_added", "lessons_in_both" (lessons both stores hold), "lessons_changed" (dest
    lessons whose fields changed: status, support, weight...), "evidence_added",
    "usage_added", "usage_stamped" (dest usage rows that took src's outcome), "dest_lessons",
    "dest_evidence", "dest_usage" (rows in dest after the merge), "src", "dest" (absolute
    paths), "check_mode"}.

    Raises MemoryStoreError when ``src`` does not exist or is the same store as ``dest``,
    and the store errors of :func:`read_view` and :meth:`MemoryStore.transaction`
    (MemoryCorrupt names the table; in ``dest`` it has been moved aside, in ``src`` it is
    left in place).
    """
    src_path, dest_path = _abspath(src), _abspath(dest)
    if not os.path.isdir(src_path):
        raise MemoryStoreError("source memory store %s does not exist" % src_path)
    if os.path.realpath(src_path) == os.path.realpath(dest_path):
        raise MemoryStoreError("source and destination are the same memory store (%s)" % src_path)
    with read_view(src_path) as src_view:
        if check:
            with read_view(dest_path) as dest_view:
                scratch = _scratch_copy(dest_view)
            result = _merge_into(src_view, scratch)
        else:
            with MemoryStore(dest_path, lock_timeout=lock_timeout).transaction() as tx:
                result = _merge_into(src_view, tx)
    result.update(src=src_path, dest=dest_path, check_mode=bool(check))
    return result


# ----------------------------------------------------------------------------- doctor, repair
def _meta_problem(store: MemoryStore) -> str | None:
    try:
        found = store.schema()
    except MemoryCorrupt as exc:
        return "is corrupt (%s)" % exc.reason
    except MemoryStoreError as exc:
        return "cannot be read: %s" % exc
    if found is None:
        return "is missing but tables exist (the schema is unknown)" if table_files(store.path) else None
    if found > SCHEMA_VERSION:
        return "says schema %d, newer than this code's %d (upgrade the collection)" % (found, SCHEMA_VERSION)
    return None


def table_files(path: str) -> list[str]:
    """The table files of the store at ``path`` that exist, relative to it: the fixed tables, then
    attempts/*.json (sorted)."""
    found = [S.table_file(n) for n in S.TABLES if os.path.isfile(os.path.join(path, S.table_file(n)))]
    try:
        names = sorted(os.listdir(os.path.join(path, S.ATTEMPTS_DIR)))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return found + [os.path.join(S.ATTEMPTS_DIR, n) for n in names if n.endswith(".json")]


def doctor(path: str) -> dict:
    """Check the store at ``path`` without changing it (no lock: files are only ever replaced
    whole): meta.json, every table file and attempts/*.json, and the moved-aside copies
    (``<file>.corrupt-<UTC>``) whose documents were not recovered yet.

    Returns {"path", "checked": [files], "problems": [{"file", "problem"}]}; a store that does
    not exist is one problem (a mistyped path must not look healthy).
    """
    full = _abspath(path)
    if not os.path.isdir(full):
        return {"path": full, "checked": [], "problems": [{"file": full, "problem": "no memory store here"}]}
    store = MemoryStore(full)
    problems = []
    meta = _meta_problem(store)
    if meta:
        problems.append({"file": S.META_FILE, "problem": meta})
    files = table_files(full)
    for rel in files:
        why = S.file_problem(os.path.join(full, rel))
        if why:
            problems.append({"file": rel, "problem": why})
    for rel in S.aside_files(full):
        problems.append({"file": rel, "problem": "a corrupt copy moved aside; its whole documents are not recovered yet "
                                                 "(tools/lessons.py repair)"})
    return {"path": full, "checked": [S.META_FILE] + files, "problems": problems}


def _aside_table(rel: str) -> tuple[str, str | None]:
    """(table name inside the file, run id for an attempts file) of a moved-aside copy."""
    original = rel.split(".json.corrupt-", 1)[0]
    if original.startswith(S.ATTEMPTS_DIR + os.sep):
        return "attempts", original[len(S.ATTEMPTS_DIR) + 1:]
    return original, None


def _recover_into(table: t.Any, name: str, recovery: S.Recovery) -> dict:
    """Insert the recovered documents of table ``name`` into the live ``table``: with their
    own doc ids into an empty table, else with new ids, leaving out a document already there
    (equal, or with the same ``id`` field: a lesson recorded again since). One write."""
    docs = recovery.tables.get(name, {})
    dropped = list(recovery.dropped)
    dropped += [{"table": other, "id": None, "start": None, "end": None,
                 "why": "%d document(s) of table %r, which does not belong in this file" % (len(d), other)}
                for other, d in recovery.tables.items() if other != name]
    existing = [dict(doc) for doc in table.all()]
    ids = {doc.get("id") for doc in existing if doc.get("id") is not None}
    keep, skipped = [], []
    for doc_id, doc in docs.items():
        if doc in existing or (doc.get("id") is not None and doc.get("id") in ids):
            skipped.append(doc_id)
        else:
            keep.append(Document(doc, doc_id=int(doc_id)) if not existing else doc)
    if keep:
        table.insert_multiple(keep)
    return {"recovered": [i for i in docs if i not in skipped], "already_there": skipped, "dropped": dropped}


def _repair_meta(store: MemoryStore) -> dict | None:
    """Under the lock: rebuild a corrupt or missing meta.json from the schema number its bytes
    (or its latest moved-aside copy's) still name. None when meta.json is fine; raises
    MemoryStoreError naming the problem when there is no schema number to be found."""
    if _meta_problem(store) is None:
        return None
    moved = None
    if os.path.exists(store.meta_path):
        moved = S.move_aside(store.meta_path)
    copies = [c for c in S.aside_files(store.path) if c.startswith(S.META_FILE + ".corrupt-")]
    for rel in reversed(copies):
        with open(os.path.join(store.path, rel), "rb") as handle:
            found = _SCHEMA_RE.search(handle.read())
        if found and int(found.group(1)) <= SCHEMA_VERSION:
            store._write_meta({"schema": int(found.group(1)), "created": S.utc_now(), "migrations": [],
                               "repaired": {"time": S.utc_now(), "from": rel}})
            S.mark_repaired(os.path.join(store.path, rel))
            return {"file": S.META_FILE, "moved_to": moved, "from": rel, "recovered": ["schema %d" % int(found.group(1))],
                    "already_there": [], "dropped": []}
    named = ", ".join(copies) or "no copies"
    raise MemoryStoreError("meta.json is corrupt or missing and no copy of it names a schema number (%s): restore it "
                           "or write {\"schema\": %d} into %s" % (named, SCHEMA_VERSION, store.meta_path))


def repair(path: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> dict:
    """Rebuild every corrupt table of the store at ``path`` from what parses (issue 19 item 6).

    Under the store's lock: a corrupt meta.json is rebuilt from the schema number it still
    names; every corrupt table file is moved aside (``<file>.corrupt-<UTC>``, as a run does);
    then every moved-aside copy not yet repaired -- the ones just moved and the ones a run
    moved earlier, which is the usual case: the run started a fresh table and kept working --
    is scanned (:func:`store.recover_tinydb`) and its whole documents are written back into
    the live table (:func:`_recover_into`), in one transaction with the store's atomic writes.
    The copy is then renamed ``<copy>.repaired``: its bytes stay, a second repair does nothing.

    Returns {"path", "repaired": [{"file", "moved_to", "from", "recovered": [doc ids],
    "already_there": [doc ids], "dropped": [{"table", "id", "start", "end", "why"}]}],
    "problems": [text]} -- problems: what could not be repaired (a copy in which no document
    of its table parses is left as it is). Raises MemoryStoreError (no store, lock, I/O, a
    meta.json with no schema to be found).
    """
    full = _abspath(path)
    if not os.path.isdir(full):
        raise MemoryStoreError("no memory store at %s" % full)
    store = MemoryStore(full, lock_timeout=lock_timeout)
    repaired, problems = [], []
    with store.locked():
        meta = _repair_meta(store)
    if meta:
        repaired.append(meta)
    moved = {to for _table, to, _why in store.move_corrupt_aside() if to}
    with store.transaction() as tx:
        for run in tx.attempt_runs():
            try:
                tx.attempts(run)
            except MemoryCorrupt as exc:
                moved.add(exc.moved_to or "")
        for rel in S.aside_files(full):
            if rel.startswith(S.META_FILE + "."):
                continue
            name, run_id = _aside_table(rel)
            copy = os.path.join(full, rel)
            with open(copy, "rb") as handle:
                recovery = S.recover_tinydb(handle.read())
            if name not in recovery.tables:
                problems.append("%s: no document of table %r parses (%s); left as it is" % (
                    rel, name, "; ".join(d["why"] for d in recovery.dropped) or "no table in it"))
                continue
            table = tx.attempts(run_id) if run_id else getattr(tx, name)
            done = _recover_into(table, name, recovery)
            S.mark_repaired(copy)
            original = os.path.join(full, rel.split(".corrupt-", 1)[0])
            repaired.append(dict(done, file=os.path.relpath(original, full), moved_to=copy if copy in moved else None,
                                 **{"from": rel}))
    return {"path": full, "repaired": repaired, "problems": problems}
