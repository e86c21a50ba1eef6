# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers for the ``oscap_eval`` module: XCCDF ids, result parsing, failure classes.

Runs on targets: Python 3.9 syntax, standard library only (targets may lack lxml).
Nothing here runs a process or touches a file; the module does that.

Facts these helpers are built on (OpenSCAP 1.3.7, SSG 0.1.76, ssg-debian12-ds.xml):

* ``oscap xccdf eval`` exits 0 when every evaluated rule passed, 2 when at least one did
  not (fail, and also ``error`` results), 1 on any scanner error (unknown profile or rule,
  unreadable datastream, results file that cannot be written) and then writes no results
  file. A rule's result is read from the XCCDF TestResult, never from the exit code.
* With ``--rule``, the TestResult lists every other rule of the benchmark as
  ``notselected`` (587 entries for the Debian 12 benchmark of SSG 0.1.76).
* Messages classified here are quoted in ``classify_oscap_failure``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import re
import signal
import xml.etree.ElementTree as ET

SSG_RULE_PREFIX = "xccdf_org.ssgproject.content_rule_"
SSG_PROFILE_PREFIX = "xccdf_org.ssgproject.content_profile_"

#: The nine XCCDF 1.2 rule results, in the order reports list them.
RESULT_VALUES = (
    "pass",
    "fail",
    "error",
    "unknown",
    "notapplicable",
    "notchecked",
    "notselected",
    "informational",
    "fixed",
)

#: When one rule has several rule-result elements (multi-check), the first of these wins.
_RESULT_PRECEDENCE = (
    "fail",
    "error",
    "unknown",
    "notchecked",
    "informational",
    "fixed",
    "pass",
    "notapplicable",
    "notselected",
)

#: What each result means for the remediation loop. ``environment``: the scanner could
#: not decide on this host (e.g. service_*_enabled checks without a running systemd give
#: ``error``): report it, never treat it as a finding to fix or as a pass.
RESULT_CLASSES = {
    "pass": "compliant",
    "fixed": "compliant",
    "fail": "finding",
    "error": "environment",
    "unknown": "environment",
    "notchecked": "not_checked",
    "notapplicable": "not_applicable",
    "notselected": "not_evaluated",
    "informational": "informational",
}


def result_class(result):
    """Class of an XCCDF result (see ``RESULT_CLASSES``): ``"error"`` -> ``"environment"``.

    Raises ValueError for a string that is not one of the nine XCCDF results.
    """
    try:
        return RESULT_CLASSES[result]
    except KeyError:
        raise ValueError("not an XCCDF rule result: %r" % (result,))


#: The closed list of ``error_kind`` values ``classify_oscap_failure`` and the module return.
ERROR_KINDS = (
    "oscap_missing",
    "datastream_missing",
    "datastream_invalid",
    "unknown_profile",
    "unknown_rule",
    "results_unwritable",
    "scanner_crashed",
    "oom_killed",
    "timeout",
    "oscap_error",
)

# Lines oscap prints on every run of an SSG Debian datastream (the Debian security OVAL
# component is remote and never fetched): noise, not warnings for the user.
_NOISE_PATTERNS = (
    re.compile(r"^WARNING: Datastream component '.*' points out to the remote '.*'"),
    re.compile(r"^WARNING: Skipping '?.*'? file which is referenced from (datastream|XCCDF content)"),
    # The rpm probes of a whole-profile scan on Debian (no rpm configuration there).
    re.compile(r"^(E: oscap: +RPM: |error: )Unable to open /usr/lib/rpm/rpmrc for reading"),
)

