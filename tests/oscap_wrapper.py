"""A lab host's /usr/bin/oscap replaced, for a fault test, by a wrapper around the real one: the
``oscap xccdf`` calls of the run are counted in /run/scapforge-oscap-count, and those whose
number is listed in /run/scapforge-oscap-at run a fault first (a signal, a hang). The real
binary comes back, byte for byte, when the block ends."""

from __future__ import annotations

import contextlib
import shlex
import typing as t

REAL = "/usr/bin/oscap.scapforge-real"
COUNT, AT = "/run/scapforge-oscap-count", "/run/scapforge-oscap-at"
WRAPPER = """#!/bin/sh
real=%(real)s
if [ "$1" = xccdf ]; then
  n=$(( $(cat %(count)s 2>/dev/null || echo 0) + 1 ))
  echo "$n" > %(count)s
  if grep -qx "$n" %(at)s 2>/dev/null; then
%(fault)s
  fi
fi
exec "$real" "$@"
"""


def root(host, command: str, check: bool = True, timeout: int = 120) -> str:
    return host.ssh("sudo sh -c %s" % shlex.quote(command), check=check, timeout=timeout).stdout


def calls(host) -> int:
    """How many ``oscap xccdf`` calls the wrapper saw."""
    return int(root(host, "cat %s" % COUNT).strip())


@contextlib.contextmanager
def wrapped_oscap(host, at: t.Sequence[int], fault: str, leftovers: t.Sequence[str] = ()) -> t.Iterator[None]:
    """Within the block, ``oscap xccdf`` call number n (counted from 1) runs the shell lines
    ``fault`` first when n is in ``at``. ``leftovers``: files the fault writes, removed after."""
    real = root(host, "sha256sum /usr/bin/oscap").split()[0]
    script = WRAPPER % {"real": REAL, "count": COUNT, "at": AT, "fault": fault}
    numbers = shlex.quote("".join("%d\n" % n for n in at))
    root(host, "mv /usr/bin/oscap %s && cat > /usr/bin/oscap <<'EOF'\n%sEOF\nchmod 0755 /usr/bin/oscap && "
               "printf %s > %s && rm -f %s %s" % (REAL, script, numbers, AT, COUNT, " ".join(leftovers)))
    try:
        yield
    finally:
        root(host, "mv -f %s /usr/bin/oscap; rm -f %s %s %s" % (REAL, COUNT, AT, " ".join(leftovers)), check=False)
    assert root(host, "sha256sum /usr/bin/oscap").split()[0] == real
