#!/usr/bin/env python3
"""Checks that the gateway crate's modules depend downward only.

Each top-level module of gateway/src has a layer (LAYERS, lowest first). A module may use
`crate::x` only where x's layer is below its own, or x is itself (a module's children are
part of it). Uses are found in the text: `use crate::a::...`, `use crate::{a, ...}` and `crate::a::...`
paths (a top-level module's `super::` is the crate root, and isn't used here). Test code (after `#[cfg(test)]`)
counts too: a test is no excuse for a cycle.

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
    ["sendfile"],
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

# The uses against the layering that remain, each with why; any other fails the check.
# The services still build their responses in the `GateBody` union (`body`), which holds
# their body types: the union has to go above them, with each service returning its own
# body type (issue 30, items 1 and 2).
KNOWN = {
    ("static_files", "body"): "static files answer in the GateBody union",
    ("proxy", "body"): "the proxy answers in the GateBody union",
}

PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\}", re.S)


def top_module(path):
    rel = path.relative_to(SRC)
    if rel.parts[0] in ("lib.rs", "main.rs"):
        return None
    return rel.parts[0].removesuffix(".rs")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(re.sub(r"//.*", "", line) for line in text.split("\n"))


def uses(path):
    text = strip_comments(path.read_text(encoding="utf-8"))
    found = []
    for n, line in enumerate(text.split("\n"), 1):
        for m in PATH.finditer(line):
            found.append((n, m.group(1)))
    for m in USE_GROUP.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        for item in re.split(r",", m.group(1)):
            name = item.strip().split("::")[0].strip("{} \n")
            if re.fullmatch(r"[a-z_][a-z0-9_]*", name or ""):
                found.append((line, name))
    return found


def main():
    graph = "--graph" in sys.argv
    errors, edges = [], set()
    unknown = set()
    for path in sorted(SRC.rglob("*.rs")):
        me = top_module(path)
        if me is None:
            continue
        if me not in RANK:
            unknown.add(me)
            continue
        for line, other in uses(path):
            if other == me or other not in RANK and other not in unknown:
                if other != me and other not in RANK:
                    unknown.add(other)
                continue
            if other == me:
                continue
            edges.add((me, other))
            if RANK[other] >= RANK[me] and (me, other) not in KNOWN:
                errors.append(
                    f"{path.relative_to(ROOT)}:{line}: {me} (layer {RANK[me]}) uses "
                    f"crate::{other} (layer {RANK[other]})"
                )
    if unknown:
        errors.append(f"modules with no layer in scripts/check_layers.py: {sorted(unknown)}")
    if graph:
        for a, b in sorted(edges):
            print(f"{a} -> {b}")
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} uses against the layering", file=sys.stderr)
        return 1
    known = sorted(KNOWN.keys() & edges)
    print(f"check_layers: {len(edges)} module dependencies, all downward but the known {known}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
