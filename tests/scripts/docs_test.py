#!/usr/bin/python3
"""Checks that the docs stay readable as docs/TESTING.md asks of them: every doc opens with a
paragraph (what it is for and who reads it) before anything else, no paragraph is over 8 lines,
and docs/BENCHMARKS.md, the page a datanode developer reads first, stays within 250 lines.

A paragraph here is a run of text lines, or one list item with its continuation lines; tables,
code blocks and headings are not paragraphs."""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md", "client/rust/README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
ITEM = re.compile(r"^\s*([-*]|\d+\.)\s")
failures = []


def paragraphs(lines):
    """Yields (first line number, line count) of each paragraph."""
    in_code, start, count = False, 0, 0
    for number, line in enumerate(lines + [""], 1):
        fence = line.lstrip().startswith("```")
        if fence:
            in_code = not in_code
        breaks = (in_code or fence or not line.strip() or
                  line.lstrip().startswith("|") or line.startswith("#") or ITEM.match(line))
        if breaks and count:
            yield start, count
            count = 0
        if in_code or fence:
            continue
        if ITEM.match(line) or (not breaks and count == 0):
            start, count = number, 1
        elif not breaks:
            count += 1


for doc in DOCS:
    lines = open(os.path.join(ROOT, doc), encoding="utf-8").read().split("\n")
    for start, count in paragraphs(lines):
        if count > 8:
            failures.append(f"{doc}:{start}: a paragraph of {count} lines (at most 8)")
    body = [line for line in lines[1:] if line.strip()]
    if not lines[0].startswith("# "):
        failures.append(f"{doc}: no title on its first line")
    opening = body[0] if body else ""
    if opening.startswith(("|", "#", "```", "!", ">")) or ITEM.match(opening):
        failures.append(f"{doc}: opens with something other than a paragraph saying what it is for")

benchmarks = len(open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), encoding="utf-8").read().split("\n"))
if benchmarks > 250:
    failures.append(f"docs/BENCHMARKS.md: {benchmarks} lines (at most 250)")

for failure in failures:
    print(failure)
print(f"docs_test: {len(DOCS)} docs, {len(failures)} failures")
sys.exit(1 if failures else 0)
