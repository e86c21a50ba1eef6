"""Waivers: rules a person accepted as failing, with a justification and an expiry (issue 10 item 4).

``scapforge_waivers`` is a list of ``{rule, reason, expires}``: ``rule`` a rule id (short or
full), ``reason`` the justification a reviewer reads, ``expires`` the last day (a
``YYYY-MM-DD`` date, UTC) the waiver holds. An active waiver makes the rule ``skipped`` with
reason ``waived`` (never attempted); an expired one is reported in the host report's
``expired_waivers`` and the rule is worked as if it had none. A waiver expires at the end of
its ``expires`` day: on that day it still holds.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError

#: the keys of one waiver entry, all required.
KEYS = ("rule", "reason", "expires")


class WaiverError(ScapforgeError, ValueError):
    """A waiver entry that cannot be used; the message names the entry (its index and rule)."""

    kind = "waiver"


@dataclasses.dataclass(frozen=True)
class Waiver:
    """One waiver: ``rule`` as given (short or full id), ``reason`` (non-empty text),
    ``expires`` (the last day it holds)."""

    rule: str
    reason: str
    expires: datetime.date

    def active(self, today: datetime.date) -> bool:
        """True through its ``expires`` day."""
        return today <= self.expires

    def to_dict(self) -> dict:
        """``{rule, reason, expires: "YYYY-MM-DD"}`` for reports."""
        return {"rule": self.rule, "reason": self.reason, "expires": self.expires.isoformat()}


def _date(value: t.Any) -> datetime.date | None:
    # YAML reads an unquoted 2027-01-31 as a date; a quoted one stays a string.
    if isinstance(value, datetime.datetime):
        return None
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str) and len(value.strip()) == 10:
        try:
            return datetime.date.fromisoformat(value.strip())
        except ValueError:
            return None
    return None


def parse(entries: t.Any) -> list[Waiver]:
    """Validate ``scapforge_waivers`` and return its waivers, in order.

    Each entry must be a mapping with exactly the keys ``rule`` (non-empty string),
    ``reason`` (non-empty string) and ``expires`` (a ``YYYY-MM-DD`` date); a rule may be
    waived once. Raises WaiverError naming the first bad entry (``scapforge_waivers[2]
    (rule sshd_x): expires must be a YYYY-MM-DD date, got '31/01/2027'``). Whether the rule
    exists in the content is checked by the caller, which has the catalog.
    """
    if entries is None:
        return []
    if not isinstance(entries, (list, tuple)):
        raise WaiverError("scapforge_waivers must be a list of {rule, reason, expires}, got %s"
                          % type(entries).__name__)
    waivers: list[Waiver] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = "scapforge_waivers[%d]" % index
        if not isinstance(entry, dict):
            raise WaiverError("%s must be a mapping with rule, reason and expires, got %r" % (where, entry))
        rule = entry.get("rule")
        if isinstance(rule, str) and rule.strip():
            where = "%s (rule %s)" % (where, rule.strip())
        unknown = sorted(str(k) for k in entry if k not in KEYS)
        if unknown:
            raise WaiverError("%s: unknown key(s) %s; a waiver has rule, reason and expires"
                              % (where, ", ".join(unknown)))
        if not isinstance(rule, str) or not rule.strip():
            raise WaiverError("%s: rule must be a non-empty rule id, got %r" % (where, rule))
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise WaiverError("%s: reason must be a non-empty justification, got %r" % (where, reason))
        expires = _date(entry.get("expires"))
        if expires is None:
            raise WaiverError("%s: expires must be a YYYY-MM-DD date, got %r" % (where, entry.get("expires")))
        if rule.strip() in seen:
            raise WaiverError("%s: the rule is waived twice" % where)
        seen.add(rule.strip())
        waivers.append(Waiver(rule.strip(), reason.strip(), expires))
    return waivers


def today_utc() -> datetime.date:
    """Today's date in UTC (the date waivers are judged against)."""
    return datetime.datetime.now(datetime.timezone.utc).date()


def detail(waiver: Waiver) -> str:
    """The outcome detail of a waived rule: ``waived until 2027-01-31: <reason>``."""
    return "waived until %s: %s" % (waiver.expires.isoformat(), waiver.reason)
