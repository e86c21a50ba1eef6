# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The memory store: a directory of TinyDB JSON files on the controller (issue 6).

Layout of ``<path>`` (default ``~/.scapforge/memory``; directory mode 0700, files 0600)::

    meta.json                {"schema": SCHEMA_VERSION, "created": ISO UTC, "migrations": [...]}
    runs.json, work_items.json, lessons.json, evidence.json, usage.json
                             one TinyDB database per table: {"<table>": {"<doc id>": {...}}}
    attempts/<run_id>.json   the attempts of one run, table "attempts"
    .lock                    the inter-process lock (filelock)
    <file>.corrupt-<UTC>     a corrupt table moved aside (never deleted by this code)
    <file>.corrupt-<UTC>.repaired   such a copy once ``tools/lessons.py repair`` recovered its
                             whole documents into the live table (kept, never deleted)
    backup-<from>-<UTC>/     copy of the files taken before migrating from schema <from>

One file per table, and attempts split per run, because TinyDB rewrites a whole file on every
write: with 10k lessons + 50k attempts in one file an insert took 0.93 s (DESIGN decision 8).

Durability: every TinyDB write goes straight to disk (no CachingMiddleware): the new content
is written to a temp file in the same directory, flushed, ``fsync``-ed, renamed over the table
with ``os.replace`` and the directory is ``fsync``-ed. A crash or SIGKILL at any point leaves
either the old or the new file, never a partial one (an orphaned ``.<name>.*.tmp`` may remain;
the next transaction removes it).

