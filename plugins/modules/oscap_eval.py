#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: scapforge.remediation contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: oscap_eval
short_description: Evaluate an XCCDF profile or some of its rules with OpenSCAP and return per-rule results
version_added: "0.1.0"
description:
  - Runs C(oscap xccdf eval) on the target for a profile of a SCAP source datastream, the
    whole profile or only the rules given (all in one oscap call, one C(--rule) per rule),
    and returns the result of every rule read from the XCCDF TestResult oscap writes (or,
    with O(results_source=progress), from the lines oscap prints with C(--progress)).
  - "The result of a rule is never inferred from oscap's exit code (0 all pass, 2 some did not
    pass, 1 scanner error): it is read from the rule-result elements of the results file, with
    the nine XCCDF results kept apart (V(error) is not V(fail))."
  - Requested rules that got no rule-result, or only V(notselected), are listed in RV(missing);
    a missing result is never a pass.
  - oscap writes its results into a private temporary directory that is removed afterwards;
    O(results_path) and O(arf_path) keep copies.
  - On failure the module returns RV(error_kind), one value of a closed list, with a message
    naming the file, profile or rule at fault.
author:
  - scapforge maintainers (@scapforge)
requirements:
  - C(oscap) (OpenSCAP 1.3 or later; package openscap-scanner on Debian and RHEL) on the target.
  - Python 3.9 or later on the target (standard library only).