_REQUIRES_RE = re.compile(
    r"Rule '(?P<rule>[^']+)' requires rule '(?P<required>[^']+)', but it hasn't been specified"
)
_UNKNOWN_RULE_RE = re.compile(r"Rule '(?P<rule>[^']+)' not found in selected profile")
_UNKNOWN_PROFILE_RE = re.compile(r'No profile matching suffix "(?P<profile>[^"]*)" was found')
_UNABLE_TO_OPEN_RE = re.compile(r"Unable to open file: '(?P<path>[^']*)'")
_UNABLE_TO_PARSE_RE = re.compile(r"Unable to parse XML at: '(?P<path>[^']*)'")
_UNKNOWN_DOCTYPE_RE = re.compile(r"Unknown document type: '(?P<path>[^']*)'")
_OUTPUT_FILE_RE = re.compile(r"Could not open output file '(?P<path>[^']*)': (?P<why>[^\[]*)")
_SAVE_FILE_RE = re.compile(r"Could not save file: (?P<path>\S+)")
_OPENSCAP_ERROR_RE = re.compile(r"^OpenSCAP Error: (?P<msg>.*?)(?: \[[^\]]*\])?$")


# --------------------------------------------------------------------------- ids


def full_rule_id(rule_id):
    """Return the full XCCDF id of an SSG rule.

    ``"sshd_set_keepalive"`` -> ``"xccdf_org.ssgproject.content_rule_sshd_set_keepalive"``;
    an id that already starts with ``xccdf_`` is returned unchanged (stripped of blanks).
    Raises ValueError for an empty id.
    """
    rule_id = (rule_id or "").strip()
    if not rule_id:
        raise ValueError("empty rule id")
    if rule_id.startswith("xccdf_"):
        return rule_id
    return SSG_RULE_PREFIX + rule_id


def full_profile_id(profile_id):
    """Return the full XCCDF id of a profile (short SSG ids get the SSG profile prefix).

    ``"anssi_bp28_high"`` -> ``"xccdf_org.ssgproject.content_profile_anssi_bp28_high"``;
    ids starting with ``xccdf_`` (SSG or a tailoring file's own) are returned unchanged.
    Raises ValueError for an empty id.
    """
    profile_id = (profile_id or "").strip()
    if not profile_id:
        raise ValueError("empty profile id")
    if profile_id.startswith("xccdf_"):
        return profile_id
    return SSG_PROFILE_PREFIX + profile_id


def short_id(xccdf_id):
    """Return an SSG id without its ``xccdf_org.ssgproject.content_<type>_`` prefix.

    ``"xccdf_org.ssgproject.content_rule_sshd_set_keepalive"`` -> ``"sshd_set_keepalive"``.
    Ids from other publishers are returned unchanged.
    """
    m = re.match(r"^xccdf_org\.ssgproject\.content_(?:rule|profile|value|group|benchmark)_(.+)$", xccdf_id or "")
    return m.group(1) if m else xccdf_id


def full_rule_ids(rule_ids):
    """Expand a list of rule ids (full or short) to full ids, dropping duplicates, keeping order."""
    seen = set()
    out = []
    for rule_id in rule_ids or []:
        full = full_rule_id(rule_id)
        if full not in seen:
            seen.add(full)
            out.append(full)
    return out


# --------------------------------------------------------------------------- parsing


