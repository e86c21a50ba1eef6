"""The catalog's disk cache: a pickle per datastream sha256 under ``~/.cache/scapforge/catalog``
(or ``$SCAPFORGE_CATALOG_CACHE``; an empty value turns it off), so the forks of one run and
later runs load the parsed catalog instead of parsing the XML again.

A file lock makes one process parse while the others wait and then load. Only a cache file
owned by this user and writable by no one else is loaded. Its name carries the layout key
(``layout_version``): a digest of the catalog's source files, so a changed catalog never
reads a pickle of an older layout.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import tempfile
import time
from typing import Callable, Iterable, Optional, TypeVar

from ansible_collections.scapforge.remediation.plugins.plugin_utils import deps

try:
    from filelock import FileLock, Timeout
except ImportError:
    deps.missing("filelock")

#: bumped when the pickled layout changes in a way the source digest would not show
#: (2: the records moved from catalog.py to _content.model, issue 16)
DISK_FORMAT = 2

C = TypeVar("C")


def layout_version(sources: Iterable[str], disk_format: int = DISK_FORMAT) -> str:
    """The layout key: 12 hex digits of a sha256 over ``disk_format`` and each source file's
    base name and bytes, in name order (the same files in any order give the same key)."""
    digest = hashlib.sha256(b"scapforge catalog format %d\n" % disk_format)
    for path in sorted(sources, key=os.path.basename):
        with open(path, "rb") as handle:
            data = handle.read()
        digest.update(b"%s %d\n" % (os.path.basename(path).encode("utf-8"), len(data)))
        digest.update(data)
    return digest.hexdigest()[:12]


def cache_dir() -> Optional[str]:
    """``$SCAPFORGE_CATALOG_CACHE`` (empty: no disk cache) or ``~/.cache/scapforge/catalog``."""
    value = os.environ.get("SCAPFORGE_CATALOG_CACHE")
    if value is not None:
        return value or None
    return os.path.join(os.path.expanduser("~"), ".cache", "scapforge", "catalog")


def load(path: str, digest: str, kind: type) -> Optional[object]:
    """The ``kind`` object pickled at ``path``, or None: missing, not ours, writable by
    others, unreadable, or not the catalog of ``digest``."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    try:
        with open(path, "rb") as handle:
            catalog = pickle.load(handle)
    except Exception:  # a truncated or foreign file: parse again
        return None
    return catalog if isinstance(catalog, kind) and getattr(catalog, "sha256", None) == digest else None


def store(directory: str, path: str, catalog: object) -> None:
    """Pickle ``catalog`` to ``path`` atomically (a temporary file in ``directory``, renamed)."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".catalog-")
    try:
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(catalog, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def cached(digest: str, layout: str, kind: "type[C]", parse: Callable[[], C]) -> C:
    """The ``kind`` object of ``digest`` from the disk cache, else ``parse()`` stored there.
    One process parses while the others wait on the lock (forks of one run). A cache that
    cannot be used (no home, read-only, lock timeout) is skipped: the catalog is parsed as
    without one. A loaded object gets ``loaded_from_disk`` True and ``load_seconds``."""
    directory = cache_dir()
    if not directory:
        return parse()
    path = os.path.join(directory, "%s-%s.pickle" % (digest, layout))
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        lock = FileLock(path + ".lock", timeout=120)
        lock.acquire()
    except (OSError, Timeout):
        return parse()
    try:
        started = time.perf_counter()
        catalog = load(path, digest, kind)
        if catalog is not None:
            catalog.loaded_from_disk = True  # type: ignore[attr-defined]
            catalog.load_seconds = time.perf_counter() - started  # type: ignore[attr-defined]
            return catalog  # type: ignore[return-value]
        catalog = parse()
        with contextlib.suppress(OSError, pickle.PicklingError):
            store(directory, path, catalog)
        return catalog
    finally:
        lock.release()
