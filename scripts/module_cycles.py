#!/usr/bin/env python3
"""Checks that no two files of a crate import each other, directly or in a circle.

For every crate under crates/ (and benches/), each `.rs` file under `src/` is a node; an edge
goes from a file to every file whose items it names with `crate::a::b`, `super::` or `self::`
paths, or with paths that start at one of its own child modules (`mod child;` then
`use child::Item`), in `use` lines (re-exports included) or inline. A parent naming its
child's items is an edge like any other, so a `mod.rs` that imports (or re-exports) from a
child whose file imports the parent's own items is a circle. Names re-exported by `lib.rs` or
by any module file (`pub use a::Item;`) resolve to the file that defines them, so
`use crate::Item` counts as an edge to `a.rs`, and `super::Item` in a child to the sibling the
parent re-exports it from. `lib.rs` itself (the crate root, which declares every module) is not
a node, and the `mod child;` declarations are not edges. Test modules (`#[cfg(test)] mod tests
{ ... }` to the end of a file) are ignored.

    python3 scripts/module_cycles.py            # exit 1 and list the cycles, if any

Chosen over `cargo modules dependencies --acyclic` because it needs no install (CI runs it in
seconds) and checks files, which is what the project's rule is about.
"""

import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent


def module_of(src: Path, file: Path) -> tuple[str, ...]:
    rel = file.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main"):
        parts = parts[:-1]
    if parts and parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def code_of(text: str) -> str:
    # drop comments and the test module at the end
    text = re.sub(r"//[^\n]*", "", text)
    cut = re.search(r"#\[cfg\(test\)\]\s*mod tests", text)
    return text[: cut.start()] if cut else text


IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# a path and what it names: `a::b::Item`, `a::b::{X, y::Z}`; `(?<![\w:])` keeps to path starts
PATH = re.compile(r"(?<![\w:])((?:[a-z_][a-z0-9_]*::)+)(\{[^}]*\}|" + IDENT + ")")


def absolute(mod: tuple[str, ...], path: list[str], children: set[str]):
    """The absolute module path of `path` as written in module `mod` (None: another crate)."""
    if not path:
        return None
    head, rest = path[0], path[1:]
    if head == "crate":
        return tuple(rest)
    if head == "self":
        return mod + tuple(rest)
    if head == "super":
        up = mod[:-1]
        while rest and rest[0] == "super":
            up, rest = up[:-1], rest[1:]
        return up + tuple(rest)
    if head in children:
        return mod + tuple(path)
    return None


def crate_graph(src: Path):
    files = {module_of(src, f): f for f in src.rglob("*.rs")}
    codes = {m: code_of(f.read_text()) for m, f in files.items()}
    children = {m: set(re.findall(r"\bmod ([a-z_][a-z0-9_]*)\s*;", c)) for m, c in codes.items()}
    # per module file, the names it re-exports and the absolute path of the module they come from
    reexports = {m: {} for m in files}
    for mod, code in codes.items():
        for m in re.finditer(r"pub(?:\([a-z]+\))? use ((?:[a-z_][a-z0-9_]*::)+)\{?([^;]*?)\}?;", code):
            path = absolute(mod, m.group(1).split("::")[:-1], children[mod])
            if path is None:
                continue
            for name in re.findall(IDENT, m.group(2)):
                if name != "self":
                    reexports[mod][name] = path

    def resolve(path: tuple[str, ...], name: str, depth: int = 0):
        """The file defining `name` as named through module `path`."""
        if path + (name,) in files:
            return path + (name,)
        if path in files and name in reexports[path] and depth < 16:
            return resolve(reexports[path][name], name, depth + 1)
        while path and path not in files:
            path = path[:-1]
        return path if path in files else None

    edges = {m: set() for m in files}
    for mod, code in codes.items():
        if mod == ():
            continue
        targets = set()
        for m in PATH.finditer(code):
            path = absolute(mod, m.group(1).split("::")[:-1], children[mod])
            if path is None:
                continue
            for name in re.findall(IDENT, m.group(2)):
                if name == "self":
                    targets.add(resolve(path[:-1], path[-1]) if path else None)
                else:
                    targets.add(resolve(path, name))
        edges[mod] = {t for t in targets if t is not None and t != mod and t != ()}
    return files, edges


def cycles(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in edges:
        if v not in index:
            strong(v)
    return out


def main() -> int:
    sys.setrecursionlimit(10_000)
    crates = sorted(p for p in (ROOT / "crates").iterdir() if (p / "src").is_dir())
    crates.append(ROOT / "benches")
    bad = 0
    for crate in crates:
        files, edges = crate_graph(crate / "src")
        for comp in cycles(edges):
            bad += 1
            names = sorted(str(files[m].relative_to(ROOT)) for m in comp)
            print(f"import circle in {crate.name}: " + " <-> ".join(names))
    if bad:
        return 1
    print(f"no import circles between files ({len(crates)} crates)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