def _local(tag):
    """Element tag without its namespace: ``{ns}rule-result`` -> ``rule-result``."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _text(elem):
    return (elem.text or "").strip() if elem is not None else ""


def _worse(a, b):
    """Of two results of one rule, the one that wins (see ``_RESULT_PRECEDENCE``)."""
    if a is None:
        return b
    rank = {r: i for i, r in enumerate(_RESULT_PRECEDENCE)}
    return a if rank.get(a, len(rank)) <= rank.get(b, len(rank)) else b


def parse_xccdf_results(xml_bytes, include_notselected=False):
    """Read the per-rule results of an XCCDF results document written by ``oscap --results``.

    xml_bytes: the whole document (bytes or str): an XCCDF 1.1/1.2 ``Benchmark`` holding a
    ``TestResult`` (what oscap writes for a datastream), or a bare ``TestResult``.
    include_notselected: keep ``notselected`` rules in ``rules`` (they are always counted).

    Returns a dict::

        {
          "benchmark_id": "xccdf_org.ssgproject.content_benchmark_DEBIAN-12" or None,
          "content_version": "0.1.76" or None,     # the Benchmark's <version>
          "profile": "xccdf_org...profile_x" or None,  # TestResult <profile idref>
          "test_result_id": str or None,
          "start_time": "2026-11-30T07:09:12+00:00" or None,
          "end_time": str or None,
          "scanner_version": "1.3.7" or None,     # from TestResult test-system
          "score": float or None,                 # urn:xccdf:scoring:default
          "rules": {full_rule_id: result},        # notselected left out unless asked
          "counts": {result: n},                  # all nine keys, notselected included
          "unexpected": {full_rule_id: value},    # result text outside the nine values
        }

    When one rule has several rule-results (multi-check) the worst one is kept
    (fail, error, unknown, notchecked, informational, fixed, pass, notapplicable,
    notselected). The last TestResult wins when there are several.

    Raises ValueError when the document is not XML or holds no TestResult.
    """
    if isinstance(xml_bytes, str):
        xml_bytes = xml_bytes.encode("utf-8")
    reader = _ResultsReader()
    try:
        for event, elem in ET.iterparse(io.BytesIO(xml_bytes), events=("start", "end")):
            if event == "start":
                reader.start(_local(elem.tag), elem)
            else:
                reader.end(_local(elem.tag), elem)
    except ET.ParseError as exc:
        raise ValueError("XCCDF results are not well-formed XML: %s" % exc)
    if not reader.found_test_result:
        raise ValueError("XCCDF results hold no TestResult element")
    info = reader.info
    info["rules"], info["counts"] = _rules_and_counts(reader.per_rule, include_notselected)
    info["unexpected"] = reader.unexpected
    return info


class _ResultsReader:
    """What one pass over an XCCDF results document has read so far (the last TestResult's
    rule results, the benchmark's and the TestResult's facts); fed by ``parse_xccdf_results``
    with each element's start and end."""

    def __init__(self):
        self.info = {
            "benchmark_id": None,
            "content_version": None,
            "profile": None,
            "test_result_id": None,
            "start_time": None,
            "end_time": None,
            "scanner_version": None,
            "score": None,
        }
        self.found_test_result = False
        self.per_rule = {}
        self.unexpected = {}
        self.depth = 0
        self.root_local = None

    def start(self, name, elem):
        self.depth += 1
        if self.depth == 1:
            self.root_local = name
            if name == "Benchmark":
                self.info["benchmark_id"] = elem.get("id")
        if name == "TestResult":
            self._start_test_result(elem)

    def _start_test_result(self, elem):
        # A new TestResult: the last one in the document wins.
        self.found_test_result = True
        self.per_rule = {}
        self.unexpected = {}
        self.info["test_result_id"] = elem.get("id")
        self.info["start_time"] = elem.get("start-time")
        self.info["end_time"] = elem.get("end-time")
        self.info["scanner_version"] = _scanner_version(elem.get("test-system"))
        if self.root_local == "TestResult" and elem.get("version"):
            self.info["content_version"] = elem.get("version")

    def end(self, name, elem):
        info, depth, root_local = self.info, self.depth, self.root_local
        if name == "version" and depth == 2 and root_local == "Benchmark":
            info["content_version"] = _text(elem)
        elif name == "benchmark" and root_local == "TestResult" and info["benchmark_id"] is None:
            info["benchmark_id"] = elem.get("id")
        elif name == "profile" and depth == 3:
            info["profile"] = elem.get("idref")
        elif name == "score" and depth == 3:
            if elem.get("system", "urn:xccdf:scoring:default") == "urn:xccdf:scoring:default":
                try:
                    info["score"] = float(_text(elem))
                except ValueError:
                    pass
        elif name == "rule-result":
            self._rule_result(elem)
            elem.clear()
        elif name in ("Group", "Rule", "Value", "Profile") and depth == 2:
            elem.clear()
        self.depth -= 1

    def _rule_result(self, elem):
        rule_id = elem.get("idref")
        value = None
        for child in elem:
            if _local(child.tag) == "result":
                value = _text(child)
                break
        if rule_id and value:
            if value in RESULT_VALUES:
                self.per_rule[rule_id] = _worse(self.per_rule.get(rule_id), value)
            else:
                self.unexpected[rule_id] = value


