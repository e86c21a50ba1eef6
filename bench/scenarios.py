#!/usr/bin/env python3
"""Benchmark: ComplianceAsCode's own rule test scenarios ("Automatus"), run against our loop and the SSG fix.

For each scenario of a directory in the layout of ``../shared/scenarios/debian12`` (its README and
index.json), on a freshly reset lab host:

1. install the header's packages (Debian names: audit -> auditd, crontabs/cronie -> cron, ...);
2. upload the rule's directory and ``shared/``, run the scenario as root with ``SHARED`` set;
3. scan that one rule with oscap on the host (the lab's datastream, the index's profile, the
   scenario's ``variables`` as a tailoring given to every scan and to the loop); the initial
   result must equal the scenario's kind, else the scenario is a ``setup_mismatch`` (not counted);
4. remediate: ``product`` = our main job (playbooks/remediate.yml) with no LLM endpoint, that one
   rule, a fresh empty memory store; ``ssg`` = the content's own Ansible fix for that rule,
   generated from the initial scan's ARF (made with ``--rule``: oscap 1.3.7's ``generate fix``
   has no ``--rule``) with ``--result-id``, run with ``ansible-playbook -b``;
5. scan again. For ``.pass.sh`` scenarios the host must also be unchanged: a manifest of /etc
   (path, mode, owner, sha256) and ``dpkg-query -W`` before and after the remediation.

``remediation = none`` scenarios run and are recorded as expected not to pass (not counted);
scenarios whose ``vm`` hint is set are recorded as skipped with the reason, not run;
``.notapplicable.sh`` ones are skipped unless ``--kind`` asks for them.
``--sample N`` draws from the scenarios that are not skipped, spread over families
(seeded, ``--seed``); without it every selected scenario is written, skipped ones included.

``--compare`` runs each scenario for both remediators, on two hosts in parallel (``--hosts`` in
pairs: the first of a pair runs ours, the second the SSG fix), and prints per family and in
total: fail -> pass of each side, pass scenarios left unchanged, setup mismatches, skipped, and
every scenario where one side passed and the other did not.

One JSON line per scenario and remediator in --out (default bench/results/scenarios.jsonl), then
the summary table; exit 0 when it ran, whatever the results.

Usage (as root, lab built):
    .venv/bin/python bench/scenarios.py --compare --sample 12 --seed 1 --hosts lab5,lab6
"""

import argparse
import collections
import concurrent.futures
import io
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback

import yaml
from lxml import etree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "lab"))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

DEFAULT_DIR = os.path.normpath(os.path.join(ROOT, "..", "shared", "scenarios", "debian12"))
DEFAULT_OUT = os.path.join(ROOT, "bench", "results", "scenarios.jsonl")
DS = "/usr/share/xml/scap/ssg/content/ssg-debian12-ds.xml"
RULE_PREFIX = "xccdf_org.ssgproject.content_rule_"
XCCDF = "{http://checklists.nist.gov/xccdf/1.2}"
HOST_DIR = "/var/tmp/scapforge-scenario"
KINDS = ("fail", "pass")
REMEDIATORS = ("product", "ssg")

#: upstream (Fedora/RHEL) package names in scenario headers -> Debian 12's
PACKAGE_NAMES = {"audit": "auditd", "crontabs": "cron", "cronie": "cron", "grub2-tools": "grub2-common",
                 "nfs-utils": "nfs-common"}

#: (family, pattern searched in the rule id); first match wins; then PATH_FAMILIES in the rule's upstream path
FAMILIES = (
    ("sysctl", r"^sysctl_"),
    ("permissions", r"^(file|dir|directory)_|_perms_|_ownership$|_groupownership$"),
    ("packages", r"^package_"),
    ("services", r"^(service|socket|timer)_"),
    ("audit", r"^audit(d)?_"),
    ("pam", r"(^|_)pam(_|$)|pwquality|faillock"),
    ("sshd", r"^sshd_"),
    ("logging", r"^(rsyslog|journald|logrotate)_|^ensure_logrotate"),
    ("other", r"^(grub2|mount_option|partition|kernel_config|aide|apparmor|postfix|sebool)_"),
    ("accounts", r"^accounts?_|^sudo(ers)?_|^no_(direct_)?root|^no_empty_passwords|password"),
)
PATH_FAMILIES = (
    ("pam", r"accounts-pam"),
    ("audit", r"/auditing/"),
    ("sshd", r"/ssh/"),
    ("permissions", r"permissions"),
    ("logging", r"/logging/"),
    ("accounts", r"/accounts/"),
)
FAMILY_ORDER = ("accounts", "pam", "sshd", "audit", "sysctl", "permissions", "packages", "services", "logging", "other")

