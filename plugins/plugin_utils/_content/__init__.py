"""The parts of ``catalog.Catalog``, one concern each (the catalog itself stays in catalog.py).

``errors``: CatalogError. ``xccdf``: namespaces, the safe XML parser, XHTML to plain text.
``model``: the frozen records the catalog hands out (Rule, FixSnippet, Profile, Tailoring)
and its internal Value and Item. ``ids``: full and short XCCDF ids. ``datastream``: the
datastream's Benchmark read into the catalog's tables. ``profiles``: a Profile element's
selections and values, and the XCCDF selection rule. ``tailoring_file``: a user's tailoring
file checked against the benchmark. ``values``: a Value under a profile, and the fix and
description with those values. ``disk_cache``: the pickle per sha256 and its layout key.
"""
