#!/usr/bin/env python3
"""Check a run's evidence bundle (plugins/plugin_utils/evidence.py).

    tools/verify_evidence.py BUNDLE --public-key KEY.pub [--signature BUNDLE.sig]

Checks the bundle's OpenSSH signature (BUNDLE.sig), the signature of its manifest
(manifest.json.sig inside), and every member's sha256 and size against the manifest, with
nothing missing and nothing added. Exits 0 when all check out, 1 otherwise, naming each
failure. Without --public-key only the digests are checked (and it says the signature was not).
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.scapforge.remediation.plugins.plugin_utils import evidence  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--public-key", help="the signer's OpenSSH public key (.pub)")
    parser.add_argument("--signature", help="default: BUNDLE.sig")
    args = parser.parse_args(argv)
    try:
        failures = evidence.verify_bundle(args.bundle, args.public_key, args.signature)
    except evidence.EvidenceError as exc:
        failures = [str(exc)]
    for failure in failures:
        print("FAILED: %s" % failure, file=sys.stderr)
    if failures:
        return 1
    manifest = evidence.manifest_of(args.bundle)
    print("%s: %d files, every digest matches the manifest; %s" % (
        args.bundle, len(manifest["files"]),
        "signatures verified with %s" % args.public_key if args.public_key
        else "signature NOT checked (no --public-key)%s" % ("" if manifest.get("signed") else "; the bundle is unsigned")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