Concurrency: Ansible forks one worker process per host and several controllers may share the
path. Every write happens inside :meth:`MemoryStore.transaction`, which holds an exclusive
``filelock.FileLock(<path>/.lock)`` (``flock(2)``) for its whole duration and opens every table
fresh from disk, so a fork sees what other forks committed before it took the lock. Readers
outside a transaction (:meth:`MemoryStore.snapshot`) take no lock; they may read a table file
at any time and always see a whole file, because files are only ever replaced by an atomic
rename -- but two tables read that way may come from different moments. Network filesystems
(NFS, SMB) are out of scope: ``flock`` and rename-over semantics there are not what this
module relies on; keep the store on a local filesystem (for AWX: a persistent volume mounted
into the job's container).

A transaction serialises; it does not roll back: each write is durable as soon as the TinyDB
call returns, and an exception inside the ``with`` block leaves the writes made so far.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import tempfile
import threading
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps
from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError

from .errors import MemoryCorrupt, MemoryLockBusy, MemorySchemaError, MemoryStoreError

try:
    import filelock
except ImportError:
    deps.missing("filelock")
try:
    from tinydb import Query, TinyDB
    from tinydb.storages import Storage
    from tinydb.table import Table
except ImportError:
    deps.missing("tinydb")
    Storage = object  # the base of AtomicJSONStorage below; deps.require names what is missing

SCHEMA_VERSION = 1
DEFAULT_PATH = '~/.scapforge/memory'
DEFAULT_LOCK_TIMEOUT = 120.0
TABLES = ('runs', 'work_items', 'lessons', 'evidence', 'usage')
ATTEMPTS_DIR = 'attempts'
META_FILE = 'meta.json'
LOCK_FILE = '.lock'
FILE_MODE = 0o600
DIR_MODE = 0o700
# A run id becomes a file name: no separators, no leading dot (temp and lock files start with one).
RUN_ID_RE = re.compile(r'^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$')
_TMP_SUFFIX = '.tmp'
#: appended to a moved-aside copy once ``tools/lessons.py repair`` has recovered what it holds.
REPAIRED_SUFFIX = '.repaired'


def _utc_stamp() -> str:
    """UTC time for file names, e.g. ``20261130T120102.123456Z``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%dT%H%M%S.%fZ')


def utc_now() -> str:
    """UTC time as ISO 8601 with seconds, e.g. ``2026-11-30T12:01:02Z``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dir(path: str) -> None:
    """Create ``path`` (and missing parents) with mode 0700; an existing directory is kept as
    it is (its mode is the owner's choice)."""
    if os.path.isdir(path):
        return
    try:
        os.makedirs(path, mode=DIR_MODE)
    except FileExistsError:
        return
    except OSError as e:
        raise MemoryStoreError('cannot create memory store directory %s: %s' % (path, e)) from e
    os.chmod(path, DIR_MODE)  # makedirs' mode is filtered by the umask
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` (bytes) so that a reader or a crash sees the old or the new
    content, never a mix: temp file in the same directory (mode 0600), write, flush,
    ``os.fsync``, ``os.replace``, ``fsync`` of the directory.

    Raises MemoryStoreError when the file cannot be written (the temp file is removed).
    """
    directory = os.path.dirname(path) or '.'
    try:
        fd, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), suffix=_TMP_SUFFIX,
                                   dir=directory)
    except OSError as e:
        raise MemoryStoreError('cannot write memory file %s: %s' % (path, e)) from e
    try:
        with os.fdopen(fd, 'wb') as handle:
            os.fchmod(handle.fileno(), FILE_MODE)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _fsync_dir(directory)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise MemoryStoreError('cannot write memory file %s: %s' % (path, e)) from e
        raise


def _read_bytes(path: str) -> bytes | None:
    """The file's bytes, None when it does not exist; other OS errors -> MemoryStoreError."""
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise MemoryStoreError('cannot read memory file %s: %s' % (path, e)) from e


_Identity = t.Tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns


def _read_with_identity(path: str) -> tuple[bytes | None, _Identity | None]:
    """The file's bytes and the identity of the very file read (fstat of the open file),
    (None, None) when it does not exist; other OS errors -> MemoryStoreError."""
    try:
        with open(path, 'rb') as handle:
            st = os.fstat(handle.fileno())
            return handle.read(), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        raise MemoryStoreError('cannot read memory file %s: %s' % (path, e)) from e


def _identity(path: str) -> _Identity:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class _CorruptFile(ScapforgeError):
    """Internal: the file's bytes are not a valid document; ``args[0]`` says why."""

    kind = 'corrupt_file'


def _parse_tinydb(raw: bytes) -> dict:
    """Parse and check the TinyDB shape ``{table: {"<int id>": {document}}}``; raises
    _CorruptFile. An empty file is corrupt too: this module never writes one."""
    if not raw:
        raise _CorruptFile('empty file')
    try:
        data = json.loads(raw.decode('utf-8'))
    except (UnicodeDecodeError, ValueError) as e:
        raise _CorruptFile('invalid JSON: %s' % e) from None
    if not isinstance(data, dict):
        raise _CorruptFile('top level is %s, not an object' % type(data).__name__)
    for name, docs in data.items():
        if not isinstance(docs, dict):
            raise _CorruptFile('table %r is %s, not an object' % (name, type(docs).__name__))
        for doc_id, doc in docs.items():
            if not doc_id.isdigit() or not isinstance(doc, dict):
                raise _CorruptFile('table %r: document %r is not {"<int id>": {...}}'
                                   % (name, doc_id))
    return data


def move_aside(path: str) -> str:
    """Rename a corrupt file to ``<path>.corrupt-<UTC>`` (bytes intact, never deleted) and
    return the new absolute path."""
    base = '%s.corrupt-%s' % (path, _utc_stamp())
    target, n = base, 0
    while os.path.exists(target):
        n += 1
        target = '%s-%d' % (base, n)
    try:
        os.rename(path, target)
        _fsync_dir(os.path.dirname(path))
    except OSError as e:
        raise MemoryStoreError('memory file %s is corrupt and could not be moved aside: %s'
                               % (path, e)) from e
    return os.path.abspath(target)


def file_problem(path: str) -> str | None:
    """Why the table file at ``path`` cannot be used ("is corrupt (...)", "cannot be read: ..."),
    None when it is whole or absent. Reads only (``tools/lessons.py doctor``)."""
    try:
        raw = _read_bytes(path)
        if raw is not None:
            _parse_tinydb(raw)
    except MemoryStoreError as e:
        return 'cannot be read: %s' % e
    except _CorruptFile as e:
        return 'is corrupt (%s)' % e
    return None


def mark_repaired(path: str) -> str:
    """Rename a moved-aside copy whose documents were recovered to ``<copy>.repaired`` (bytes
    kept; :func:`aside_files` no longer lists it) and return the new path."""
    target = path + REPAIRED_SUFFIX
    try:
        os.rename(path, target)
        _fsync_dir(os.path.dirname(target))
    except OSError as e:
        raise MemoryStoreError('cannot mark %s repaired: %s' % (path, e)) from e
    return target


def table_file(table: str) -> str:
    """The file of a table name as MemoryCorrupt names it, relative to the store:
    ``lessons`` -> ``lessons.json``, ``attempts/R1`` -> ``attempts/R1.json``, ``meta`` -> ``meta.json``."""
    return table + '.json'


def aside_files(path: str) -> list[str]:
    """The moved-aside copies (``<file>.corrupt-<UTC>``, not yet ``.repaired``) in the store
    at ``path`` and its attempts directory, as paths relative to ``path``, sorted."""
    found = []
    for rel in ('', ATTEMPTS_DIR):
        try:
            names = os.listdir(os.path.join(path, rel))
        except (FileNotFoundError, NotADirectoryError):
            continue
        found += [os.path.join(rel, n) for n in names if '.json.corrupt-' in n and not n.endswith(REPAIRED_SUFFIX)]
    return sorted(found)


class _Cut(ScapforgeError):
    """Internal to :func:`recover_tinydb`: the text stops making sense at ``pos``."""

    kind = 'recovery_cut'

    def __init__(self, pos: int, why: str):
        super().__init__(why)
        self.pos = pos
        self.why = why


class Recovery(t.NamedTuple):
    """What :func:`recover_tinydb` kept and dropped.

    tables: {table name: {doc id: document}} of every whole document, in file order.
    dropped: one dict per piece not kept, {"table", "id" (None when not known), "start",
      "end" (byte offsets in the file), "why"}; nothing is left out of both.
    """

    tables: dict
    dropped: list


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in ' \t\r\n':
        pos += 1
    return pos


def _expect(text: str, pos: int, char: str) -> int:
    """The position after ``char`` at ``pos`` (whitespace first skipped), or _Cut."""
    pos = _skip_ws(text, pos)
    if not text.startswith(char, pos):
        raise _Cut(pos, 'expected %r, found %s' % (char, repr(text[pos:pos + 20]) if pos < len(text) else 'the end of the file'))
    return pos + 1


def _decode(decoder: json.JSONDecoder, text: str, pos: int, want: type) -> tuple[t.Any, int]:
    pos = _skip_ws(text, pos)
    try:
        value, end = decoder.raw_decode(text, pos)
    except ValueError as e:
        raise _Cut(pos, 'cut off or invalid JSON: %s' % e) from None
    if not isinstance(value, want):
        raise _Cut(pos, 'a %s where a %s belongs' % (type(value).__name__, want.__name__))
    return value, end


def _recover_table(decoder: json.JSONDecoder, text: str, pos: int, name: str, out: Recovery) -> int:
    """Scan one table's ``{"<id>": {...}, ...}`` from ``pos`` (after its ``{``) into ``out``; the
    position after its ``}``. A document that is whole JSON but not ``"<int id>": {...}`` is
    dropped and the scan goes on; anything cut raises _Cut with the table and id in ``out``."""
    docs = out.tables.setdefault(name, {})
    first = True
    while True:
        pos = _skip_ws(text, pos)
        if text.startswith('}', pos):
            return pos + 1
        if not first:
            pos = _expect(text, pos, ',')
        first = False
        start = _skip_ws(text, pos)
        out.dropped.append({'table': name, 'id': None, 'start': start, 'end': None, 'why': None})  # until whole
        doc_id, pos = _decode(decoder, text, start, str)
        out.dropped[-1]['id'] = doc_id
        pos = _expect(text, pos, ':')
        doc, pos = _decode(decoder, text, pos, object)
        if doc_id.isdigit() and isinstance(doc, dict):
            out.dropped.pop()
            docs[doc_id] = doc
        else:
            out.dropped[-1].update(end=pos, why='not {"<int id>": {...}}')


def recover_tinydb(raw: bytes) -> Recovery:
    """The documents of a damaged TinyDB file ``{"<table>": {"<id>": {...}, ...}, ...}`` that
    are whole, read in file order with ``json.JSONDecoder.raw_decode`` one document at a time,
    and what was not kept. The scan stops at the first place the text stops making sense (a
    truncated file: the document cut in the middle and everything after it is one dropped
    range); nothing after that point is guessed at. Offsets are bytes (the store writes ASCII)."""
    text = raw.decode('utf-8', errors='replace')
    out = Recovery({}, [])
    decoder = json.JSONDecoder()
    pos, name = 0, None
    try:
        pos = _expect(text, pos, '{')
        first = True
        while True:
            pos = _skip_ws(text, pos)
            if text.startswith('}', pos):
                pos += 1
                break
            if not first:
                pos = _expect(text, pos, ',')
            first = False
            name, pos = _decode(decoder, text, pos, str)
            pos = _expect(text, _expect(text, pos, ':'), '{')
            pos = _recover_table(decoder, text, pos, name, out)
    except _Cut as cut:
        pending = out.dropped and out.dropped[-1]['why'] is None
        if not pending:
            out.dropped.append({'table': name, 'id': None, 'start': cut.pos, 'end': None, 'why': None})
        out.dropped[-1].update(end=len(text), why=cut.why)
    else:
        pos = _skip_ws(text, pos)
        if pos < len(text):
            out.dropped.append({'table': None, 'id': None, 'start': pos, 'end': len(text), 'why': 'data after the end of the file\'s object'})
    for row in out.dropped:  # characters -> bytes (equal for the ASCII this store writes)
        row['start'], row['end'] = len(text[:row['start']].encode('utf-8')), len(text[:row['end']].encode('utf-8'))
    return out


class AtomicJSONStorage(Storage):
    """TinyDB storage for one table file, written with :func:`atomic_write`.

    The file is read once, by :meth:`load` (when the table is opened), and parsed at most once
    until the next write: the parse that validates it at open, or the first ``read()``, is kept.
    Each ``read()`` returns a fresh ``dict`` of fresh table and document dicts (a document
    returned by TinyDB can be changed freely at the top level, and an update that raises half
    way leaves nothing behind; only Table writes persist); the values nested in a document
    (``scope``, ``rules``, ``tasks``...) are shared with the kept parse until the next write, so
    change them on a copy, as the memory code does. ``write(data)`` replaces the file
    atomically and keeps the bytes written (the next read parses them). Inside a transaction
    nobody else writes (the lock), so the bytes kept are the file's content; in a read-only
    snapshot the table is the file as it was when opened. Cost, measured with 10k lessons
    (a 10 MB lessons.json, bench/memory_fleet.py): a parse 0.1 to 0.15 s, a read after it
    0.02 s (the document copies), a write (dump + fsync) 0.15 s; before the parse was kept,
    every TinyDB call parsed the whole file, and a finished rule's learn transaction made 16
    parses.

    path: the JSON file. read_only: ``write`` raises MemoryStoreError (snapshots).
    validated: a dict shared by the store, path -> identity (device, inode, size, mtime in ns)
      of the file last checked to be a valid table; a file with the same identity is not
      parsed again at open. Files are only ever replaced by rename (a new inode), so a new
      identity means new content.
    """

    def __init__(self, path: str, read_only: bool = False,
                 validated: dict[str, _Identity] | None = None):
        super().__init__()
        self.path = path
        self.read_only = read_only
        self._validated = validated
        self._raw: bytes | None = None
        self._data: dict | None = None
        self._loaded = False
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryStoreError('memory file %s: used after its transaction ended (writes '
                                   'outside the lock are refused)' % self.path)

    def load(self) -> None:
        """Read the file now. Raises _CorruptFile (the caller decides about moving it aside)
        or MemoryStoreError (unreadable)."""
        raw, ident = _read_with_identity(self.path)
        data = None
        if raw is not None and (self._validated is None or self._validated.get(self.path) != ident):
            data = _parse_tinydb(raw)
            if self._validated is not None:
                self._validated[self.path] = ident
        self._raw, self._data, self._loaded = raw, data, True

    def read(self) -> dict[str, dict[str, t.Any]] | None:
        self._check_open()
        if not self._loaded:
            try:
                self.load()
            except _CorruptFile as e:
                raise MemoryStoreError('memory file %s is corrupt: %s' % (self.path, e)) from None
        if self._raw is None:
            return None  # TinyDB's convention for "no data yet"
        if self._data is None:
            try:
                self._data = json.loads(self._raw)
            except ValueError as e:  # only if the file changed in place with the same identity
                raise MemoryStoreError('memory file %s is corrupt: %s' % (self.path, e)) from None
        # fresh containers down to each document: TinyDB's updates change these in place
        return {name: {doc_id: dict(doc) for doc_id, doc in docs.items()} for name, docs in self._data.items()}

    def write(self, data: dict[str, dict[str, t.Any]]) -> None:
        self._check_open()
        if self.read_only:
            raise MemoryStoreError('memory file %s: write through a read-only snapshot; use '
                                   'MemoryStore.transaction()' % self.path)
        raw = json.dumps(data, separators=(',', ':')).encode('ascii')
        atomic_write(self.path, raw)
        self._raw, self._data, self._loaded = raw, None, True  # ``data`` may hold the caller's objects: not kept
        if self._validated is not None:
            self._validated[self.path] = _identity(self.path)  # ours: we hold the lock

    def close(self) -> None:
        self._raw, self._data, self._loaded, self._closed = None, None, False, True


_Problem = t.Tuple[str, t.Optional[str], str]  # (table name, moved_to, reason)


class Transaction:
    """The tables of one transaction (or read-only snapshot).

    Attributes ``runs``, ``work_items``, ``lessons``, ``evidence``, ``usage``:
    :class:`tinydb.table.Table`, opened fresh from disk when the transaction began. Use TinyDB's
    own API (insert, insert_multiple, search, get, update, upsert, all, contains, remove);
    documents are JSON objects (str keys, JSON values). ``path``: the store directory;
    ``read_only``: True for a snapshot (every write raises MemoryStoreError).
    """

    runs: Table
    work_items: Table
    lessons: Table
    evidence: Table
    usage: Table

    def __init__(self, path: str, read_only: bool,
                 validated: dict[str, _Identity] | None = None):
        self.path = path
        self.read_only = read_only
        self._validated = validated
        self._dbs: list[TinyDB] = []
        self._attempts: dict[str, Table] = {}
        self._closed = False

    def _open(self, name: str, file_path: str) -> Table:
        """Open one table; raises _CorruptFile or MemoryStoreError."""
        db = TinyDB(file_path, storage=AtomicJSONStorage, read_only=self.read_only,
                    validated=self._validated)
        self._dbs.append(db)
        db.storage.load()
        return db.table(name)

    def _open_or_report(self, name: str, file_path: str) -> tuple[Table | None, _Problem | None]:
        """(table, None) or (None, (name, moved_to, reason)) for a corrupt file."""
        try:
            return self._open(name, file_path), None
        except _CorruptFile as e:
            moved = None if self.read_only else move_aside(file_path)
            return None, (name, moved, str(e))

    def _open_tables(self) -> None:
        """Open the five fixed tables; every corrupt one is moved aside (writable mode), then
        MemoryCorrupt names the first and lists the others."""
        bad = []
        for name in TABLES:
            table, problem = self._open_or_report(name, os.path.join(self.path, name + '.json'))
            if problem:
                bad.append(problem)
            else:
                setattr(self, name, table)
        if bad:
            (name, moved, reason), rest = bad[0], bad[1:]
            raise MemoryCorrupt(name, moved, reason, tuple((n, m) for n, m, _reason in rest))

    def attempts(self, run_id: str) -> Table:
        """The attempts table of one run (``attempts/<run_id>.json``, table "attempts"),
        opened from disk on first use in this transaction and then reused.

        run_id: 1-128 characters of ``[A-Za-z0-9._-]``, not starting with a dot.
        Raises MemoryStoreError (bad run id, closed transaction, unreadable file) or
        MemoryCorrupt (the file was moved aside; see the class).
        """
        if self._closed:
            raise MemoryStoreError('memory transaction already closed')
        if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
            raise MemoryStoreError('bad run id for the attempts table: %r (want 1-128 of '
                                   '[A-Za-z0-9._-], no leading dot)' % (run_id,))
        if run_id in self._attempts:
            return self._attempts[run_id]
        directory = os.path.join(self.path, ATTEMPTS_DIR)
        if not self.read_only:
            _make_dir(directory)
        name = '%s/%s' % (ATTEMPTS_DIR, run_id)
        table, problem = self._open_or_report('attempts', os.path.join(directory, run_id + '.json'))
        if problem:
            raise MemoryCorrupt(name, problem[1], problem[2])
        self._attempts[run_id] = table
        return table

    def attempt_runs(self) -> list[str]:
        """Run ids that have an attempts file, sorted."""
        directory = os.path.join(self.path, ATTEMPTS_DIR)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        return sorted(n[:-5] for n in names if n.endswith('.json') and RUN_ID_RE.match(n[:-5]))

    def close(self) -> None:
        """Close every table; any later read or write through them raises MemoryStoreError."""
        for db in self._dbs:
            db.close()
        self._closed = True


# --- migrations -------------------------------------------------------------------------------

def _migrate_0_to_1(tx: Transaction) -> None:
    """Schema 0 -> 1: lessons gain ``status`` (issue 6, seed 002 admission rule). Schema 0 had
    no candidate stage; a lesson with evidence from an outcome or an attempt (observed on a
    host) becomes "confirmed", one backed only by Reflector text becomes "candidate".
    Idempotent: lessons that already have a status are left alone. One write per table."""
    observed = {e.get('lesson') for e in tx.evidence.all()
                if e.get('source_kind') in ('outcome', 'attempt')}

    def set_status(doc: dict) -> None:
        doc['status'] = 'confirmed' if doc.get('id') in observed else 'candidate'

    tx.lessons.update(set_status, ~Query().status.exists())


#: From schema N to N+1: a function of a writable :class:`Transaction`, run under the lock
#: after a backup copy of the store's files; it must be idempotent (a crash mid-way re-runs it).
MIGRATIONS: dict[int, t.Callable[[Transaction], None]] = {
    0: _migrate_0_to_1,
}


# --- the store --------------------------------------------------------------------------------

class MemoryStore:
    """A memory store directory (see the module docstring for layout and guarantees).

    path: the directory (``~`` expanded); created with mode 0700 by the first transaction.
    lock_timeout: seconds a transaction waits for the lock (default 120).
    Nothing is touched on disk by the constructor.
    """

    def __init__(self, path: str = DEFAULT_PATH, lock_timeout: float = DEFAULT_LOCK_TIMEOUT):
        self.path = os.path.abspath(os.path.expanduser(path))
        self.lock_path = os.path.join(self.path, LOCK_FILE)
        self.meta_path = os.path.join(self.path, META_FILE)
        self.lock_timeout = float(lock_timeout)
        self._local = threading.local()
        self._validated: dict[str, _Identity] = {}

    # -- public -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, timeout: float | None = None) -> t.Iterator[Transaction]:
        """``with store.transaction() as tx:`` -- exclusive access to the store.

        Takes the lock (waits up to ``timeout`` seconds, default ``lock_timeout``), removes
        temp files left by killed writers, checks the schema (creates meta.json in a new store,
        migrates an older one, refuses a newer one), opens every table fresh from disk and
        yields a :class:`Transaction`. On exit the tables are closed and the lock released.
        Writes are durable one by one; there is no rollback (module docstring).

        Raises:
          MemoryStoreError: lock not acquired in time (names the lock file and the seconds),
            nested transaction on this store object in this thread, I/O errors.
          MemoryCorrupt: a table file was corrupt; it has been moved aside and the body does
            not run. The next transaction starts that table empty.
          MemorySchemaError: the store's schema is newer than SCHEMA_VERSION, unknown, or a
            migration failed (its backup directory is named).
        """
        with self.locked(timeout):
            self._check_schema()
            tx = Transaction(self.path, read_only=False, validated=self._validated)
            try:
                tx._open_tables()
                yield tx
            finally:
                tx.close()

    @contextlib.contextmanager
    def locked(self, timeout: float | None = None) -> t.Iterator[None]:
        """``with store.locked():`` -- the store's lock alone, without the schema check or the
        tables (what :meth:`transaction` takes first; ``tools/lessons.py repair`` writes a
        rebuilt meta.json under it). Removes temp files left by killed writers. Raises
        MemoryStoreError as :meth:`transaction` does for the lock."""
        # Keyed by pid: a child forked inside a transaction waits for the lock like anyone.
        if getattr(self._local, 'held', None) == os.getpid():
            raise MemoryStoreError('nested memory transaction on %s (the lock is not '
                                   're-entrant across transactions)' % self.path)
        wait = self.lock_timeout if timeout is None else float(timeout)
        _make_dir(self.path)
        lock = filelock.FileLock(self.lock_path, timeout=wait, mode=FILE_MODE)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise MemoryLockBusy('memory store lock %s not acquired within %.1f s: another '
                                 'process holds it' % (self.lock_path, wait)) from None
        except OSError as e:
            raise MemoryStoreError('memory store lock %s: %s' % (self.lock_path, e)) from e
        self._local.held = os.getpid()
        try:
            self._remove_stale_temp_files()
            yield
        finally:
            self._local.held = None
            lock.release()

    def move_corrupt_aside(self, timeout: float | None = None) -> list[tuple[str, str, str]]:
        """Move every corrupt file of the store aside now, under the lock, and say which:
        [(table, moved_to, reason)], [] when every file is whole.

        What a transaction does when it opens the tables, repeated until one opens cleanly,
        so that a reader that met a corrupt table (a snapshot moves nothing) can have it moved
        aside once and go on with a fresh, empty table. A corrupt meta.json is moved aside and
        the list ends there: the next transaction refuses the store (schema unknown). The
        attempts files are not opened here (a transaction moves them when it opens them)."""
        found: list[tuple[str, str, str]] = []
        for _round in range(len(TABLES) + 2):  # each round moves at least one file away
            try:
                with self.transaction(timeout):
                    return found
            except MemoryCorrupt as e:
                found.append((e.table, e.moved_to or '', e.reason))
                found.extend((name, moved or '', 'corrupt (found with %s)' % e.table) for name, moved in e.others)
                if e.table == 'meta':
                    return found
        return found

    @contextlib.contextmanager
    def snapshot(self) -> t.Iterator[Transaction]:
        """``with store.snapshot() as view:`` -- the same tables read-only, without the lock.

        Each table is the whole file as it was when opened (atomic renames), but tables may
        come from different moments. A store that does not exist yet reads as empty. A store
        with an older schema is first migrated through a transaction (takes the lock).

        Raises MemoryCorrupt with ``moved_to=None`` (a snapshot moves nothing), MemorySchemaError,
        MemoryStoreError (I/O; writes through the view).
        """
        meta = self._read_meta(move_corrupt=False)
        if meta is not None and meta['schema'] < SCHEMA_VERSION:
            with self.transaction():
                pass
        elif meta is not None and meta['schema'] > SCHEMA_VERSION:
            raise self._newer(meta['schema'])
        elif meta is None and self._has_tables():
            raise self._unknown_schema()
        tx = Transaction(self.path, read_only=True, validated=self._validated)
        try:
            tx._open_tables()
            yield tx
        finally:
            tx.close()

    def schema(self) -> int | None:
        """The schema number in meta.json, None when the store has none yet. No lock.
        Raises MemoryCorrupt (moved_to None) when meta.json is corrupt."""
        meta = self._read_meta(move_corrupt=False)
        return None if meta is None else meta['schema']

    # -- internals --------------------------------------------------------------------------

    def _remove_stale_temp_files(self) -> None:
        """Temp files are only written under the lock, so any found while holding it belong
        to a writer that died before its rename."""
        for directory in (self.path, os.path.join(self.path, ATTEMPTS_DIR)):
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            for name in names:
                if name.startswith('.') and name.endswith(_TMP_SUFFIX):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(directory, name))

    def _read_meta(self, move_corrupt: bool) -> dict | None:
        raw = _read_bytes(self.meta_path)
        if raw is None:
            return None
        try:
            try:
                meta = json.loads(raw.decode('utf-8'))
            except (UnicodeDecodeError, ValueError) as e:
                raise _CorruptFile('invalid JSON: %s' % e) from None
            schema = meta.get('schema') if isinstance(meta, dict) else None
            if not isinstance(schema, int) or isinstance(schema, bool) or schema < 0:
                raise _CorruptFile('no integer "schema" >= 0')
        except _CorruptFile as e:
            moved = move_aside(self.meta_path) if move_corrupt else None
            raise MemoryCorrupt('meta', moved, str(e)) from None
        return meta

    def _write_meta(self, meta: dict) -> None:
        atomic_write(self.meta_path, json.dumps(meta, indent=1, sort_keys=True).encode('ascii'))

    def _has_tables(self) -> bool:
        if any(os.path.exists(os.path.join(self.path, n + '.json')) for n in TABLES):
            return True
        try:
            names = os.listdir(os.path.join(self.path, ATTEMPTS_DIR))
        except FileNotFoundError:
            return False
        return any(n.endswith('.json') for n in names)

    def _newer(self, found: int) -> MemorySchemaError:
        return MemorySchemaError(found, SCHEMA_VERSION, 'the store was written by newer code; '
                                 'upgrade the collection (the store is left untouched)')

    def _unknown_schema(self) -> MemorySchemaError:
        aside = sorted(n for n in os.listdir(self.path) if n.startswith(META_FILE + '.corrupt-'))
        return MemorySchemaError(None, SCHEMA_VERSION, '%s is missing but tables exist in %s '
                                 '(moved-aside copies: %s); restore it or write {"schema": N}'
                                 % (META_FILE, self.path, ', '.join(aside) or 'none'))

    def _check_schema(self) -> None:
        """Under the lock: create, migrate or refuse (see :meth:`transaction`)."""
        meta = self._read_meta(move_corrupt=True)
        if meta is None:
            if self._has_tables():
                raise self._unknown_schema()
            self._write_meta({'schema': SCHEMA_VERSION, 'created': utc_now(), 'migrations': []})
            return
        found = meta['schema']
        if found > SCHEMA_VERSION:
            raise self._newer(found)
        if found < SCHEMA_VERSION:
            self._migrate(meta)

    def _backup(self, found: int) -> str:
        """Copy meta.json, the table files and attempts/ to ``backup-<found>-<UTC>/`` (0700,
        files fsync-ed) and return its path."""
        target = os.path.join(self.path, 'backup-%d-%s' % (found, _utc_stamp()))
        _make_dir(target)
        sources = [META_FILE] + [n + '.json' for n in TABLES]
        attempts = os.path.join(self.path, ATTEMPTS_DIR)
        if os.path.isdir(attempts):
            _make_dir(os.path.join(target, ATTEMPTS_DIR))
            sources += [os.path.join(ATTEMPTS_DIR, n) for n in sorted(os.listdir(attempts))
                        if n.endswith('.json')]
        for rel in sources:
            src = os.path.join(self.path, rel)
            if not os.path.isfile(src):
                continue
            dst = os.path.join(target, rel)
            try:
                shutil.copy2(src, dst)
                with open(dst, 'rb') as handle:
                    os.fsync(handle.fileno())
            except OSError as e:
                raise MemoryStoreError('backup before migration failed (%s -> %s): %s'
                                       % (src, dst, e)) from e
        for directory in (os.path.join(target, ATTEMPTS_DIR), target, self.path):
            if os.path.isdir(directory):
                _fsync_dir(directory)
        return target

    def _migrate(self, meta: dict) -> None:
        found = meta['schema']
        missing = [v for v in range(found, SCHEMA_VERSION) if v not in MIGRATIONS]
        if missing:
            raise MemorySchemaError(found, SCHEMA_VERSION, 'no migration from schema %s'
                                    % ', '.join(map(str, missing)))
        backup = self._backup(found)
        for version in range(found, SCHEMA_VERSION):
            tx = Transaction(self.path, read_only=False, validated=self._validated)
            try:
                tx._open_tables()
                MIGRATIONS[version](tx)
            except MemoryStoreError:
                raise
            except Exception as e:
                raise MemorySchemaError(found, SCHEMA_VERSION, 'migration %d -> %d failed (%s: %s);'
                                        ' backup in %s' % (version, version + 1,
                                                           type(e).__name__, e, backup)) from e
            finally:
                tx.close()
            meta['schema'] = version + 1
            meta.setdefault('migrations', []).append(
                {'from': version, 'to': version + 1, 'time': utc_now(), 'backup': backup})
            self._write_meta(meta)
