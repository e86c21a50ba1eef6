#!/usr/bin/env python3
"""Benchmark: loading the catalog of a datastream, cold (parsed with lxml) vs from the disk cache.

Each figure comes from a fresh Python process (nothing cached in memory), in the same run:
- cold: the disk cache off (SCAPFORGE_CATALOG_CACHE=""): read, sha256, parse, index;
- cached: the disk cache warm (a pickle per sha256): read, sha256, load;
and the process's peak resident memory for each. Prints a table, writes
bench/results/catalog.json. Issue 9's targets for ssg-rhel9-ds.xml: cold <= 1.0 s, cached <= 0.2 s.

Usage (lab content built: `make lab-build`):
    .venv/bin/python bench/catalog.py [--rounds 3] [--content $SCAPFORGE_LAB_HOME/content]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASTREAMS = ("ssg-rhel9-ds.xml", "ssg-debian12-ds.xml")
PROBE = r"""
import json, resource, sys, time
sys.path.insert(0, %r)
started = time.perf_counter()
from ansible_collections.scapforge.remediation.plugins.plugin_utils.catalog import Catalog
imported = time.perf_counter()
catalog = Catalog.from_path(sys.argv[1])
done = time.perf_counter()
print(json.dumps({"seconds": done - imported, "from_disk": catalog.loaded_from_disk, "rules": len(catalog.rules),
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
""" % os.path.join(ROOT, ".collections")


def load_once(path, cache):
    env = dict(os.environ, SCAPFORGE_CATALOG_CACHE=cache)
    proc = subprocess.run([sys.executable, "-c", PROBE, path], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        raise SystemExit("loading %s failed:\n%s" % (path, proc.stderr[-2000:]))
    return json.loads(proc.stdout)


def measure(path, rounds, cache_dir):
    cold = [load_once(path, "") for _ in range(rounds)]
    load_once(path, cache_dir)  # warm the cache
    cached = [load_once(path, cache_dir) for _ in range(rounds)]
    assert not any(r["from_disk"] for r in cold) and all(r["from_disk"] for r in cached)
    return {
        "bytes": os.path.getsize(path), "rules": cold[0]["rules"],
        "cold_s": round(statistics.median(r["seconds"] for r in cold), 3),
        "cached_s": round(statistics.median(r["seconds"] for r in cached), 3),
        "cold_peak_mib": round(max(r["peak_mib"] for r in cold), 1),
        "cached_peak_mib": round(max(r["peak_mib"] for r in cached), 1),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--content", default=os.path.join(os.environ.get("SCAPFORGE_LAB_HOME", "/var/lib/scapforge-lab"),
                                                          "content"))
    args = parser.parse_args(argv)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="scapforge-catalog-bench-") as cache_dir:
        for name in DATASTREAMS:
            figures[name] = measure(os.path.join(args.content, name), args.rounds, cache_dir)
    print("| datastream | MB | rules | cold s | cached s | cold/cached | peak MiB cold | peak MiB cached |")
    print("|---|---|---|---|---|---|---|---|")
    for name, f in figures.items():
        print("| %s | %.1f | %d | %.3f | %.3f | %.1fx | %.0f | %.0f |" % (
            name, f["bytes"] / 1e6, f["rules"], f["cold_s"], f["cached_s"], f["cold_s"] / f["cached_s"],
            f["cold_peak_mib"], f["cached_peak_mib"]))
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "catalog.json"), "w") as handle:
        json.dump({"rounds": args.rounds, "datastreams": figures}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