#: run on the host as root: a manifest of /etc (stdlib only; the host has python3)
MANIFEST_PY = r'''
import hashlib, json, os, stat, sys
out = {}
for top, dirs, files in os.walk("/etc"):
    dirs.sort()
    for name in sorted(dirs + files):
        path = os.path.join(top, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        entry = [oct(stat.S_IMODE(st.st_mode)), st.st_uid, st.st_gid]
        if stat.S_ISLNK(st.st_mode):
            entry.append("->" + os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            try:
                with open(path, "rb") as fh:
                    entry.append(hashlib.sha256(fh.read()).hexdigest())
            except OSError as exc:
                entry.append("unreadable:%s" % exc.errno)
        else:
            entry.append("dir" if stat.S_ISDIR(st.st_mode) else "special")
        out[path] = entry
json.dump(out, sys.stdout, sort_keys=True)
'''


# ------------------------------------------------------------------ pure logic (tests/unit/test_bench_scenarios.py)

def load_index(directory):
    """index.json of a scenario directory (dict)."""
    with open(os.path.join(directory, "index.json")) as handle:
        return json.load(handle)


def family(rule, path=""):
    """The bench family of a rule: FAMILIES' first pattern found in the rule id, else PATH_FAMILIES' in its
    upstream path, else ``other``."""
    for name, pattern in FAMILIES:
        if re.search(pattern, rule):
            return name
    for name, pattern in PATH_FAMILIES:
        if re.search(pattern, path or ""):
            return name
    return "other"


def scenario_kind(filename):
    """``fail``, ``pass``, ``notapplicable`` from ``name.<kind>.sh``; None for a helper."""
    match = re.match(r"^.+\.(fail|pass|notapplicable)\.sh$", filename)
    return match.group(1) if match else None


def select_scenarios(index, rules=None, kinds=KINDS):
    """The scenarios of the index as flat dicts (rule, family, rule_path, the header's fields), sorted by
    rule and file; limited to ``rules`` (short ids) when given, and to the scenarios of ``kinds``
    plus every ``.notapplicable.sh`` (skipped later unless asked for)."""
    wanted = set(rules) if rules else None
    out = []
    for rule in sorted(index["rules"]):
        if wanted is not None and rule not in wanted:
            continue
        entry = index["rules"][rule]
        for sc in sorted(entry.get("scenarios", []), key=lambda s: s["file"]):
            kind = sc.get("kind") or scenario_kind(sc["file"])
            if kind not in kinds and kind != "notapplicable":
                continue
            out.append(dict(sc, kind=kind, rule=rule, rule_path=entry.get("path", ""),
                            family=family(rule, entry.get("path", ""))))
    return out


def skip_reason(scenario, kinds=KINDS):
    """Why a scenario is not run (str), or None: a VM hint, or a notapplicable scenario not asked for."""
    if scenario.get("vm"):
        return "needs a VM: %s" % ", ".join(scenario["vm"])
    if scenario["kind"] not in kinds:
        return "%s scenario (not asked for with --kind)" % scenario["kind"]
    return None


def expects_no_fix(scenario):
    """True when upstream expects no remediation to pass it (``remediation = none``)."""
    return "none" in (scenario.get("remediation") or [])


def sample(scenarios, count, seed):
    """``count`` scenarios drawn with ``random.Random(seed)``, spread over families: each family's list
    is shuffled, then families are taken in turn (in FAMILY_ORDER) until ``count``; result sorted by
    (rule, file). ``count`` None or at least the number given returns them all."""
    if count is None or count >= len(scenarios):
        return list(scenarios)
    rng = random.Random(seed)
    groups = collections.OrderedDict((f, []) for f in FAMILY_ORDER)
    for sc in scenarios:
        groups.setdefault(sc["family"], []).append(sc)
    for items in groups.values():
        rng.shuffle(items)
    picked = []
    while len(picked) < count:
        for items in groups.values():
            if items and len(picked) < count:
                picked.append(items.pop())
    return sorted(picked, key=lambda s: (s["rule"], s["file"]))