def _scanner_version(test_system):
    """The OpenSCAP version in a TestResult's ``test-system`` attribute
    (``cpe:/a:redhat:openscap:1.3.7`` -> ``"1.3.7"``), None when it names none."""
    m = re.search(r"openscap:([0-9][^:\s]*)", test_system or "")
    return m.group(1) if m else None


def _rules_and_counts(per_rule, include_notselected):
    """``(rules, counts)`` of ``parse_xccdf_results`` from {rule id: result}: ``rules``
    without ``notselected`` unless asked, ``counts`` of all nine results, notselected included."""
    counts = dict((value, 0) for value in RESULT_VALUES)
    rules = {}
    for rule_id, value in per_rule.items():
        counts[value] += 1
        if value != "notselected" or include_notselected:
            rules[rule_id] = value
    return rules, counts


_PROGRESS_LINE_RE = re.compile(r"^(?P<rule>xccdf_[^\s:]+):(?P<result>[a-z]+)$")


def parse_progress(stdout):
    """Read the per-rule results oscap printed with ``--progress``.

    stdout: what ``oscap xccdf eval --progress`` printed (bytes or str). oscap's manual
    (oscap(8), ``--progress``): "Switch to sparse output suitable for progress reporting.
    Format is "$rule_id:$result\\n"." Lines of any other shape are ignored, so a rule
    that printed nothing is missing, never a pass.

    Returns ``{"rules": {full_rule_id: result}, "counts": {result: n}, "unexpected":
    {full_rule_id: value}}`` like :func:`parse_xccdf_results` (notselected left out of
    ``rules``, counted). A rule printed more than once (multi-check) keeps the worst result.
    Never raises.
    """
    if isinstance(stdout, bytes):
        stdout = stdout.decode("utf-8", "replace")
    per_rule = {}
    unexpected = {}
    for line in stdout.splitlines():
        m = _PROGRESS_LINE_RE.match(line.strip())
        if not m:
            continue
        rule_id, value = m.group("rule"), m.group("result")
        if value in RESULT_VALUES:
            per_rule[rule_id] = _worse(per_rule.get(rule_id), value)
        else:
            unexpected[rule_id] = value
    rules, counts = _rules_and_counts(per_rule, False)
    return {"rules": rules, "counts": counts, "unexpected": unexpected}


def missing_rules(requested, rules):
    """Requested full rule ids that got no usable result.

    requested: full rule ids passed with ``--rule``; rules: ``{full_rule_id: result}``
    as returned by ``parse_xccdf_results`` (with or without notselected).
    A rule is missing when it has no rule-result or its result is ``notselected``:
    it was not evaluated, so it must never be read as a pass. Order follows ``requested``.
    """
    return [r for r in requested if rules.get(r) in (None, "notselected")]


# --------------------------------------------------------------------------- stderr


def is_noise(line):
    """True for stderr lines oscap prints on every SSG Debian run (remote OVAL skipped)."""
    return any(p.search(line) for p in _NOISE_PATTERNS)


def scanner_warnings(stderr):
    """Warnings worth showing from oscap's stderr, as a list of lines.

    Keeps oscap's own ``W: oscap: ...`` lines (e.g. "Rule 'X' requires rule 'Y', but it
    hasn't been specified using the '--rule' option.") and ``WARNING:`` lines other than
    the per-run remote-component notices. Duplicates are dropped, order kept.
    """
    out = []
    for line in (stderr or "").splitlines():
        line = line.strip()
        if not line or is_noise(line):
            continue
        if line.startswith("W: ") or line.startswith("WARNING:"):
            if line not in out:
                out.append(line)
    return out


