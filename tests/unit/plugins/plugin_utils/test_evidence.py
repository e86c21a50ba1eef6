"""The signed evidence bundle (issue 20 item 5): OpenSSH file signing with a throwaway key
(real ssh-keygen), a changed byte anywhere fails, unsigned bundles say so."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import evidence

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture()
def key(tmp_path):
    path = tmp_path / "keys" / "evidence"
    path.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(path)], check=True)
    return path


@pytest.fixture()
def run_dir(tmp_path):
    run = tmp_path / "runs" / "r1"
    (run / "hosts").mkdir(parents=True)
    (run / "arf").mkdir()
    (run / "hosts" / "lab7.json").write_text(json.dumps({"host": "lab7", "rules": {}}))
    (run / "arf" / "lab7-before.xml").write_bytes(b"<arf/>" * 1000)
    (run / "events.jsonl").write_text('{"event": "llm_call"}\n')
    (run / "ledger.json").write_text("{}")
    (run / "llm_usage.json.lock").write_text("")
    (run / "summary.json.tmp.123").write_text("half")
    return run


def _tool(*args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "verify_evidence.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_signed_bundle_verifies_and_one_changed_byte_fails(run_dir, key, tmp_path):
    written = evidence.write_bundle(str(run_dir), "r1", str(key))
    bundle = run_dir / "evidence-r1.tar.gz"
    assert written == {"path": str(bundle), "signature": str(bundle) + ".sig", "signed": True, "files": 4}
    manifest = evidence.manifest_of(str(bundle))
    assert sorted(manifest["files"]) == ["arf/lab7-before.xml", "events.jsonl", "hosts/lab7.json", "ledger.json"]
    assert manifest["signed"] is True and manifest["namespace"] == "scapforge-evidence"
    with tarfile.open(bundle) as tar:
        assert "evidence-r1/manifest.json.sig" in tar.getnames()
    pub = str(key) + ".pub"
    assert evidence.verify_bundle(str(bundle), pub) == []
    proc = _tool(bundle, "--public-key", pub)
    assert proc.returncode == 0, proc.stderr
    assert "4 files, every digest matches the manifest; signatures verified" in proc.stdout
    # the documented one-line check, OpenSSH alone
    signers = tmp_path / "allowed_signers"
    signers.write_text("scapforge-evidence %s" % Path(pub).read_text())
    with open(bundle, "rb") as data:
        assert subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", "scapforge-evidence",
                               "-n", "scapforge-evidence", "-s", str(bundle) + ".sig"], stdin=data,
                              capture_output=True, check=False).returncode == 0
    # one byte changed in the bundle file
    original = bundle.read_bytes()
    changed = bytearray(original)
    changed[len(changed) // 2] ^= 0x01
    bundle.write_bytes(bytes(changed))
    proc = _tool(bundle, "--public-key", pub)
    assert proc.returncode == 1 and "the bundle's signature" in proc.stderr and "does not verify" in proc.stderr
    # another key does not vouch for it
    bundle.write_bytes(original)
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    proc = _tool(bundle, "--public-key", str(other) + ".pub")
    assert proc.returncode == 1 and "manifest's signature does not verify" in proc.stderr


def test_a_member_changed_inside_fails_by_its_digest(run_dir, key):
    evidence.write_bundle(str(run_dir), "r1", str(key))
    bundle = run_dir / "evidence-r1.tar.gz"
    with tarfile.open(bundle) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for member, body in members:
            if member.name.endswith("hosts/lab7.json"):
                body = body.replace(b"lab7", b"lab8")  # same size, one byte changed
            tar.addfile(member, io.BytesIO(body))
    bundle.write_bytes(out.getvalue())
    failures = evidence.verify_bundle(str(bundle), None)  # digests alone catch it
    assert len(failures) == 1 and failures[0].startswith("hosts/lab7.json: sha256 ")
    proc = _tool(bundle, "--public-key", str(key) + ".pub")
    assert proc.returncode == 1 and "hosts/lab7.json: sha256" in proc.stderr


def test_without_a_key_the_bundle_is_unsigned_and_says_so(run_dir, key):
    (run_dir / "evidence-r1.tar.gz.sig").write_text("stale")
    written = evidence.write_bundle(str(run_dir), "r1", None)
    bundle = run_dir / "evidence-r1.tar.gz"
    assert written["signed"] is False and written["signature"] is None
    assert not (run_dir / "evidence-r1.tar.gz.sig").exists()
    manifest = evidence.manifest_of(str(bundle))
    assert manifest["signed"] is False and "no scapforge_evidence_key" in manifest["unsigned"]
    proc = _tool(bundle)
    assert proc.returncode == 0 and "signature NOT checked" in proc.stdout and "unsigned" in proc.stdout
    proc = _tool(bundle, "--public-key", str(key) + ".pub")
    assert proc.returncode == 1 and "no signature" in proc.stderr and "the manifest is unsigned" in proc.stderr


def test_a_key_that_cannot_sign_leaves_no_bundle(run_dir, tmp_path):
    bad = tmp_path / "not-a-key"
    bad.write_text("nonsense")
    with pytest.raises(evidence.EvidenceError, match="ssh-keygen -Y sign"):
        evidence.write_bundle(str(run_dir), "r1", str(bad))
    with pytest.raises(evidence.EvidenceError, match="is not a file"):
        evidence.write_bundle(str(run_dir), "r1", str(tmp_path / "missing"))
    assert not (run_dir / "evidence-r1.tar.gz").exists()