def debian_packages(names):
    """Header package names as Debian 12 names, order kept, duplicates dropped."""
    out = []
    for name in names:
        deb = PACKAGE_NAMES.get(name, name)
        if deb not in out:
            out.append(deb)
    return out


def parse_variables(items):
    """{Value short id: value} from a header's ``variables`` (``name=value``, spaces around ``=`` allowed)."""
    values = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError("variable %r is not name=value" % item)
        values[name.strip()] = value.strip()
    return values


def tailoring(catalog, profile, variables):
    """(xml bytes, tailored profile id): a tailoring of ``profile`` that sets the scenario's Values
    (plugin_utils.tailoring.build_tailoring: a selector as refine-value, any other string as set-value)."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.tailoring import build_tailoring
    return build_tailoring(catalog, profile, values=parse_variables(variables))


def rule_result(xml, rule):
    """(result, TestResult id) of ``rule`` (short or full id) in an ARF or XCCDF results document; result
    None when the rule has no rule-result (oscap left it out)."""
    full = rule if rule.startswith(RULE_PREFIX) else RULE_PREFIX + rule
    root = etree.fromstring(xml, etree.XMLParser(huge_tree=True, resolve_entities=False, no_network=True))
    results = list(root.iter(XCCDF + "TestResult"))
    if not results:
        return None, None
    test_result = results[-1]
    for rr in test_result.iter(XCCDF + "rule-result"):
        if rr.get("idref") == full:
            return rr.findtext(XCCDF + "result"), test_result.get("id")
    return None, test_result.get("id")


def dpkg_list(text):
    """{package: version} from ``dpkg-query -W`` output (``name<TAB>version`` lines)."""
    out = {}
    for line in text.splitlines():
        name, _tab, version = line.partition("\t")
        if name:
            out[name] = version
    return out


def manifest_diff(before, after):
    """The differences between two host manifests {"etc": {path: entry}, "packages": {name: version}}:
    sorted strings, ``+path`` added, ``-path`` removed, ``~path`` changed (mode, owner or content),
    ``+pkg:name``, ``-pkg:name``, ``~pkg:name`` for packages."""
    diffs = []
    for key, prefix in (("etc", ""), ("packages", "pkg:")):
        old, new = before.get(key, {}), after.get(key, {})
        for path in sorted(set(old) | set(new)):
            if path not in new:
                diffs.append("-" + prefix + path)
            elif path not in old:
                diffs.append("+" + prefix + path)
            elif old[path] != new[path]:
                diffs.append("~" + prefix + path)
    return diffs


def product_code(report, rule):
    """Our reason code for ``rule`` from a host report: ``remediated``, else the reason (``fix_failed``,
    ``environment:...``), else the outcome; a rule the loop did not work (no entry in ``rules``):
    ``not_worked:<its before result>`` from ``scan_results``, or ``not_in_report``."""
    report = report or {}
    rules = report.get("rules", {})
    entry = rules.get(rule) or rules.get(RULE_PREFIX + rule)
    if not entry:
        scanned = report.get("scan_results", {}).get(rule)
        return "not_worked:%s" % scanned.get("before") if scanned else "not_in_report"
    if entry.get("outcome") == "remediated":
        return "remediated"
    return entry.get("reason") or entry.get("outcome") or "unknown"


#: shadow-utils' own backups, rewritten by any useradd/userdel (our health check's probe user, for one)
ACCOUNT_BACKUPS = tuple("/etc/%s-" % n for n in ("passwd", "shadow", "group", "gshadow", "subuid", "subgid"))


def beyond_backups(diffs):
    """The differences of ``manifest_diff`` other than a change of an account file's ``-`` backup."""
    return [d for d in diffs if not (d[0] == "~" and d[1:] in ACCOUNT_BACKUPS)]


def passed(record):
    """A counted scenario's success: a fail scenario ends pass; a pass scenario ends pass, host unchanged."""
    if record["final"] != "pass":
        return False
    return record["kind"] == "fail" or record.get("host_unchanged") is True


def counted(record):
    """True when a record counts in the rates: run, initial result as expected, a fix expected, no bench error."""
    return (not record.get("skipped") and record.get("initial_ok") is True and not record.get("expects_no_fix")
            and not record.get("error"))


def _blank():
    return {"fail": 0, "fail_to_pass": 0, "pass": 0, "pass_unchanged": 0, "pass_unchanged_but_backups": 0,
            "setup_mismatch": 0,
            "expects_no_fix": 0, "errors": 0}