def unmet_requires(stderr):
    """``[(rule, required_rule), ...]`` from oscap's "requires rule ... hasn't been specified" warnings."""
    out = []
    for m in _REQUIRES_RE.finditer(stderr or ""):
        pair = (m.group("rule"), m.group("required"))
        if pair not in out:
            out.append(pair)
    return out


def stderr_tail(stderr, max_lines=25, max_chars=4000):
    """The last lines of stderr without the per-run remote-component notices (a str)."""
    lines = [ln for ln in (stderr or "").splitlines() if ln.strip() and not is_noise(ln.strip())]
    text = "\n".join(lines[-max_lines:])
    if len(text) > max_chars:
        text = text[-max_chars:]
    return text


def _signal_of(rc):
    """The signal number that ended oscap, or None. Negative rc: killed directly
    (Python's Popen); 129..159: a shell between us and oscap reported 128 + signal."""
    if rc is None:
        return None
    if rc < 0:
        return -rc
    if 128 < rc < 160:
        return rc - 128
    return None


def _signal_name(signum):
    try:
        return signal.Signals(signum).name
    except (ValueError, AttributeError):
        return "signal %d" % signum


def classify_oscap_failure(rc, stderr, datastream=None, tailoring_file=None, timed_out=False, timeout=None):
    """Classify a failed ``oscap xccdf eval`` run.

    rc: oscap's exit status as Popen gives it (negative = killed by that signal; a shell
    wrapper reports 128 + signal). stderr: its standard error (str). datastream /
    tailoring_file: the paths passed, to tell which file a message is about.
    timed_out: True when the caller killed oscap for running past ``timeout`` seconds.

    Returns ``(error_kind, msg)``: error_kind is one of ``ERROR_KINDS``, msg one or two
    human sentences naming the path, profile or rule at fault. Returns ``(None, None)``
    when rc is 0 or 2 (a finished scan) and nothing else points at a failure.

    Real oscap 1.3.7 messages behind each class:

    * unknown_profile: ``No profile matching suffix "P" was found.``
    * unknown_rule: ``OpenSCAP Error: Rule 'R' not found in selected profile.``
    * datastream_missing: ``OpenSCAP Error: Unable to open file: 'DS'``
    * datastream_invalid: ``Unable to parse XML at: 'DS'`` (not XML, truncated, empty, a
      directory) and ``Unknown document type: 'DS'`` (XML that is no SCAP document)
    * results_unwritable: ``Could not open output file 'F': No such file or directory`` /
      ``Could not save file: F``
    * scanner_crashed: killed by a signal (134 SIGABRT, 139 SIGSEGV, ...), oom_killed:
      SIGKILL (137) that we did not send; timeout: we killed it after ``timeout`` s.
    * oscap_error: anything else with rc not 0/2 (tailoring file missing or invalid, ...).
    """
    stderr = stderr or ""
    tail = stderr_tail(stderr, max_lines=8, max_chars=1500)
    killed = _killed(rc, tail, timed_out, timeout)
    if killed is not None:
        return killed
    if rc in (0, 2):
        m = _OUTPUT_FILE_RE.search(stderr) or _SAVE_FILE_RE.search(stderr)
        if m:
            return "results_unwritable", "oscap could not write its results file %s." % m.group("path")
        return None, None
    return (_named_failure(stderr, datastream, tailoring_file)
            or _unusable_file(stderr, datastream, tailoring_file)
            or ("oscap_error", "oscap failed (exit %s): %s" % (rc, tail or "no message on stderr")))