options:
  datastream:
    description:
      - Path on the target of the SCAP source datastream, for example
        C(/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml).
    type: path
    required: true
  profile:
    description:
      - XCCDF profile id. A short SCAP Security Guide id such as C(anssi_bp28_high) is expanded
        to C(xccdf_org.ssgproject.content_profile_anssi_bp28_high); an id starting with
        C(xccdf_) (SSG or a tailoring file's own profile) is used as given.
    type: str
    required: true
  tailoring_file:
    description:
      - Path on the target of an XCCDF tailoring file passed with C(--tailoring-file).
    type: path
  tailoring_content:
    description:
      - XML text of an XCCDF tailoring file. The module writes it into its private temporary
        directory and passes that file to oscap (no separate copy task needed).
    type: str
  skip_validation:
    description:
      - Pass C(--skip-validation) - oscap does not validate the datastream (and tailoring) against
        the SCAP schemas first. Saves 0.3 to 0.8 s per call on the lab (ssg-debian12-ds.xml).
      - The loop validates in its first scan of a host and skips it in the later ones of the
        same run, on the same file.
    type: bool
    default: false
  results_source:
    description:
      - Where the rule results are read from.
      - V(results_file) - the XCCDF results document oscap writes with C(--results). For a
        datastream oscap writes the whole Benchmark with the TestResult, about 6.6 MB for the
        SSG Debian 12 content even when one rule is evaluated.
      - V(progress) - the C($rule_id:$result) lines oscap prints with C(--progress) (oscap(8));
        no results document is written or parsed, about 0.3 s less per call on the lab. Meant
        for re-checking a few rules. RV(content_version), RV(benchmark_id), RV(start_time),
        RV(end_time) and RV(score) are then not returned. Cannot be combined with
        O(results_path), O(arf_path) or O(evidence), which need the results document.
    type: str
    choices: [results_file, progress]
    default: results_file
  rules:
    description:
      - Rule ids to evaluate, full (C(xccdf_org.ssgproject.content_rule_X)) or short (C(X)).
        All are passed in one oscap call. Empty means the whole profile.
      - oscap 1.3.7 evaluates any rule of the benchmark named here, even one the profile does
        not select (with the profile's XCCDF Values); a rule that is not in the benchmark
        fails the scan with RV(error_kind=unknown_rule).
      - Name the rules a rule C(<requires>) too (for example C(sshd_set_idle_timeout) with
        C(sshd_set_keepalive)); oscap otherwise warns "requires rule ... hasn't been
        specified", and the warning is returned in RV(scanner_warnings).
    type: list
    elements: str
    default: []
  results_path:
    description:
      - Path on the target where a copy of the XCCDF results file is kept. Its directory must
        exist; otherwise the module fails with RV(error_kind=results_unwritable) naming the path.
      - Written in check mode too (it is the scan's own output; the host is not changed).
    type: path
  arf_path:
    description:
      - Path on the target where an ARF (Asset Reporting Format) results file is kept
        (C(--results-arf)). Same rules as O(results_path).
      - A path ending in C(.gz) is written gzip-compressed (a whole profile's ARF is MBs of
        XML that compresses about 15 to 1; the controller fetches the smaller file).
    type: path
  timeout:
    description:
      - Seconds oscap may run. Past it, oscap and its children are killed and the module fails
        with RV(error_kind=timeout).
      - The remediation loop (scapforge.remediation.ralph) sets it from the host's own baseline
        scan, ten times its RV(elapsed) and never under 120, and runs a scan that timed out or
        crashed once more (the ralph option C(scan_timeout) overrides it).
    type: int
    default: 900
  oscap_path:
    description:
      - Path of the oscap executable (or of a wrapper that runs it). Default is C(oscap) found
        on E(PATH).
    type: path
  evidence:
    description:
      - Also return the OVAL evidence of every rule whose result is V(fail), in RV(evidence) -
        the OVAL definition, the tests that made it fail, what each test looked for (object,
        state, variables) and what it found on the host (collected items).
      - oscap then runs with C(--oval-results) and writes the OVAL results files into the
        module's private temporary directory (removed afterwards, like the XCCDF results).
      - With O(rules), the evidence covers the requested rules that failed; for a whole
        profile, the first 50 failing rules (document order). Caps per rule - 8 tests, 5
        items per test, 300 characters per value - and about 100 KB for the whole
        RV(evidence); RV(evidence_truncated) says when a cap cut something.
      - A missing or malformed OVAL results file never fails the scan - the rule's entry
        then carries an C(error) (or RV(evidence_error) is set), and the results stay valid.
    type: bool
    default: false
notes:
  - A scan changes nothing on the host, so check mode runs it as usual (O(results_path) and
    O(arf_path) are still written).
  - oscap's messages are read with C(LC_ALL=C).
  - oscap 1.3.7 creates C(/tmp/oscap.XXXXXX) and leaves it behind when it is killed; after a
    crash or timeout the module removes such directories that appeared during its run, are
    empty and belong to its user.
  - "RV(error_kind) values: V(oscap_missing) (no oscap executable), V(datastream_missing),
    V(datastream_invalid) (not XML, truncated, not a SCAP document), V(unknown_profile),
    V(unknown_rule) (not in the datastream's benchmark),
    V(results_unwritable) (O(results_path)/O(arf_path) directory missing or not writable),
    V(scanner_crashed) (oscap killed by a signal such as SIGSEGV or SIGABRT, exit 139/134),
    V(oom_killed) (killed by SIGKILL, exit 137: out of memory most likely), V(timeout),
    V(oscap_error) (any other scanner error, for example an unreadable tailoring file)."
  - "Environment limits show as V(error) results, not V(fail): in a plain chroot without a
    running systemd, service_*_enabled rules of the SSG Debian 12 content return V(error)."
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - scapforge.remediation.attributes
seealso:
  - name: OpenSCAP user manual
    description: How C(oscap xccdf eval) selects profiles and rules.
    link: https://static.open-scap.org/openscap-1.3/oscap_user_manual.html
"""

EXAMPLES = r"""
- name: Baseline scan of a whole profile, keeping the XCCDF results
  scapforge.remediation.oscap_eval:
    datastream: /usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml
    profile: anssi_bp28_high
    results_path: /var/tmp/scapforge-baseline.xml
  register: baseline

- name: Verify three rules in one oscap call (a rule together with the rule it requires)
  scapforge.remediation.oscap_eval:
    datastream: /usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml
    profile: xccdf_org.ssgproject.content_profile_anssi_bp28_high
    rules:
      - sshd_set_idle_timeout
      - sshd_set_keepalive
      - accounts_umask_etc_login_defs
  register: verify

- name: Re-check two rules, reading oscap's --progress lines instead of a results document
  scapforge.remediation.oscap_eval:
    datastream: /usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml
    profile: anssi_bp28_high
    rules: [sysctl_kernel_dmesg_restrict, package_aide_installed]
    skip_validation: true
    results_source: progress
  register: recheck

- name: Fail loudly when a requested rule was not evaluated
  ansible.builtin.assert:
    that: verify.missing | length == 0

- name: Verify a rule and return what its OVAL check looked for and found when it fails
  scapforge.remediation.oscap_eval:
    datastream: /usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml
    profile: anssi_bp28_high
    rules: [accounts_umask_etc_login_defs]
    evidence: true
  register: verify

- name: Evaluate a rule the profile does not select, through a tailoring file given inline
  scapforge.remediation.oscap_eval:
    datastream: /usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml
    profile: xccdf_scapforge_profile_extra
    tailoring_content: "{{ lookup('ansible.builtin.file', 'tailoring.xml') }}"
    rules: [sudo_remove_nopasswd]
"""

RETURN = r"""
rules:
  description:
    - Result of every evaluated rule, full rule id to one of V(pass), V(fail), V(error),
      V(unknown), V(notapplicable), V(notchecked), V(informational), V(fixed).
    - V(notselected) rules are left out (with O(rules) given, oscap lists every other rule of
      the benchmark as notselected); they are counted in RV(counts).
    - Includes results oscap returned for rules that were not requested.
  returned: success
  type: dict
  sample: {"xccdf_org.ssgproject.content_rule_sshd_set_keepalive": "fail",
           "xccdf_org.ssgproject.content_rule_service_cron_enabled": "error"}
counts:
  description:
    - Number of rules per result, all nine results present (V(notselected) included).
    - With O(results_source=progress), V(notselected) is 0 (oscap prints no line for those rules).
  returned: success
  type: dict
  sample: {"pass": 109, "fail": 165, "error": 0, "unknown": 0, "notapplicable": 116,
           "notchecked": 0, "notselected": 1530, "informational": 0, "fixed": 0}
missing:
  description:
    - Requested rules (full ids) that got no rule-result or only V(notselected). Never a pass.
    - Always empty for a whole-profile scan.
  returned: success
  type: list
  elements: str
  sample: []
requested_rules:
  description: The requested rules as passed to oscap (full ids, duplicates removed).
  returned: always
  type: list
  elements: str
oscap_version:
  description: Version from the first line of C(oscap --version).
  returned: when oscap was found
  type: str
  sample: "1.3.7"
content_version:
  description: The Benchmark's C(<version>), the SCAP Security Guide release for SSG content.
  returned: success and O(results_source=results_file)
  type: str
  sample: "0.1.76"
benchmark_id:
  description: Id of the evaluated Benchmark.
  returned: success and O(results_source=results_file)
  type: str
  sample: xccdf_org.ssgproject.content_benchmark_DEBIAN-12
profile:
  description: Full profile id (as expanded and passed to oscap).
  returned: always
  type: str
  sample: xccdf_org.ssgproject.content_profile_anssi_bp28_high
start_time:
  description: TestResult start-time (ISO 8601, target clock).
  returned: success and O(results_source=results_file)
  type: str
  sample: "2026-11-30T07:09:12+00:00"
end_time:
  description: TestResult end-time (ISO 8601, target clock).
  returned: success and O(results_source=results_file)
  type: str
  sample: "2026-11-30T07:09:13+00:00"
score:
  description: Default XCCDF score of the TestResult (0 to 100), when present.
  returned: success and O(results_source=results_file)
  type: float
  sample: 38.5
elapsed:
  description: Seconds oscap ran (wall clock, measured by the module).
  returned: when oscap ran
  type: float
  sample: 11.2
oscap_rc:
  description:
    - oscap's exit status (0 all evaluated rules passed, 2 some did not, 1 scanner error;
      negative when it was killed by that signal). Never a rule result.
    - Named C(oscap_rc), not C(rc), on purpose - Ansible marks any task whose result has a
      non-zero C(rc) as failed, and exit 2 is a normal finished scan.
  returned: when oscap ran
  type: int
  sample: 2
stderr_tail:
  description: Last lines of oscap's stderr, without the remote-component notices oscap prints on every run.
  returned: when oscap ran
  type: str
scanner_warnings:
  description:
    - "oscap's own warnings (C(W: oscap:) and C(WARNING:) lines other than the per-run
      remote-component notices), for example C(W: oscap: Rule
      'xccdf_org.ssgproject.content_rule_sshd_set_idle_timeout' requires rule
      'xccdf_org.ssgproject.content_rule_sshd_set_keepalive', but it hasn't been specified
      using the '--rule' option.) They are also emitted as Ansible warnings."
  returned: when oscap ran
  type: list
  elements: str
unmet_requires:
  description: Pairs from oscap's "requires rule ... hasn't been specified" warnings.
  returned: when oscap ran
  type: list
  elements: dict
  contains:
    rule:
      description: The rule that was requested.
      type: str
    requires:
      description: The rule it requires, which was not requested.
      type: str
results_path:
  description: Where the XCCDF results were kept (only when O(results_path) was given).
  returned: success and O(results_path) given
  type: str
arf_path:
  description: Where the ARF results were kept (only when O(arf_path) was given).
  returned: success and O(arf_path) given
  type: str
error_kind:
  description:
    - Why the scan failed, one of V(oscap_missing), V(datastream_missing),
      V(datastream_invalid), V(unknown_profile), V(unknown_rule), V(results_unwritable),
      V(scanner_crashed), V(oom_killed), V(timeout), V(oscap_error).
  returned: failure
  type: str
  sample: results_unwritable
evidence:
  description:
    - Only with O(evidence=true). Full rule id to the OVAL evidence of that rule, for the
      rules whose result is V(fail) (none for other results).
    - "C(definition): the OVAL definition id (the rule-result's C(check-content-ref name));
      C(title); C(result): the definition's OVAL result (V(false) for a failed compliance
      check); C(truncated): a cap cut something of this rule; C(error): why no tests could
      be read (no OVAL results file, malformed file, a check that is not OVAL)."
    - "C(tests): the tests that made the definition fail, found by walking its criteria
      (into C(extend_definition)) along the nodes whose result is not V(true) (V(true) for
      a negated node), or the first tests of the tree when none is. Each test has C(id),
      C(comment), C(type) (for example V(textfilecontent54_test)), C(result) (the test's
      own result), C(negate), C(check), C(check_existence), C(object), C(state) (null
      without one) and C(items)."
    - "C(object): C(id), C(type), C(comment), C(fields) (entity name to value, for example
      C(filepath) and C(pattern)), C(operations) (entity name to operation, where not
      equals), C(flag) (the collected object's flag, V(complete), V(does not exist),
      V(error)...), C(set_objects) (the objects of an object defined as a set) and
      C(message) (oscap's messages). C(state): C(id), C(type), C(comment), C(fields),
      C(operations)."
    - "A field bound to an OVAL variable is a dict - C(var_ref) (the variable id), C(type),
      C(comment), C(values) (as the results file carries them, tested_variable or
      variable_value), C(xccdf_value) (the XCCDF Value the rule exports to it) and, for a
      local variable, C(from) - the objects it is computed from with their items (for
      accounts_umask_etc_login_defs, the C(/etc/login.defs) object and the line
      C(UMASK 022) it matched) - and C(from_variables) - the external or constant
      variables it is computed from (there, the profile's umask V(077))."
    - "C(items): the items the test checked (at most 5) - C(id), C(status), C(fields)
      (for example C(text) and C(subexpression) of a textfilecontent item), C(result);
      C(items_left_out) and C(tests_left_out) count what a size cap dropped (items go before tests)."
    - "C(criteria): the definition's criteria tree - C(operator), C(result) (after the node's own
      C(negate)), C(negate) and C(nodes) for a criteria node; C(test) and C(result) for a
      criterion; C(definition), C(title), C(result) and, when it did not read V(true), its own
      C(criteria) for an extend_definition."
    - "C(files): the files the tests read, by path, as they are on the host after the scan -
      C(exists) (V(false): the file is missing, so an object that does not exist is no missing
      line), C(type), C(size), C(mode), C(owner), C(group), C(content) (a text file of at
      most 4096 bytes, or a larger one's lines that are not comments or blank when they fit, with
      C(content_note); never /etc/shadow, keys and the like: C(content_omitted) says why) and
      C(names) (a directory's first entries)."
  returned: success and O(evidence=true)
  type: dict
  sample: {"xccdf_org.ssgproject.content_rule_no_direct_root_logins": {
           "definition": "oval:ssg-no_direct_root_logins:def:1",
           "title": "Direct root Logins Not Allowed", "result": "false", "truncated": false,
           "tests": [{"id": "oval:ssg-test_etc_securetty_exists:tst:1",
                      "comment": "/etc/securetty file exists", "type": "textfilecontent54_test",
                      "result": "false", "negate": false, "check": "all", "check_existence": "all_exist",
                      "object": {"id": "oval:ssg-object_etc_securetty_exists:obj:1",
                                 "type": "textfilecontent54_object", "comment": "/etc/securetty file exists",
                                 "fields": {"filepath": "/etc/securetty", "pattern": "^.*$", "instance": "1"},
                                 "operations": {"pattern": "pattern match"}, "flag": "does not exist"},
                      "state": null, "items": []}]}}
evidence_truncated:
  description: A cap cut something of RV(evidence) (tests, items, values, rules left out).
  returned: success and O(evidence=true)
  type: bool
evidence_omitted:
  description: Failing rules left out of RV(evidence) by the rule or size caps.
  returned: success and O(evidence=true) and some were left out
  type: list
  elements: str
evidence_error:
  description: Why no evidence could be read at all (for example unreadable XCCDF results); the scan results stay valid.
  returned: success and O(evidence=true) and the evidence could not be read
  type: str
cmd:
  description: The oscap command line that ran.
  returned: when oscap ran
  type: list
  elements: str
"""

import errno
import glob
import grp
import gzip
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.scapforge.remediation.plugins.module_utils.oscap_results import (
    classify_oscap_failure,
    full_profile_id,
    full_rule_ids,
    missing_rules,
    parse_oscap_version,
    parse_progress,
    parse_xccdf_results,
    scanner_warnings,
    stderr_tail,
    unmet_requires,
)
from ansible_collections.scapforge.remediation.plugins.module_utils.oval_evidence import (
    build_evidence,
    failing_checks,
    needed_files,
    secret_path,
)

#: A file the check reads is shown whole up to this size; a directory by its first names.
MAX_FILE_BYTES = 4096
MAX_DIR_NAMES = 30


class ScanFailed(Exception):
    """A scan that produced no usable result; carries the closed ``error_kind`` and extra return keys."""

    def __init__(self, error_kind, msg, **extra):
        Exception.__init__(self, msg)
        self.error_kind = error_kind
        self.msg = msg
        self.extra = extra


def _c_env(tmpdir=None):
    """The environment oscap runs in: C locale (stable messages) and, when given, TMPDIR
    set to the module's private directory (helpers oscap runs honour it; oscap 1.3.7 itself
    hard-codes /tmp/oscap.XXXXXX and leaves that empty directory behind when killed)."""
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    if tmpdir:
        env["TMPDIR"] = tmpdir
    return env


def find_oscap(module, oscap_path):
    """Path of the oscap executable, or raise ScanFailed(oscap_missing)."""
    if oscap_path:
        if os.path.isfile(oscap_path) and os.access(oscap_path, os.X_OK):
            return oscap_path
        raise ScanFailed("oscap_missing", "oscap_path %s is not an executable file." % oscap_path)
    found = module.get_bin_path("oscap", required=False)
    if not found:
        raise ScanFailed(
            "oscap_missing",
            "oscap was not found on PATH (install openscap-scanner, or set oscap_path).",
        )
    return found


def oscap_version(oscap):
    """First-line version of ``oscap --version`` ("1.3.7"), or None when it cannot be read."""
    try:
        proc = subprocess.run(
            [oscap, "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_c_env(),
            timeout=60, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_oscap_version(proc.stdout.decode("utf-8", "replace"))


def check_output_path(path, option):
    """Raise ScanFailed(results_unwritable) unless path's directory exists and is writable."""
    if not path:
        return
    directory = os.path.dirname(os.path.abspath(path)) or "/"
    if not os.path.isdir(directory):
        raise ScanFailed(
            "results_unwritable",
            "%s %s cannot be written: directory %s does not exist." % (option, path, directory),
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ScanFailed(
            "results_unwritable",
            "%s %s cannot be written: directory %s is not writable." % (option, path, directory),
        )
    if os.path.isdir(path):
        raise ScanFailed("results_unwritable", "%s %s is a directory." % (option, path))


def check_datastream(path):
    """Raise ScanFailed(datastream_missing / datastream_invalid) for paths oscap cannot read."""
    if not os.path.exists(path):
        raise ScanFailed("datastream_missing", "Datastream %s does not exist on the target." % path)
    if os.path.isdir(path):
        raise ScanFailed("datastream_invalid", "Datastream %s is a directory, not a SCAP datastream file." % path)
    if not os.access(path, os.R_OK):
        raise ScanFailed("datastream_missing", "Datastream %s is not readable." % path)


def run_oscap(cmd, workdir, timeout):
    """Run cmd in its own session; return (rc, stderr_text, elapsed_s, timed_out).

    stdout and stderr go to files in workdir (a whole-profile run prints thousands of
    lines). On timeout the whole process group is killed with SIGKILL.
    """
    out_path = os.path.join(workdir, "oscap.stdout")
    err_path = os.path.join(workdir, "oscap.stderr")
    timed_out = False
    start = time.time()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            env=_c_env(workdir),
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            rc = proc.wait()
    elapsed = round(time.time() - start, 3)
    with open(err_path, "rb") as fh:
        stderr = fh.read().decode("utf-8", "replace")
    return rc, stderr, elapsed, timed_out


OSCAP_TMP_GLOB = "/tmp/oscap.*"


def oscap_tmp_dirs():
    """The /tmp/oscap.XXXXXX directories that exist now (oscap 1.3.7 hard-codes that path)."""
    return set(glob.glob(OSCAP_TMP_GLOB))


def remove_left_behind(before):
    """After oscap was killed: remove the empty /tmp/oscap.XXXXXX directories that appeared
    during the run and belong to us. Only empty ones (rmdir), so a directory in use by
    another oscap that already holds files is never touched. Returns the removed paths."""
    removed = []
    for path in sorted(oscap_tmp_dirs() - before):
        try:
            if os.path.isdir(path) and not os.path.islink(path) and os.stat(path).st_uid == os.geteuid():
                os.rmdir(path)
                removed.append(path)
        except OSError:
            pass
    return removed


def keep_copy(src, dest, option):
    """Copy src to dest; raise ScanFailed(results_unwritable) naming dest on failure."""
    try:
        shutil.copyfile(src, dest)
    except (IOError, OSError) as exc:
        raise ScanFailed("results_unwritable", "%s %s cannot be written: %s" % (option, dest, exc))


def keep_gzip(src, dest, option):
    """Write src gzip-compressed to dest; raise ScanFailed(results_unwritable) naming dest on failure."""
    try:
        with open(src, "rb") as fin:
            with gzip.open(dest, "wb", compresslevel=6) as fout:
                shutil.copyfileobj(fin, fout)
    except (IOError, OSError) as exc:
        raise ScanFailed("results_unwritable", "%s %s cannot be written: %s" % (option, dest, exc))


def _name_of(lookup, ident):
    try:
        return lookup(ident)[0]
    except (KeyError, OverflowError):
        return str(ident)


def _active_lines(path, size):
    """A file too large to show whole: its lines that are neither comments nor blank, when they
    fit (login.defs is 12 KB of comments around 30 settings), else why not."""
    if size > 16 * MAX_FILE_BYTES:
        return {"content_omitted": "larger than %d bytes" % MAX_FILE_BYTES}
    with open(path, "rb") as fh:
        data = fh.read(16 * MAX_FILE_BYTES)
    if b"\0" in data:
        return {"content_omitted": "binary"}
    lines = [line for line in data.decode("utf-8", "replace").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    text = "\n".join(lines) + ("\n" if lines else "")
    if len(text.encode("utf-8")) > MAX_FILE_BYTES:
        return {"content_omitted": "larger than %d bytes, even without its comments" % MAX_FILE_BYTES}
    return {"content": text, "content_note": "comment and blank lines left out"}


def describe_file(path):
    """What a file an OVAL object reads is on this host now (issue 18: a check that found
    nothing must say whether the file is missing or holds no matching line): ``{"exists":
    False}``, or ``{"exists": True, "type", "size", "mode", "owner", "group", "link"?,
    "content"? | "content_omitted"?, "names"?}`` - content: the text of a regular file up to
    MAX_FILE_BYTES (never of a secret file: hashes, keys); names: a directory's first
    entries. Read-only; never raises."""
    try:
        link = os.readlink(path) if os.path.islink(path) else None
        st = os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return {"exists": False} if not os.path.islink(path) else {"exists": False, "dangling_link": True}
        return {"exists": None, "error": "%s: %s" % (type(exc).__name__, exc.strerror or exc)}
    kind = "file" if stat.S_ISREG(st.st_mode) else "directory" if stat.S_ISDIR(st.st_mode) else "other"
    out = {"exists": True, "type": kind, "size": st.st_size, "mode": "%04o" % stat.S_IMODE(st.st_mode),
           "owner": _name_of(pwd.getpwuid, st.st_uid), "group": _name_of(grp.getgrgid, st.st_gid)}
    if link is not None:
        out["link"] = link
    try:
        if kind == "directory":
            names = sorted(os.listdir(path))
            out["names"] = names[:MAX_DIR_NAMES]
            if len(names) > MAX_DIR_NAMES:
                out["names_left_out"] = len(names) - MAX_DIR_NAMES
        elif kind == "file" and secret_path(path):
            out["content_omitted"] = "may hold secrets"
        elif kind == "file" and st.st_size > MAX_FILE_BYTES:
            out.update(_active_lines(path, st.st_size))
        elif kind == "file":
            with open(path, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
            if b"\0" in data:
                out["content_omitted"] = "binary"
            else:
                out["content"] = data[:MAX_FILE_BYTES].decode("utf-8", "replace")
    except (IOError, OSError) as exc:
        out["content_omitted"] = "unreadable: %s" % (exc.strerror or exc)
    return out


def read_evidence(workdir, xccdf_bytes, requested):
    """The ``evidence*`` return keys: the OVAL evidence of the failing rules, read from the
    ``*.result.xml`` files oscap wrote into workdir (its cwd) with ``--oval-results``.

    requested: the requested full rule ids (empty: every failing rule). Never raises:
    evidence is an aid to the caller, and a scan that finished must not fail for it.
    """
    try:
        checks = failing_checks(xccdf_bytes, requested or None)
        files = {}
        for name in needed_files(checks):
            path = os.path.join(workdir, name)
            if name and os.path.isfile(path):
                with open(path, "rb") as fh:
                    files[name] = fh.read()
        built = build_evidence(checks, files, inspect=describe_file)
    except Exception as exc:  # pylint: disable=broad-except
        return {"evidence": {}, "evidence_truncated": False,
                "evidence_error": "OVAL evidence could not be read: %s: %s" % (type(exc).__name__, exc)}
    out = {"evidence": built["evidence"], "evidence_truncated": built["truncated"]}
    if built["omitted"]:
        out["evidence_omitted"] = built["omitted"]
    return out


def scan(module, params, result):
    """Run the scan described by params, filling result; raise ScanFailed on failure."""
    oscap = find_oscap(module, params["oscap_path"])
    result["oscap_version"] = oscap_version(oscap)
    datastream = params["datastream"]
    check_inputs(params)
    workdir = tempfile.mkdtemp(prefix="scapforge-oscap-")
    try:
        tailoring = write_tailoring(params, workdir)
        results_xml = os.path.join(workdir, "results.xml")
        arf_xml = os.path.join(workdir, "arf.xml")
        cmd = oscap_command(oscap, params, result["profile"], result["requested_rules"], tailoring,
                            results_xml, arf_xml)
        result["cmd"] = cmd

        tmp_before = oscap_tmp_dirs()
        rc, stderr, elapsed, timed_out = run_oscap(cmd, workdir, params["timeout"])
        if timed_out or rc < 0 or rc > 128:
            remove_left_behind(tmp_before)
        result["oscap_rc"] = rc
        result["elapsed"] = elapsed
        result["stderr_tail"] = stderr_tail(stderr)
        result["scanner_warnings"] = scanner_warnings(stderr)
        result["unmet_requires"] = [{"rule": r, "requires": q} for r, q in unmet_requires(stderr)]
        kind, msg = scan_failure(rc, stderr, params, tailoring, timed_out)
        if kind is not None:
            raise ScanFailed(kind, msg)

        if params["results_source"] == "progress":
            with open(os.path.join(workdir, "oscap.stdout"), "rb") as fh:
                record_results(result, parse_progress(fh.read()))
            return
        data, parsed = read_results(results_xml, rc)
        keep_outputs(params, results_xml, arf_xml, rc, result)
        record_results(result, parsed)
        if params["evidence"]:
            result.update(read_evidence(workdir, data, result["requested_rules"]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def check_inputs(params):
    """Raise ScanFailed for a datastream, output path or tailoring file oscap could not use."""
    check_datastream(params["datastream"])
    check_output_path(params["results_path"], "results_path")
    check_output_path(params["arf_path"], "arf_path")
    if params["tailoring_file"] and not os.path.isfile(params["tailoring_file"]):
        raise ScanFailed("oscap_error", "Tailoring file %s does not exist on the target." % params["tailoring_file"])


def write_tailoring(params, workdir):
    """The tailoring file to give oscap: ``tailoring_content`` written into workdir, else
    ``tailoring_file`` (None when there is neither)."""
    if params["tailoring_content"] is None:
        return params["tailoring_file"]
    tailoring = os.path.join(workdir, "tailoring.xml")
    with open(tailoring, "wb") as fh:
        fh.write(params["tailoring_content"].encode("utf-8"))
    return tailoring


def oscap_command(oscap, params, profile, rules, tailoring, results_xml, arf_xml):
    """The ``oscap xccdf eval`` argv for params (full profile id, full rule ids); the
    results go to stdout (``--progress``) or to results_xml, the ARF to arf_xml."""
    cmd = [oscap, "xccdf", "eval"]
    if tailoring:
        cmd += ["--tailoring-file", tailoring]
    if params["skip_validation"]:
        cmd.append("--skip-validation")
    cmd += ["--profile", profile]
    for rule in rules:
        cmd += ["--rule", rule]
    if params["results_source"] == "progress":
        cmd.append("--progress")
    else:
        cmd += ["--results", results_xml]
    if params["arf_path"]:
        cmd += ["--results-arf", arf_xml]
    if params["evidence"]:
        cmd.append("--oval-results")
    cmd.append(params["datastream"])
    return cmd


def scan_failure(rc, stderr, params, tailoring, timed_out):
    """``(error_kind, msg)`` of a run that did not finish a scan, ``(None, None)`` for one
    that did. A message about the tailoring file written from ``tailoring_content`` names
    that option, not the module's temporary path."""
    kind, msg = classify_oscap_failure(
        rc,
        stderr,
        datastream=params["datastream"],
        tailoring_file=tailoring,
        timed_out=timed_out,
        timeout=params["timeout"],
    )
    if kind is None and rc not in (0, 2):
        kind, msg = "oscap_error", "oscap failed (exit %s)." % rc
    if kind == "oscap_error" and tailoring and params["tailoring_content"] is not None:
        msg = msg.replace("Tailoring file " + tailoring, "The tailoring_content").replace(tailoring, "tailoring_content")
    return kind, msg


def read_results(results_xml, rc):
    """(bytes, parsed) of the results document oscap wrote; ScanFailed when it is missing
    or cannot be read."""
    if not os.path.isfile(results_xml):
        raise ScanFailed("oscap_error", "oscap exited %s but wrote no results file." % rc)
    with open(results_xml, "rb") as fh:
        data = fh.read()
    try:
        return data, parse_xccdf_results(data)
    except ValueError as exc:
        raise ScanFailed("oscap_error", "oscap exited %s but its results cannot be read: %s" % (rc, exc))


def keep_outputs(params, results_xml, arf_xml, rc, result):
    """Copy the results document to results_path and the ARF to arf_path (gzip for .gz)."""
    if params["results_path"]:
        keep_copy(results_xml, params["results_path"], "results_path")
        result["results_path"] = params["results_path"]
    if params["arf_path"]:
        if not os.path.isfile(arf_xml):
            raise ScanFailed("oscap_error", "oscap exited %s but wrote no ARF file." % rc)
        if params["arf_path"].endswith(".gz"):
            keep_gzip(arf_xml, params["arf_path"], "arf_path")
        else:
            keep_copy(arf_xml, params["arf_path"], "arf_path")
        result["arf_path"] = params["arf_path"]


#: what a results document tells beyond the rules (``parse_progress`` gives none of these)
DOCUMENT_KEYS = ("content_version", "benchmark_id", "start_time", "end_time", "score")


def record_results(result, parsed):
    """Fill result's rule keys, and the document's keys it has, from ``parse_xccdf_results``
    or ``parse_progress``."""
    result["rules"] = parsed["rules"]
    result["counts"] = parsed["counts"]
    result["missing"] = missing_rules(result["requested_rules"], parsed["rules"])
    for key in DOCUMENT_KEYS:
        if key in parsed:
            result[key] = parsed[key]
    if parsed.get("profile"):
        result["profile"] = parsed["profile"]
    if parsed["unexpected"]:
        result["unexpected_results"] = parsed["unexpected"]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            datastream=dict(type="path", required=True),
            profile=dict(type="str", required=True),
            tailoring_file=dict(type="path"),
            tailoring_content=dict(type="str"),
            rules=dict(type="list", elements="str", default=[]),
            results_path=dict(type="path"),
            arf_path=dict(type="path"),
            timeout=dict(type="int", default=900),
            oscap_path=dict(type="path"),
            evidence=dict(type="bool", default=False),
            skip_validation=dict(type="bool", default=False),
            results_source=dict(type="str", default="results_file", choices=["results_file", "progress"]),
        ),
        mutually_exclusive=[("tailoring_file", "tailoring_content")],
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False)
    try:
        result["profile"] = full_profile_id(params["profile"])
        result["requested_rules"] = full_rule_ids([r for r in params["rules"] if r and r.strip()])
    except ValueError as exc:
        module.fail_json(msg="Invalid argument: %s" % exc, error_kind="oscap_error", **result)
    if params["results_source"] == "progress":
        needs_file = [o for o in ("results_path", "arf_path", "evidence") if params[o]]
        if needs_file:
            module.fail_json(msg="results_source=progress writes no results document; %s need%s one: "
                             "use results_source=results_file." % (", ".join(needs_file), "s" if len(needs_file) == 1 else ""),
                             error_kind="oscap_error", **result)
    if params["timeout"] <= 0:
        module.fail_json(msg="timeout must be a positive number of seconds.", error_kind="oscap_error", **result)

    try:
        scan(module, params, result)
    except ScanFailed as exc:
        result.update(exc.extra)
        result["error_kind"] = exc.error_kind
        module.fail_json(msg=exc.msg, **result)
    for line in result.get("scanner_warnings", []):
        module.warn(line)
    if result.get("missing"):
        module.warn("No result for requested rule(s): %s" % ", ".join(result["missing"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