def summarize(records):
    """{remediator: {family|"total": figures}} plus "skipped": {family|"total": n} (each skipped scenario once).
    Figures: fail (counted fail scenarios), fail_to_pass, pass (counted pass scenarios), pass_unchanged (ended
    pass with the host unchanged), pass_unchanged_but_backups (the same, a changed account file backup
    allowed), setup_mismatch, expects_no_fix, errors."""
    out = {"skipped": collections.Counter()}
    seen_skipped = set()
    for rec in records:
        if rec.get("skipped"):
            key = (rec["rule"], rec["scenario"])
            if key not in seen_skipped:
                seen_skipped.add(key)
                out["skipped"][rec["family"]] += 1
                out["skipped"]["total"] += 1
            continue
        side = out.setdefault(rec["remediator"], {})
        for fam in (rec["family"], "total"):
            fig = side.setdefault(fam, _blank())
            if rec.get("error"):
                fig["errors"] += 1
            elif rec.get("initial_ok") is not True:
                fig["setup_mismatch"] += 1
            elif rec.get("expects_no_fix"):
                fig["expects_no_fix"] += 1
            elif rec["kind"] == "fail":
                fig["fail"] += 1
                fig["fail_to_pass"] += passed(rec)
            else:
                fig["pass"] += 1
                fig["pass_unchanged"] += passed(rec)
                fig["pass_unchanged_but_backups"] += rec["final"] == "pass" and rec.get("host_unchanged_but_backups") is True
    out["skipped"] = dict(out["skipped"])
    return out


def differences(records):
    """Scenarios counted on both sides where one passed (see ``passed``) and the other did not:
    [{"rule", "scenario", "kind", "passed": side, "product": outcome, "ssg": outcome, "product_final",
    "ssg_final", "changed": {side: manifest differences}}], sorted."""
    by_key = collections.defaultdict(dict)
    for rec in records:
        if counted(rec):
            by_key[(rec["rule"], rec["scenario"])][rec["remediator"]] = rec
    out = []
    for (rule, scenario), sides in sorted(by_key.items()):
        if set(sides) != set(REMEDIATORS) or passed(sides["product"]) == passed(sides["ssg"]):
            continue
        out.append({"rule": rule, "scenario": scenario, "kind": sides["product"]["kind"],
                    "passed": "product" if passed(sides["product"]) else "ssg",
                    "product": sides["product"]["outcome"], "ssg": sides["ssg"]["outcome"],
                    "product_final": sides["product"]["final"], "ssg_final": sides["ssg"]["final"],
                    "changed": {side: sides[side].get("changed") or [] for side in REMEDIATORS}})
    return out


