#!/usr/bin/env python3
"""Prints each crate's module graph: which file imports which, read from the code.

Uses the same import graph as scripts/module_cycles.py (files under `src/`, edges from
`crate::`, `super::`, `self::` and child-module paths; `lib.rs` and test modules left out) for
every crate under crates/ and for integrations/datafusion. docs/architecture.md holds the
output between `<!-- module-map:begin -->` and `<!-- module-map:end -->`.

    python3 scripts/module_map.py            # print the map
    python3 scripts/module_map.py --check    # exit 1 if docs/architecture.md differs (CI)
    python3 scripts/module_map.py --write    # rewrite the map in docs/architecture.md
"""

import difflib
import sys
from pathlib import Path

from module_cycles import crate_graph

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- module-map:begin -->", "<!-- module-map:end -->"


def crate_dirs():
    crates = sorted(p for p in (ROOT / "crates").iterdir() if (p / "src").is_dir())
    return crates + [ROOT / "integrations" / "datafusion"]


def module_map() -> str:
    out = []
    for crate in crate_dirs():
        src = crate / "src"
        files, edges = crate_graph(src)
        rel = lambda m: str(files[m].relative_to(src))  # noqa: E731
        out.append(f"{crate.relative_to(ROOT)}/src")
        for mod in sorted((m for m in files if m != ()), key=rel):
            targets = sorted(rel(t) for t in edges[mod])
            out.append(f"  {rel(mod)}" + (f" -> {', '.join(targets)}" if targets else ""))
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def with_map(doc: str, body: str) -> str:
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{DOC.relative_to(ROOT)}: markers {BEGIN} ... {END} not found")
    return f"{head}{BEGIN}\n```text\n{body}```\n{END}{tail}"


def main() -> int:
    body = module_map()
    if "--check" in sys.argv[1:] or "--write" in sys.argv[1:]:
        doc = DOC.read_text()
        new = with_map(doc, body)
        if "--write" in sys.argv[1:]:
            DOC.write_text(new)
            return 0
        if new != doc:
            print(
                "docs/architecture.md's module map differs from the code; "
                "regenerate it with `python3 scripts/module_map.py --write`"
            )
            diff = difflib.unified_diff(
                doc.splitlines(), new.splitlines(), "docs/architecture.md", "the code", lineterm="", n=0
            )
            print("\n".join(diff))
            return 1
        print("module map in docs/architecture.md matches the code")
        return 0
    sys.stdout.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
