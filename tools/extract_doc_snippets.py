#!/usr/bin/env python3
"""Every C++ block of the guides compiles: this extracts them into translation units.

Usage: extract_doc_snippets.py OUT_DIR FILE.md...     write OUT_DIR/*.cpp (cleared first)
       extract_doc_snippets.py --check [--max-lines N PAGE] FILE.md...
                                                      check the markers (and that PAGE has at
                                                      most N lines), print the count

Each ```cpp block of each file becomes code that CMake compiles (the target
ember_doc_snippets, built by `make test`; tests/CMakeLists.txt):
  - a block with `int main(` is a whole program: its own .cpp, as written;
  - any other block is a fragment: the body of a function in its own namespace, in
    one .cpp per guide, after the umbrella headers and `using namespace ember;`.
HTML comments just before a block (invisible on the rendered page) say what a
fragment assumes:
  <!-- snippet-prelude: CODE -->    statements run before the block (its variables)
  <!-- snippet-toplevel: CODE -->   declarations at namespace scope before it
  <!-- snippet-toplevel-lines: N --> the block's first N lines are at namespace scope
  <!-- not-compiled: REASON -->     the block is not compiled; the reason is required
A #line directive maps compiler errors to the guide's own lines. Blocks in other
languages (sh, text, cmake, python) are not C++ and are left alone.
"""
import os
import re
import sys

FENCE = re.compile(r"^```(\S*)\s*$")
DIRECTIVE = re.compile(r"<!--\s*(snippet-prelude|snippet-toplevel|snippet-toplevel-lines|not-compiled):(.*?)-->",
                       re.S)
HEADERS = """#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/memory/trace.h"
#include "core/predict.h"
#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"
#if __has_include("parallel/parallel.h") && defined(EMBER_DOC_SNIPPETS_PARALLEL)
#include "parallel/parallel.h"
#endif
"""


class Block:
    def __init__(self, path, line, code, directives):
        self.path, self.line, self.code = path, line, code
        self.prelude = "\n".join(v for k, v in directives if k == "snippet-prelude")
        self.toplevel = "\n".join(v for k, v in directives if k == "snippet-toplevel")
        lines = [v for k, v in directives if k == "snippet-toplevel-lines"]
        self.toplevel_lines = int(lines[-1]) if lines else 0
        reasons = [v for k, v in directives if k == "not-compiled"]
        self.skip = reasons[-1] if reasons else None
        self.is_program = re.search(r"\bint\s+main\s*\(", code) is not None


def blocks_of(path):
    """The C++ blocks of one Markdown file, with the directives before each."""
    text = open(path, encoding="utf-8").read()
    lines = text.split("\n")
    out, pending, i = [], [], 0
    errors = []
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m and m.group(1):
            lang = m.group(1)
            start = i
            i += 1
            body = []
            while i < len(lines) and not FENCE.match(lines[i]):
                body.append(lines[i])
                i += 1
            if i == len(lines):
                errors.append(f"{path}:{start + 1}: unterminated code block")
            if lang in ("cpp", "c++", "cxx"):
                out.append(Block(path, start + 2, "\n".join(body), pending))
            pending = []
        elif m:  # a fence without a language: not C++ (text output)
            i += 1
            while i < len(lines) and not FENCE.match(lines[i]):
                i += 1
            pending = []
        elif "<!--" in line:
            # A comment may span lines: take text up to its end.
            j = i
            chunk = line
            while "-->" not in chunk and j + 1 < len(lines):
                j += 1
                chunk += "\n" + lines[j]
            for d in DIRECTIVE.finditer(chunk):
                pending.append((d.group(1), d.group(2).strip()))
            i = j
        i += 1
    for b in out:
        if b.skip is not None and not b.skip:
            errors.append(f"{b.path}:{b.line}: not-compiled needs a reason")
        if b.toplevel_lines and b.is_program:
            errors.append(f"{b.path}:{b.line}: snippet-toplevel-lines on a whole program")
    return out, errors


def fragment_source(b, n, rel):
    code = b.code.split("\n")
    top, body = code[: b.toplevel_lines], code[b.toplevel_lines:]
    # #include lines of a fragment go to the top of the file.
    includes = [l for l in top + body if l.startswith("#include")]
    top = [l for l in top if not l.startswith("#include")]
    body = [l for l in body if not l.startswith("#include")]
    parts = [f"namespace doc_snippet_{n} {{"]
    if b.toplevel:
        parts.append(b.toplevel)
    if top:
        parts.append(f'#line {b.line} "{rel}"')
        parts.extend(top)
    parts.append("[[maybe_unused]] void snippet() {")
    if b.prelude:
        parts.append(b.prelude)
    parts.append(f'#line {b.line + b.toplevel_lines} "{rel}"')
    parts.extend(body)
    parts.append("}")
    parts.append(f"}}  // namespace doc_snippet_{n}")
    return includes, "\n".join(parts)


def main(argv):
    check_only = argv[:1] == ["--check"]
    errors = []
    if check_only:
        out_dir, files = None, argv[1:]
        if files[:1] == ["--max-lines"]:
            limit, page, files = int(files[1]), files[2], files[3:]
            n = len(open(page, encoding="utf-8").read().splitlines())
            if n > limit:
                errors.append(f"{page} has {n} lines, more than {limit}: move detail into docs/")
            print(f"{page}: {n} lines (at most {limit})")
    else:
        if len(argv) < 2:
            print(__doc__, file=sys.stderr)
            return 2
        out_dir, files = argv[0], argv[1:]
        os.makedirs(out_dir, exist_ok=True)
        for f in os.listdir(out_dir):
            if f.endswith(".cpp"):
                os.remove(os.path.join(out_dir, f))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the source tree
    total = compiled = 0
    skipped = []
    for path in sorted(set(files)):
        blocks, errs = blocks_of(path)
        errors += errs
        rel = os.path.relpath(os.path.abspath(path), root)
        stem = re.sub(r"\W", "_", os.path.splitext(rel)[0])
        fragments, includes = [], set()
        for k, b in enumerate(blocks):
            total += 1
            if b.skip:
                skipped.append(f"{path}:{b.line}: {b.skip}")
                continue
            compiled += 1
            if out_dir is None:
                continue
            if b.is_program:
                with open(os.path.join(out_dir, f"{stem}_{k}_program.cpp"), "w") as f:
                    f.write(f"// Generated from {rel} by tools/extract_doc_snippets.py; edit the guide.\n")
                    f.write(f'#line {b.line} "{rel}"\n{b.code}\n')
            else:
                inc, src = fragment_source(b, f"{stem}_{k}", rel)
                includes.update(inc)
                fragments.append(src)
        if out_dir is not None and fragments:
            with open(os.path.join(out_dir, f"{stem}.cpp"), "w") as f:
                f.write(f"// Generated from {rel} by tools/extract_doc_snippets.py; edit the guide.\n")
                f.write(HEADERS + "\n".join(sorted(includes)) + "\n\nusing namespace ember;\n\n")
                f.write("\n\n".join(fragments) + "\n")
    for e in errors:
        print("error: " + e, file=sys.stderr)
    print(f"doc snippets: {total} C++ blocks in {len(set(files))} files, {compiled} compiled, "
          f"{len(skipped)} not compiled")
    for s in skipped:
        print("  not compiled: " + s)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