def table(summary):
    """The summary as a Markdown table (str): one row per family with any record, then total."""
    sides = [s for s in REMEDIATORS if s in summary]
    families = [f for f in FAMILY_ORDER
                if any(f in summary[s] for s in sides) or f in summary["skipped"]] + ["total"]
    head = ["family"]
    for s in sides:
        head += ["%s fail->pass" % s, "%s pass unchanged (but backups)" % s, "%s setup mismatch" % s]
    head += ["no fix expected", "skipped"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fam in families:
        row = [fam]
        for s in sides:
            fig = summary[s].get(fam, _blank())
            row += ["%d/%d" % (fig["fail_to_pass"], fig["fail"]), "%d/%d (%d)" % (fig["pass_unchanged"], fig["pass"], fig["pass_unchanged_but_backups"]),
                    str(fig["setup_mismatch"])]
        row += [str(max([summary[s].get(fam, _blank())["expects_no_fix"] for s in sides] or [0])),
                str(summary["skipped"].get(fam, 0))]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def assign(scenarios, hosts, compare):
    """[(host, [(scenario, remediator)])] : scenarios spread round-robin over the hosts (compare: over
    host pairs, the first of a pair runs ``product``, the second ``ssg``)."""
    if compare:
        if len(hosts) < 2 or len(hosts) % 2:
            raise ValueError("--compare needs hosts in pairs, got %s" % ",".join(hosts))
        pairs = [hosts[i:i + 2] for i in range(0, len(hosts), 2)]
        plan = []
        for i, (ours, theirs) in enumerate(pairs):
            mine = scenarios[i::len(pairs)]
            plan += [(ours, [(sc, "product") for sc in mine]), (theirs, [(sc, "ssg") for sc in mine])]
        return plan
    return [(host, [(sc, None) for sc in scenarios[i::len(hosts)]]) for i, host in enumerate(hosts)]


# ------------------------------------------------------------------ on the lab

class HostRunner:
    """Runs scenarios one at a time on one lab host (its own Lab object and work directory)."""

    def __init__(self, name, directory, profile, catalog, workdir, args):
        import scapforge_lab
        self.lab = scapforge_lab.Lab(log=lambda *a: None)
        self.name, self.directory, self.profile, self.catalog = name, directory, profile, catalog
        self.workdir = os.path.join(workdir, name)
        self.args = args
        os.makedirs(self.workdir, exist_ok=True)

    # ---- host plumbing
    def _ssh(self, host, command, timeout=300, check=True):
        return host.ssh(command, timeout=timeout, check=check)

    def _fetch(self, host, path, timeout=120):
        return subprocess.run(host.ssh_argv("sudo cat %s" % path), capture_output=True, check=True,
                              stdin=subprocess.DEVNULL, timeout=timeout).stdout

    def _upload(self, host, rule, files):
        """Tar the rule's directory, shared/ and ``files`` ({name: bytes}) to HOST_DIR (root-owned)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(os.path.join(self.directory, rule), arcname=rule)
            tar.add(os.path.join(self.directory, "shared"), arcname="shared")
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        subprocess.run(host.ssh_argv("sudo rm -rf %s && sudo mkdir -p %s && sudo tar -xzf - -C %s --no-same-owner"
                                     % (HOST_DIR, HOST_DIR, HOST_DIR)),
                       input=buf.getvalue(), capture_output=True, check=True, timeout=120)

    def _scan(self, host, rule, profile_id, name):
        """Our own oscap scan of one rule on the host; (result, TestResult id); the ARF stays at HOST_DIR/name."""
        arf = "%s/%s" % (HOST_DIR, name)
        self._ssh(host, "sudo oscap xccdf eval --profile %s --tailoring-file %s/tailoring.xml --rule %s%s "
                        "--results-arf %s %s >/dev/null 2>&1; test -s %s"
                  % (profile_id, HOST_DIR, RULE_PREFIX, rule, arf, DS, arf), timeout=300)
        return rule_result(self._fetch(host, arf), rule)

    def _manifest(self, host):
        etc = json.loads(self._ssh(host, "sudo python3 %s/manifest.py" % HOST_DIR).stdout)
        pkgs = dpkg_list(self._ssh(host, "dpkg-query -W -f '${Package}\\t${Version}\\n'").stdout)
        return {"etc": etc, "packages": pkgs}

    def _inventory(self, host):
        return str(self.lab.write_inventory(os.path.join(self.workdir, "inventory.yml"), [host]))

    def _playbook(self, argv, log_path, strategy):
        import vs_ssg
        with open(log_path, "w") as log:
            # stdin from /dev/null: ssh marks an inherited stdin non-blocking, which Ansible refuses
            return subprocess.run(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  env=vs_ssg.strategy_env(strategy), timeout=1800).returncode

    # ---- remediators
    def _product(self, host, rule, tailoring_path, profile_id, stem):
        runs = os.path.join(self.workdir, stem, "runs")
        variables = {"scapforge_profile": profile_id, "scapforge_tailoring_src": tailoring_path,
                     "scapforge_rules": [rule], "scapforge_runs_dir": runs,
                     "scapforge_memory_path": os.path.join(self.workdir, stem, "memory"),
                     "scapforge_llm_base_url": ""}
        rc = self._playbook(["ansible-playbook", "playbooks/remediate.yml", "-i", self._inventory(host),
                             "-l", host.name, "-e", json.dumps(variables)],
                            os.path.join(self.workdir, stem, "product.log"), self.args.ours_strategy)
        report_path = os.path.join(runs, "latest", "hosts", "%s.json" % host.name)
        report = None
        if os.path.isfile(report_path):
            with open(report_path) as handle:
                report = json.load(handle)
        code = product_code(report, rule) if report else "no_report(rc=%d)" % rc
        return code, {"playbook_rc": rc}

    def _ssg(self, host, test_result_id, stem):
        fix = "%s/fix.yml" % HOST_DIR
        self._ssh(host, "sudo oscap xccdf generate fix --fix-type ansible --tailoring-file %s/tailoring.xml --result-id %s "
                        "--output %s %s/initial.xml" % (HOST_DIR, test_result_id, fix, HOST_DIR), timeout=300)
        text = self._fetch(host, fix)
        plays = yaml.safe_load(text) or []
        tasks = sum(len(p.get("tasks") or []) for p in plays)
        path = os.path.join(self.workdir, stem, "fix.yml")
        with open(path, "wb") as handle:
            handle.write(text)
        rc = self._playbook(["ansible-playbook", "-b", "-i", self._inventory(host), "-l", host.name, path],
                            os.path.join(self.workdir, stem, "ssg.log"), self.args.ssg_strategy)
        return rc, {"fix_tasks": tasks}

    # ---- one scenario
    def run(self, sc, remediator):
        rule, kind = sc["rule"], sc["kind"]
        stem = "%s--%s--%s" % (rule, sc["file"], remediator)
        os.makedirs(os.path.join(self.workdir, stem), exist_ok=True)
        rec = {"rule": rule, "scenario": sc["file"], "kind": kind, "family": sc["family"], "remediator": remediator,
               "host": self.name, "variables": sc.get("variables", []), "expects_no_fix": expects_no_fix(sc),
               "initial": None, "initial_ok": None, "outcome": None, "final": None, "host_unchanged": None}
        started = time.monotonic()
        phases = {}
        try:
            mark = time.monotonic()
            host = self.lab.reset([self.name])[0]
            phases["reset"] = time.monotonic() - mark
            mark = time.monotonic()
            packages = debian_packages(sc.get("packages", []))
            rec["packages"] = packages
            if packages:
                self._ssh(host, "sudo apt-get update -q >/dev/null && sudo env DEBIAN_FRONTEND=noninteractive "
                                "apt-get install -y -q %s >/dev/null" % " ".join(packages), timeout=900)
            xml, profile_id = tailoring(self.catalog, self.profile, sc.get("variables", []))
            tailoring_path = os.path.join(self.workdir, stem, "tailoring.xml")
            with open(tailoring_path, "wb") as handle:
                handle.write(xml)
            self._upload(host, rule, {"tailoring.xml": xml, "manifest.py": MANIFEST_PY.encode()})
            proc = self._ssh(host, "cd %s/%s && sudo env SHARED=%s/shared bash ./%s 2>&1"
                             % (HOST_DIR, rule, HOST_DIR, sc["file"]), timeout=900, check=False)
            rec["scenario_rc"] = proc.returncode
            with open(os.path.join(self.workdir, stem, "scenario.log"), "w") as handle:
                handle.write(proc.stdout + proc.stderr)
            phases["setup"] = time.monotonic() - mark
            mark = time.monotonic()
            rec["initial"], test_result_id = self._scan(host, rule, profile_id, "initial.xml")
            rec["initial_ok"] = rec["initial"] == kind
            phases["scan"] = time.monotonic() - mark
            if rec["initial_ok"]:
                before = self._manifest(host) if kind == "pass" else None
                mark = time.monotonic()
                if remediator == "product":
                    rec["outcome"], more = self._product(host, rule, tailoring_path, profile_id, stem)
                else:
                    rec["outcome"], more = self._ssg(host, test_result_id, stem)
                rec.update(more)
                phases["remediate"] = time.monotonic() - mark
                mark = time.monotonic()
                rec["final"] = self._scan(host, rule, profile_id, "final.xml")[0]
                phases["final_scan"] = time.monotonic() - mark
                if before is not None:
                    diffs = manifest_diff(before, self._manifest(host))
                    rec["host_unchanged"], rec["changed"] = not diffs, diffs
                    rec["host_unchanged_but_backups"] = not beyond_backups(diffs)
            else:
                rec["outcome"] = "setup_mismatch"
        except Exception as exc:  # noqa: BLE001 - a bench error is recorded, the run goes on
            rec["error"] = error_text(exc)
            with open(os.path.join(self.workdir, stem, "error.txt"), "w") as handle:
                handle.write(traceback.format_exc())
        rec["seconds"] = round(time.monotonic() - started, 1)
        rec["phase_seconds"] = {k: round(v, 1) for k, v in phases.items()}
        rec["workdir"] = os.path.join(self.workdir, stem)
        return rec


def error_text(exc):
    """A bench error as recorded: ``lab_access_lost`` first when SSH refused the lab's key (a scenario
    that loosens the admin's home or key files makes sshd's StrictModes refuse it)."""
    text = "%s: %s" % (type(exc).__name__, str(exc)[-1500:])
    if "Permission denied (publickey" in text:
        return "lab_access_lost: " + text
    return text


def skipped_record(sc, why):
    return {"rule": sc["rule"], "scenario": sc["file"], "kind": sc["kind"], "family": sc["family"],
            "remediator": None, "skipped": True, "why": why, "initial": None, "initial_ok": None,
            "outcome": None, "final": None, "host_unchanged": None, "seconds": 0.0}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=DEFAULT_DIR, help="scenario directory (default: %(default)s)")
    parser.add_argument("--rules", default="", help="short rule ids, comma-separated (default: all)")
    parser.add_argument("--kind", choices=KINDS, help="only .fail.sh or .pass.sh scenarios")
    parser.add_argument("--sample", type=int, help="draw N runnable scenarios, spread over families")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hosts", default="lab5,lab6", help="lab hosts, comma-separated (compare: in pairs)")
    parser.add_argument("--remediate", choices=REMEDIATORS, default="product")
    parser.add_argument("--compare", action="store_true", help="both remediators, on host pairs")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--ours-strategy", default="mitogen_linear", choices=("linear", "mitogen_linear"))
    parser.add_argument("--ssg-strategy", default="linear", choices=("linear", "mitogen_linear"))
    parser.add_argument("--keep", action="store_true", help="leave the hosts up afterwards")
    args = parser.parse_args(argv)

    import scapforge_lab
    from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog

    kinds = (args.kind,) if args.kind else KINDS
    index = load_index(args.scenarios)
    chosen = select_scenarios(index, [r for r in args.rules.split(",") if r], kinds)
    skipped = [(sc, skip_reason(sc, kinds)) for sc in chosen if skip_reason(sc, kinds)]
    runnable = sample([sc for sc in chosen if not skip_reason(sc, kinds)], args.sample, args.seed)
    hosts = [h for h in args.hosts.split(",") if h]
    plan = assign(runnable, hosts, args.compare)
    lab = scapforge_lab.Lab(log=lambda *a: None)
    catalog = Catalog.from_path(str(lab.datastream))
    profile = index["profile"]
    workdir = tempfile.mkdtemp(prefix="scapforge-scenarios-")
    print("%d scenarios selected, %d skipped, %d to run on %s; work files in %s"
          % (len(chosen), len(skipped), len(runnable), ",".join(hosts), workdir), flush=True)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    records, lock = [], threading.Lock()
    with open(args.out, "w") as out:
        def emit(rec):
            with lock:
                records.append(rec)
                out.write(json.dumps(rec, sort_keys=True) + "\n")
                out.flush()
                if not rec.get("skipped"):
                    print("%-6s %-8s %-45s %-40s initial=%s outcome=%s final=%s unchanged=%s %.0fs%s" % (
                        rec["host"], rec["remediator"], rec["rule"][:45], rec["scenario"][:40], rec["initial"],
                        rec["outcome"], rec["final"], rec["host_unchanged"], rec["seconds"],
                        " ERROR " + rec["error"][:200] if rec.get("error") else ""), flush=True)

        for sc, why in skipped if args.sample is None else []:
            emit(skipped_record(sc, why))

        def work(host, jobs):
            runner = HostRunner(host, args.scenarios, profile, catalog, workdir, args)
            for sc, remediator in jobs:
                emit(runner.run(sc, remediator or args.remediate))

        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(plan) or 1) as pool:
                for future in [pool.submit(work, host, jobs) for host, jobs in plan]:
                    future.result()
        finally:
            if not args.keep:
                for host in hosts:
                    lab.stop(host)

    summary = summarize(records)
    print(table(summary))
    if args.compare:
        diffs = differences(records)
        print("\nOne side passed, the other did not (%d):" % len(diffs))
        for d in diffs:
            changed = "; ".join("%s changed %s" % (side, " ".join(paths[:6]) + (" ..." if len(paths) > 6 else ""))
                                for side, paths in sorted(d["changed"].items()) if paths)
            print("- %s %s (%s): %s passed; product %s -> %s, ssg %s -> %s%s" % (
                d["rule"], d["scenario"], d["kind"], d["passed"], d["product"], d["product_final"], d["ssg"],
                d["ssg_final"], "; " + changed if changed else ""))
    mismatches = [r for r in records if r.get("initial_ok") is False]
    for rec in mismatches:
        print("setup mismatch: %s %s (%s): initial %s" % (rec["rule"], rec["scenario"], rec["remediator"],
                                                          rec["initial"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
