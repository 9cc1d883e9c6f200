#!/usr/bin/env python3
"""Checks that no two files of a crate import each other, directly or in a circle.

For every crate under crates/ (and benches/), each `.rs` file under `src/` is a node; an edge
goes from a file to every file whose items it names with `crate::a::b` or `super::` paths
(in `use` lines or inline). Names re-exported by `lib.rs` (`pub use a::Item;`) resolve to the
file that defines them, so `use crate::Item` counts as an edge to `a.rs`. `lib.rs` itself (the
crate root, which declares every module) and `mod.rs`-to-child edges are not counted. Test
modules (`#[cfg(test)] mod tests { ... }` to the end of a file) are ignored.

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


def crate_graph(src: Path):
    files = {module_of(src, f): f for f in src.rglob("*.rs")}
    lib = files.get(())
    reexports = {}
    if lib:
        for m in re.finditer(r"pub use ([a-z_][a-z0-9_:]*)::\{?([^;]*)\}?;", code_of(lib.read_text())):
            path = tuple(m.group(1).split("::"))
            for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", m.group(2)):
                if path in files or path[:1] in {p[:1] for p in files}:
                    reexports[name] = path
    edges = {m: set() for m in files}
    for mod, file in files.items():
        if mod == ():
            continue
        code = code_of(file.read_text())
        targets = set()
        for m in re.finditer(r"crate::((?:[a-z_][a-z0-9_]*::)*)(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)", code):
            path = tuple(p for p in m.group(1).split("::") if p)
            names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", m.group(2))
            if path:
                targets.add(path)
            else:
                targets.update(reexports[n] for n in names if n in reexports)
                targets.update((n,) for n in names if (n,) in files)
        for m in re.finditer(r"super::([a-z_][a-z0-9_]*)", code):
            parent = mod[:-1] if file.name != "mod.rs" else mod[:-1]
            targets.add(parent + (m.group(1),))
        for t in targets:
            # the longest prefix that is a file
            while t and t not in files:
                t = t[:-1]
            if t and t != mod and not (mod and t == mod[:-1] and False):
                # a parent `mod.rs` naming its own child is a declaration, not a dependency
                if files[mod].name == "mod.rs" and t[: len(mod)] == mod:
                    continue
                edges[mod].add(t)
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
