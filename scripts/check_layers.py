#!/usr/bin/env python3
"""Checks that the gateway crate's modules depend downward only.

Each top-level module of gateway/src has a layer (LAYERS, lowest first). A module may use
`crate::x` only where x's layer is below its own, or x is itself (a module's children are
part of it). Uses are read from the text, with comments and string literals taken out:
every `crate::` path (in `use` trees, nested groups included, and in code), and the
crate root's re-exports (`crate::GatewayRouter` is `router`'s). Test code counts too: a
test is no excuse for a cycle. A name the table doesn't know is an error, so a new module
must be given its place.

Prints each upward or sideways use with file and line, and exits 1 if there is any;
`--graph` prints the edges found.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "gateway" / "src"

# Lowest first. Modules on one line are one layer: they may not use each other.
LAYERS = [
    ["rt", "http_util"],
    # static_files is gatehouse-layers' module, re-exported at the crate root.
    ["static_files", "proxy"],
    ["body"],
    ["router"],
    ["tls"],
    ["metrics"],
    ["admin"],
    ["server"],
    ["fuzzing"],
]
RANK = {m: i for i, layer in enumerate(LAYERS) for m in layer}

# What lib.rs re-exports at the crate root, by the module that defines it.
ROOT_ITEMS = {"GatewayRouter": "router", "Handle": "server", "start": "server"}

# The uses against the layering that remain, each with why; any other fails the check.
KNOWN = {}

STRING = re.compile(r'r#+"(?:.|\n)*?"#+|r"[^"]*"|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'')
COMMENT = re.compile(r"/\*(?:.|\n)*?\*/|//[^\n]*")


def blank(m):
    """The match replaced by spaces, its line breaks kept, so that line numbers hold."""
    return re.sub(r"[^\n]", " ", m.group(0))


def clean(text):
    # Strings first (a "//" in a URL is no comment), then comments; a quote inside a
    # comment is rare enough to leave.
    return COMMENT.sub(blank, STRING.sub(blank, text))


def first_segments(tree):
    """The first path segment of each item of a `use crate::` tree's remainder:
    `a::b` gives a; `{a::{b, c}, d}` gives a and d."""
    tree = tree.strip()
    if not tree.startswith("{"):
        return [re.split(r"::|\s|;|,|\}", tree, maxsplit=1)[0]]
    out, depth, item = [], 0, ""
    for ch in tree[1:]:
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            out.append(item)
            item = ""
        else:
            item += ch
    out.append(item)
    return [s for it in out if it.strip() for s in first_segments(it)]


def uses(path):
    text = clean(path.read_text(encoding="utf-8"))
    found = []
    for m in re.finditer(r"\bcrate::", text):
        line = text.count("\n", 0, m.start()) + 1
        for name in first_segments(text[m.end():m.end() + 4000]):
            name = name.strip()
            if name in ("self", "*", ""):
                continue
            found.append((line, ROOT_ITEMS.get(name, name)))
    return found


def top_module(path):
    rel = path.relative_to(SRC)
    if rel.parts[0] in ("lib.rs", "main.rs"):
        return None
    return rel.parts[0].removesuffix(".rs")


def main():
    graph = "--graph" in sys.argv
    errors, edges = [], set()
    for path in sorted(SRC.rglob("*.rs")):
        me = top_module(path)
        if me is None:
            continue
        where = path.relative_to(ROOT)
        if me not in RANK:
            errors.append(f"{where}: module {me} has no layer in scripts/check_layers.py")
            continue
        for line, other in uses(path):
            if other == me:
                continue
            if other not in RANK:
                errors.append(f"{where}:{line}: crate::{other} is no module this script knows")
                continue
            edges.add((me, other))
            if RANK[other] >= RANK[me] and (me, other) not in KNOWN:
                errors.append(
                    f"{where}:{line}: {me} (layer {RANK[me]}) uses crate::{other} "
                    f"(layer {RANK[other]})"
                )
    if graph:
        for a, b in sorted(edges):
            print(f"{a} -> {b}")
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} uses against the layering", file=sys.stderr)
        return 1
    known = sorted(KNOWN.keys() & edges)
    but = f" but the known {known}" if known else ""
    print(f"check_layers: {len(edges)} module dependencies, all downward{but}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
