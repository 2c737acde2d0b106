#!/usr/bin/env python3
"""Checks the documentation's links: every relative link in README.md, docs/src/**/*.md and
bench/results/*.md must name a file that exists, and every #anchor a heading of the file it
points to (heading ids as mdBook 0.4 makes them); every chapter file must be in
docs/src/SUMMARY.md. Exits 1 with the broken links listed. Python's standard library only.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "docs" / "src"

LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text):
    """The lines outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def heading_id(text):
    """mdBook 0.4's id for a heading: its rendered text without markup, lower-cased, each
    whitespace character a '-', anything not alphanumeric, '_' or '-' dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "").replace("*", "")
    for entity in ("&lt;", "&gt;", "&amp;", "&#39;", "&quot;"):
        text = text.replace(entity, "")
    out = []
    for ch in text.strip():
        if ch.isalnum() or ch in "_-":
            out.append(ch.lower() if ch.isascii() else ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def anchors(path, cache={}):
    if path not in cache:
        ids, seen = set(), {}
        for line in prose_lines(path.read_text(encoding="utf-8")):
            m = HEADING.match(line)
            if not m:
                continue
            base = heading_id(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            ids.add(base if n == 0 else f"{base}-{n}")
        cache[path] = ids
    return cache[path]


def links(path):
    for n, line in enumerate(prose_lines(path.read_text(encoding="utf-8")), 1):
        line = re.sub(r"`[^`]*`", "", line)
        for m in LINK.finditer(line):
            yield n, m.group(1)


def check_file(path, errors):
    for n, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto: and the like
        where = f"{path.relative_to(ROOT)}: {target}"
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else (path.parent / file_part).resolve()
        if not dest.exists():
            errors.append(f"{where}: no such file")
            continue
        if not dest.resolve().is_relative_to(ROOT):
            errors.append(f"{where}: outside the repository")
            continue
        # mdbook copies only docs/src: a link out of it is dead in the built book.
        if path.resolve().is_relative_to(SRC) and not dest.resolve().is_relative_to(SRC):
            errors.append(f"{where}: leaves docs/src, so it is dead in the book; name the path as code")
            continue
        if anchor:
            if dest.suffix != ".md" or dest.is_dir():
                errors.append(f"{where}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(dest):
                errors.append(f"{where}: no heading with id #{anchor} in {dest.relative_to(ROOT)}")


def check_summary(errors):
    summary = SRC / "SUMMARY.md"
    listed = set()
    for _, target in links(summary):
        listed.add((SRC / target.partition("#")[0]).resolve())
    for md in sorted(SRC.rglob("*.md")):
        if md.name != "SUMMARY.md" and md.resolve() not in listed:
            errors.append(f"{md.relative_to(ROOT)}: not in docs/src/SUMMARY.md")


def main():
    files = [ROOT / "README.md"]
    files += sorted(SRC.rglob("*.md"))
    files += sorted((ROOT / "bench" / "results").glob("*.md"))
    errors = []
    for f in files:
        check_file(f, errors)
    check_summary(errors)
    for e in errors:
        print(e)
    if errors:
        print(f"check_docs: {len(errors)} broken", file=sys.stderr)
        return 1
    print(f"check_docs: {len(files)} files, every link and anchor resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
