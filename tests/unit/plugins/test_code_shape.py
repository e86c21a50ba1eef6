"""The shape issue 16 gave the plugins, kept: no class over 400 lines and no function over 80
under plugins/ (the anchors' modules read a screen or two at a time)."""

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"
LIMITS = {ast.ClassDef: 400, ast.FunctionDef: 80, ast.AsyncFunctionDef: 80}


def _sizes():
    for path in sorted(PLUGINS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if type(node) in LIMITS:
                yield "%s:%s" % (path.relative_to(PLUGINS), node.name), node.end_lineno - node.lineno + 1, LIMITS[type(node)]


def test_no_class_over_400_lines_and_no_function_over_80():
    sizes = list(_sizes())
    assert len(sizes) > 1000                         # the walk reads the whole tree
    assert [(name, lines) for name, lines, limit in sizes if lines > limit] == []
