#!/usr/bin/env python3
"""The soft size budget: files over 800 lines and functions over 120 lines,
listed largest first, so that a file or function that grew past the size
one reader holds at once is seen, and split when its jobs can be told
apart (issue #48). It reports; it fails nothing:

    scripts/size-budget.py [--files N] [--functions N] [--strict]

Rust, Python and JavaScript sources of the checkout are read (not
`target/`, virtual environments or generated files). A Rust function is
measured from its `fn` line to the brace that closes its body, a Python
one as `ast` sees it, tests included: a test module is code to read too.
`--strict` exits 1 when anything is over, for whoever wants a gate.
"""

import argparse
import ast
import os
import re
import sys

SKIP_DIRS = {".git", "target", "node_modules", "__pycache__", ".venv", "venv"}
SOURCES = (".rs", ".py", ".js")


def sources(root):
    """Every source file under `root`, as a path relative to it, sorted."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("target"))
        for name in files:
            if name.endswith(SOURCES):
                found.append(os.path.relpath(os.path.join(folder, name), root))
    return sorted(found)


def code_only(text):
    """Rust source with comments, strings and character literals blanked
    (newlines kept), so that braces in them are not counted."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        two = text[i : i + 2]
        if two == "//":
            while i < n and text[i] != "\n":
                i += 1
        elif two == "/*":
            depth = 0
            while i < n:
                if text.startswith("/*", i):
                    depth += 1
                    i += 2
                elif text.startswith("*/", i):
                    depth -= 1
                    i += 2
                    if depth == 0:
                        break
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = len(re.match(r"r(#*)", text[i:]).group(1))
            end = text.find('"' + "#" * hashes, i + 2 + hashes)
            end = n if end < 0 else end + 1 + hashes
            out.append("\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    out.append("\n")
                i += 1
            i += 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", text[i:]):
            i += len(re.match(r"'(\\.[^']*|[^\\'])'", text[i:]).group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


FN = re.compile(r"^[ \t]*(?:pub(?:\([^)]*\))?\s+)?(?:(?:const|async|unsafe|extern\s+\"C\")\s+)*fn\s+(\w+)", re.MULTILINE)


def rust_functions(text):
    """(name, first line, lines) of each Rust function with a body."""
    code = code_only(text)
    found = []
    for m in FN.finditer(code):
        open_at = code.find("{", m.end())
        semi = code.find(";", m.end())
        if open_at < 0 or (0 <= semi < open_at):
            continue  # a declaration without a body (a trait's, an extern's)
        depth = 0
        for j in range(open_at, len(code)):
            if code[j] == "{":
                depth += 1
            elif code[j] == "}":
                depth -= 1
                if depth == 0:
                    break
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, j) + 1
        found.append((m.group(1), first, last - first + 1))
    return found


def python_functions(text):
    """(name, first line, lines) of each Python function."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [
        (node.name, node.lineno, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=800, help="lines a file may hold (800)")
    ap.add_argument("--functions", type=int, default=120, help="lines a function may hold (120)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when anything is over")
    ns = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files, functions = [], []
    for path in sources(root):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > ns.files:
            files.append((lines, path))
        measured = (
            rust_functions(text) if path.endswith(".rs")
            else python_functions(text) if path.endswith(".py")
            else []
        )
        for name, first, length in measured:
            if length > ns.functions:
                functions.append((length, f"{path}:{first}", name))
    files.sort(reverse=True)
    functions.sort(reverse=True)
    print(f"{len(files)} files over {ns.files} lines")
    for lines, path in files:
        print(f"  {lines:6}  {path}")
    print(f"{len(functions)} functions over {ns.functions} lines")
    for length, where, name in functions:
        print(f"  {length:6}  {where}  {name}")
    return 1 if ns.strict and (files or functions) else 0


if __name__ == "__main__":
    sys.exit(main())