def _killed(rc, tail, timed_out, timeout):
    """``(error_kind, msg)`` when oscap did not end by itself (our timeout, or a signal;
    SIGKILL we did not send is the OOM killer's), else None."""
    if timed_out:
        return "timeout", "oscap did not finish within %s seconds and was killed." % (
            timeout if timeout is not None else "the allowed"
        )
    signum = _signal_of(rc)
    if signum is None:
        return None
    if signum == signal.SIGKILL:
        return "oom_killed", (
            "oscap was killed (SIGKILL, exit %s): killed, out of memory most likely "
            "(the kernel OOM killer sends SIGKILL). stderr: %s" % (rc, tail or "(empty)")
        )
    return "scanner_crashed", "scanner crashed: oscap was killed by %s (exit %s). stderr: %s" % (
        _signal_name(signum),
        rc,
        tail or "(empty)",
    )


def _named_failure(stderr, datastream, tailoring_file):
    """``(error_kind, msg)`` for an oscap error naming an unknown profile or rule, or a
    results file it could not write; None when stderr has none of these."""
    m = _UNKNOWN_PROFILE_RE.search(stderr)
    if m:
        return "unknown_profile", "Profile %s is not in datastream %s%s." % (
            m.group("profile"),
            datastream or "(unknown)",
            " or tailoring file %s" % tailoring_file if tailoring_file else "",
        )
    unknown = []
    for m in _UNKNOWN_RULE_RE.finditer(stderr):
        if m.group("rule") not in unknown:
            unknown.append(m.group("rule"))
    if unknown:
        # oscap 1.3.7 says "not found in selected profile" but evaluates any rule of the
        # benchmark given with --rule, selected by the profile or not: the rule is not in
        # the benchmark at all.
        return "unknown_rule", "Rule %s is not in the datastream's benchmark (oscap: not found in selected profile)." % ", ".join(unknown)
    m = _OUTPUT_FILE_RE.search(stderr) or _SAVE_FILE_RE.search(stderr)
    if m:
        why = m.groupdict().get("why")
        return "results_unwritable", "oscap could not write its results file %s%s." % (
            m.group("path"),
            ": " + why.strip() if why else "",
        )
    return None


def _file_named(path_re, stderr, datastream, tailoring_file):
    """Which input the paths ``path_re`` finds in stderr are about: "datastream",
    "tailoring" or None (no path; an unknown path is the datastream's without a tailoring file)."""
    paths = [m.group("path") for m in path_re.finditer(stderr)]
    if datastream and datastream in paths:
        return "datastream"
    if tailoring_file and tailoring_file in paths:
        return "tailoring"
    if paths and not tailoring_file:
        return "datastream"
    return "tailoring" if paths else None


def _unusable_file(stderr, datastream, tailoring_file):
    """``(error_kind, msg)`` when oscap could not open or parse the datastream or the
    tailoring file, else None."""
    which = _file_named(_UNABLE_TO_OPEN_RE, stderr, datastream, tailoring_file)
    if which == "datastream":
        return "datastream_missing", "Datastream %s cannot be opened (missing or unreadable)." % datastream
    if which == "tailoring":
        return "oscap_error", "Tailoring file %s cannot be opened (missing or unreadable)." % tailoring_file
    which = (_file_named(_UNABLE_TO_PARSE_RE, stderr, datastream, tailoring_file)
             or _file_named(_UNKNOWN_DOCTYPE_RE, stderr, datastream, tailoring_file))
    if which == "datastream":
        return "datastream_invalid", "Datastream %s is not a valid SCAP document: %s" % (datastream, _first_error(stderr))
    if which == "tailoring":
        return "oscap_error", "Tailoring file %s is not a valid tailoring document: %s" % (tailoring_file, _first_error(stderr))
    return None


def _first_error(stderr):
    for line in stderr.splitlines():
        m = _OPENSCAP_ERROR_RE.match(line.strip())
        if m:
            return m.group("msg")
    return stderr_tail(stderr, max_lines=3, max_chars=500)


def parse_oscap_version(text):
    """``"OpenSCAP command line tool (oscap) 1.3.7\\n..."`` -> ``"1.3.7"`` (None if not found)."""
    first = (text or "").strip().splitlines()[:1]
    if not first:
        return None
    m = re.search(r"(\d+\.\d+(?:\.\d+)*)", first[0])
    return m.group(1) if m else None
