"""The run's evidence bundle: ``evidence-<run id>.tar.gz`` with a manifest of sha256 digests,
signed with OpenSSH's file signing (issue 20 item 5).

The bundle holds every file of the run directory (the host reports, ARF before and after,
the change ledger ``ledger.json``, ``events.jsonl`` with each LLM call's record, any LLM
transcripts the run kept, summary.json, report.html, junit.xml, the checklists, the OSCAL
results) under ``evidence-<run id>/``, and ``manifest.json``: {run_id, created, signed,
namespace, files: {path: {sha256, size}}}. With a key (``scapforge_evidence_key``, an OpenSSH
private key on the controller) the manifest is signed, ``ssh-keygen -Y sign -n
scapforge-evidence``, as ``manifest.json.sig`` inside the bundle, and the bundle file itself
as ``evidence-<run id>.tar.gz.sig`` beside it; without one the manifest says ``"signed":
false`` and why, and there is no ``.sig``. No signature scheme of our own: OpenSSH signs and
verifies (``ssh-keygen -Y verify`` with an allowed_signers line for the public key).

Check a bundle: ``tools/verify_evidence.py BUNDLE --public-key KEY.pub`` (the outer
signature, the manifest's signature, every member's digest, nothing missing or added), or by
hand::

    echo "scapforge-evidence $(cat KEY.pub)" > allowed_signers
    ssh-keygen -Y verify -f allowed_signers -I scapforge-evidence -n scapforge-evidence \\
        -s evidence-RUN.tar.gz.sig < evidence-RUN.tar.gz
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import typing as t

from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError

NAMESPACE = "scapforge-evidence"
PRINCIPAL = "scapforge-evidence"
MANIFEST = "manifest.json"
PREFIX = "evidence-"


class EvidenceError(ScapforgeError):
    """The bundle could not be signed or verified; the message says what failed."""

    kind = "evidence"


def bundle_name(run_id: str) -> str:
    return "%s%s.tar.gz" % (PREFIX, run_id)


def _members(run_dir: str) -> list[str]:
    """The run directory's files to bundle (relative paths, sorted): every regular file but
    earlier bundles, lock files and temporary files of an atomic write."""
    out = []
    for folder, dirs, files in os.walk(run_dir):
        dirs.sort()
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, run_dir)
            if (name.startswith(PREFIX) or name.endswith(".lock") or ".tmp." in name
                    or os.path.islink(path) or not os.path.isfile(path)):
                continue
            out.append(rel.replace(os.sep, "/"))
    return sorted(out)


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if not found:
        raise EvidenceError("ssh-keygen (OpenSSH) is not installed on the controller")
    return found


def sign(key: str, path: str) -> str:
    """Sign ``path`` with the OpenSSH private key ``key`` (namespace scapforge-evidence);
    returns the signature's path (``path.sig``). Raises EvidenceError."""
    if not os.path.isfile(key):
        raise EvidenceError("the evidence key %s is not a file" % key)
    if os.path.exists(path + ".sig"):
        os.unlink(path + ".sig")
    proc = subprocess.run([ssh_keygen(), "-Y", "sign", "-f", key, "-n", NAMESPACE, path],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0 or not os.path.isfile(path + ".sig"):
        raise EvidenceError("ssh-keygen -Y sign with %s failed: %s" % (key, " ".join(proc.stderr.split())[:300]))
    return path + ".sig"


def verify_signature(public_key: str, data: bytes, signature: bytes) -> str | None:
    """None when ``signature`` is an OpenSSH signature of ``data`` by ``public_key`` (a
    ``.pub`` file) in the scapforge-evidence namespace, else why not."""
    try:
        with open(public_key, encoding="utf-8") as handle:
            pub = handle.read().strip().splitlines()[0]
    except (OSError, IndexError) as exc:
        return "cannot read the public key %s: %s" % (public_key, exc)
    with tempfile.TemporaryDirectory(prefix="scapforge-verify-") as tmp:
        signers, sig = os.path.join(tmp, "allowed_signers"), os.path.join(tmp, "data.sig")
        with open(signers, "w", encoding="utf-8") as handle:
            handle.write('%s namespaces="%s" %s\n' % (PRINCIPAL, NAMESPACE, pub))
        with open(sig, "wb") as handle:
            handle.write(signature)
        proc = subprocess.run([ssh_keygen(), "-Y", "verify", "-f", signers, "-I", PRINCIPAL, "-n", NAMESPACE,
                               "-s", sig], input=data, capture_output=True, timeout=60, check=False)
    if proc.returncode != 0:
        return "ssh-keygen -Y verify: %s" % " ".join((proc.stderr or proc.stdout).decode(errors="replace").split())[:300]
    return None


def write_bundle(run_dir: str, run_id: str, key: str | None = None, now: str | None = None) -> dict:
    """Write ``<run_dir>/evidence-<run id>.tar.gz`` (and its ``.sig`` with ``key``); returns
    {path, signature (path or None), signed, files (count)}. Raises OSError, EvidenceError
    (a key that cannot sign: no bundle is left behind)."""
    members = _members(run_dir)
    manifest = {"run_id": run_id, "created": now or datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"), "signed": bool(key), "namespace": NAMESPACE,
                "files": {rel: {"sha256": sha256_file(os.path.join(run_dir, rel)),
                                "size": os.path.getsize(os.path.join(run_dir, rel))} for rel in members}}
    if not key:
        manifest["unsigned"] = "no scapforge_evidence_key was given: the digests show what changed, nobody vouches for them"
    path = os.path.join(run_dir, bundle_name(run_id))
    outer_sig = path + ".sig"
    root = bundle_name(run_id)[:-len(".tar.gz")]
    with tempfile.TemporaryDirectory(prefix="scapforge-evidence-") as tmp:
        manifest_path = os.path.join(tmp, MANIFEST)
        with open(manifest_path, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=True)
        inner_sig = sign(key, manifest_path) if key else None
        tmp_bundle = os.path.join(tmp, os.path.basename(path))
        with tarfile.open(tmp_bundle, "w:gz") as tar:
            tar.add(manifest_path, arcname="%s/%s" % (root, MANIFEST), recursive=False)
            if inner_sig:
                tar.add(inner_sig, arcname="%s/%s.sig" % (root, MANIFEST), recursive=False)
            for rel in members:
                tar.add(os.path.join(run_dir, rel), arcname="%s/%s" % (root, rel), recursive=False)
        signature = sign(key, tmp_bundle) if key else None
        shutil.move(tmp_bundle, path + ".tmp.%d" % os.getpid())
        os.replace(path + ".tmp.%d" % os.getpid(), path)
        if signature:
            shutil.move(signature, outer_sig)
        elif os.path.exists(outer_sig):
            os.unlink(outer_sig)  # an earlier wave's signature would not match this bundle
    return {"path": path, "signature": outer_sig if key else None, "signed": bool(key), "files": len(members)}


def verify_bundle(bundle: str, public_key: str | None = None, signature: str | None = None) -> list[str]:
    """What fails in a bundle ([] when it checks out): the outer signature (``signature``,
    default ``BUNDLE.sig``) and the manifest's signature against ``public_key``, every
    member's sha256 and size against the manifest, members missing or not in it. Without
    ``public_key`` only the digests are checked (and an unsigned bundle is not a failure)."""
    failures = []
    try:
        with open(bundle, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return ["cannot read the bundle %s: %s" % (bundle, exc)]
    if public_key:
        sig_path = signature or bundle + ".sig"
        try:
            with open(sig_path, "rb") as handle:
                why = verify_signature(public_key, data, handle.read())
            if why:
                failures.append("the bundle's signature %s does not verify: %s" % (sig_path, why))
        except OSError:
            failures.append("no signature %s: the bundle is unsigned or the .sig is missing" % sig_path)
    try:
        contents = _read_tar(data)
    except (tarfile.TarError, OSError, EOFError) as exc:
        return failures + ["the bundle is not a readable tar.gz: %s" % exc]
    root = next(iter(contents), "").split("/", 1)[0]
    raw = contents.get("%s/%s" % (root, MANIFEST))
    if raw is None:
        return failures + ["the bundle has no %s/%s" % (root, MANIFEST)]
    try:
        manifest = json.loads(raw)
        files = manifest["files"]
    except (ValueError, KeyError, TypeError) as exc:
        return failures + ["the manifest is not valid: %s" % exc]
    if public_key:
        inner = contents.get("%s/%s.sig" % (root, MANIFEST))
        if inner is None:
            failures.append("the manifest is unsigned (%s)" % manifest.get("unsigned", "no manifest.json.sig"))
        else:
            why = verify_signature(public_key, raw, inner)
            if why:
                failures.append("the manifest's signature does not verify: %s" % why)
    present = {name[len(root) + 1:]: body for name, body in contents.items()
               if name not in ("%s/%s" % (root, MANIFEST), "%s/%s.sig" % (root, MANIFEST))}
    for rel, entry in sorted(files.items()):
        body = present.get(rel)
        if body is None:
            failures.append("%s: listed in the manifest, missing from the bundle" % rel)
        elif hashlib.sha256(body).hexdigest() != entry.get("sha256") or len(body) != entry.get("size"):
            failures.append("%s: sha256 %s, the manifest says %s" % (rel, hashlib.sha256(body).hexdigest(),
                                                                     entry.get("sha256")))
    for rel in sorted(set(present) - set(files)):
        failures.append("%s: in the bundle, not in the manifest" % rel)
    return failures


def _read_tar(data: bytes) -> dict[str, bytes]:
    """{member name: bytes} of the regular files of a tar.gz (links and devices refused)."""
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar:
            if member.isdir():
                continue
            if not member.isfile():
                raise tarfile.TarError("%s is not a regular file" % member.name)
            handle = tar.extractfile(member)
            out[member.name] = handle.read() if handle else b""
    return out


def manifest_of(bundle: str) -> dict[str, t.Any]:
    """The manifest of a bundle (for readers and tests). Raises tarfile.TarError, KeyError, ValueError."""
    with open(bundle, "rb") as handle:
        contents = _read_tar(handle.read())
    name = next(n for n in contents if n.endswith("/" + MANIFEST))
    return json.loads(contents[name])
