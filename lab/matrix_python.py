#!/usr/bin/env python3
"""A Python 3.13 controller for `make test-matrix`: Debian trixie's python3.13, run from this host.

ansible-core 2.20 and 2.21 need Python 3.12 or newer on the controller; Debian 12 has 3.11.
This builds, once, a minimal Debian trixie root (debootstrap minbase with python3.13 and
python3.13-venv, about 270 MB and 2 minutes) under ``$SCAPFORGE_MATRIX_HOME`` (default
``$SCAPFORGE_LAB_HOME/matrix``, outside any checkout), and points its python3.13 binary at
the root's own dynamic loader and libraries (patchelf: interpreter and DT_RPATH). The result
runs directly on this host, with this host's network, files and processes: no chroot, no
container, nothing mounted. It is the controller of the 2.20 and 2.21 sessions of noxfile.py;
the targets (the lab hosts) are not affected.

    python3 lab/matrix_python.py          build when missing, print the interpreter's path

Needs root, debootstrap and patchelf. Exit status 0, or 1 with the reason on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SUITE = "trixie"
PACKAGES = ("python3.13", "python3.13-venv")
#: what the root was built from; a change rebuilds it.
SPEC = {"suite": SUITE, "variant": "minbase", "include": list(PACKAGES), "patch": "interpreter+rpath v1"}
#: modules the tests need that live in shared objects of the root (a wrong library path fails here).
CHECK = "import ssl, sqlite3, ctypes, lzma, bz2, zlib, hashlib, venv, _decimal; print(ssl.OPENSSL_VERSION)"


def home() -> Path:
    """The matrix home: $SCAPFORGE_MATRIX_HOME, else $SCAPFORGE_LAB_HOME/matrix."""
    explicit = os.environ.get("SCAPFORGE_MATRIX_HOME")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("SCAPFORGE_LAB_HOME", "/var/lib/scapforge-lab")) / "matrix"


def interpreter(root: Path | None = None) -> Path:
    """Path of the patched python3.13 in the trixie root (it may not be built yet)."""
    return (root or home() / SUITE) / "usr" / "bin" / "python3.13"


def _patch(root: Path) -> None:
    """Make root's python3.13 load with root's ld.so and libraries. DT_RPATH (not RUNPATH), so
    the extension modules' libraries (libssl, libsqlite3, ...) resolve in the root too."""
    from scapforge_lab import _run, _tool
    libs = ":".join(str(root / d) for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"))
    _run([_tool("patchelf"), "--set-interpreter", str(root / "usr/lib64/ld-linux-x86-64.so.2"),
          "--force-rpath", "--set-rpath", libs, str(interpreter(root))])


def ensure(mirror: str | None = None, log=print) -> Path:
    """Build the trixie root when it is missing or was built from another SPEC; return the
    interpreter's path after checking it runs and imports CHECK. Raises LabError."""
    from scapforge_lab import _remove_tree, _run, _tool, _umount_all  # the lab's (needs PyYAML): not for noxfile.py
    root = home() / SUITE
    stamp = root.with_name(SUITE + ".json")
    python = interpreter(root)
    with contextlib.suppress(FileNotFoundError, ValueError):
        if json.loads(stamp.read_text()) == SPEC and python.is_file():
            _check(python)
            return python
    mirror = mirror or os.environ.get("SCAPFORGE_LAB_MIRROR") or "http://deb.debian.org/debian"
    partial = root.with_name(SUITE + ".partial")
    root.parent.mkdir(parents=True, exist_ok=True)
    _remove_tree(partial)
    log("debootstrap %s (minbase, %s) from %s into %s: about 2 minutes"
        % (SUITE, ", ".join(PACKAGES), mirror, partial))
    try:
        _run([_tool("debootstrap"), "--variant=minbase", "--include=" + ",".join(PACKAGES), SUITE, str(partial),
              mirror], timeout=1800)
    finally:
        _umount_all(partial)  # debootstrap mounts proc/sys inside its target: never leave one
    with contextlib.suppress(FileNotFoundError):
        stamp.unlink()
    _remove_tree(root)
    os.replace(str(partial), str(root))
    _patch(root)  # after the move: the paths written into the binary are the final ones
    _check(python)
    stamp.write_text(json.dumps(SPEC, indent=1))
    return python


def _check(python: Path) -> None:
    from scapforge_lab import LabError
    proc = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise LabError("%s does not run: %s" % (python, (proc.stderr + proc.stdout).strip()[-2000:]))


def main() -> int:
    from scapforge_lab import LabError
    try:
        print(ensure(log=lambda line: print(line, file=sys.stderr)))
    except LabError as ex:
        print("matrix_python: %s" % ex, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
