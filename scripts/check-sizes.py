#!/usr/bin/env python3
"""Checks that no source file under src/ is over 800 lines and no function under src/ or kernels/
over 150.

A function is the body of a brace opened at namespace or class scope after a parameter list: a
free function, a member function defined in its class or outside it, a constructor. Its length is
counted from the line of its name (the line of the parameter list's opening parenthesis) to the
line of its closing brace, lambdas and local classes inside it included. Comments, string and
character literals and preprocessor lines are skipped when braces are counted.

Usage: scripts/check-sizes.py [--root DIR] [--list N]
  --list N   print the N longest functions and files as well (for a refactoring's to-do list)
Exit status 0 when every file and function is within its limit, 1 when one is not.
"""

import argparse
import pathlib
import re
import sys

FILE_LIMIT = 800          # lines of a file under src/
FUNCTION_LIMIT = 150      # lines of a function under src/ or kernels/
FILE_ROOTS = ("src",)
FUNCTION_ROOTS = ("src", "kernels")
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh")
SCOPES = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|extern\s+\"C\"\s*$")
CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|return|try)\b\s*(\(|$)")


def strip(text):
    """`text` with comments, literals and preprocessor lines blanked, newlines kept."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c in " \t":
            out.append(c)
            i += 1
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            k = text.find("(", i)
            delim = ")" + text[i + 2:k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of every function body at namespace or class scope."""
    code = strip(text)
    stack = []  # per open brace: "scope", "function" or "other"
    head_start = 0  # where the text before the next brace begins
    found = []
    opened = None  # (name, line) of the function being read
    for i, c in enumerate(code):
        if c == "{":
            head = code[head_start:i]
            in_function = "function" in stack
            kind = "other"
            if not in_function and (not stack or stack[-1] == "scope"):
                flat = " ".join(head.split())
                if SCOPES.search(flat) or not flat:
                    kind = "scope"
                elif "(" in flat and not CONTROL.search(flat) and not flat.endswith("=") \
                        and "=" not in flat.split("(")[0]:
                    kind = "function"
                    bounds = re.search(r"__launch_bounds__\s*\([^)]*\)", head)
                    skip = bounds.end() if bounds else 0
                    paren = head_start + skip + head[skip:].index("(")
                    name = re.findall(r"[~\w:<>]+", code[head_start:paren])
                    opened = (name[-1] if name else "?", code.count("\n", 0, paren) + 1)
            stack.append(kind)
            head_start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "other"
            if kind == "function" and opened:
                found.append((opened[0], opened[1], code.count("\n", 0, i) + 1))
                opened = None
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return found


def check(root, listing):
    errors, files, funcs = [], [], []
    for top in sorted(set(FILE_ROOTS) | set(FUNCTION_ROOTS)):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SOURCES or not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            rel = path.relative_to(root)
            lines = text.count("\n")
            if top in FILE_ROOTS:
                files.append((lines, str(rel)))
                if lines > FILE_LIMIT:
                    errors.append(f"{rel}: {lines} lines (a file under src/ has at most "
                                  f"{FILE_LIMIT})")
            if top in FUNCTION_ROOTS:
                for name, first, last in functions(text):
                    length = last - first + 1
                    funcs.append((length, f"{rel}:{first} {name}"))
                    if length > FUNCTION_LIMIT:
                        errors.append(f"{rel}:{first}: {name} is {length} lines (a function has "
                                      f"at most {FUNCTION_LIMIT})")
    if listing:
        for title, items in (("files", files), ("functions", funcs)):
            print(f"longest {title}:")
            for length, where in sorted(items, reverse=True)[:listing]:
                print(f"  {length:5d}  {where}")
    return errors, len(files), len(funcs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--list", type=int, default=0, metavar="N")
    args = parser.parse_args()
    errors, nfiles, nfuncs = check(args.root.resolve(), args.list)
    for error in errors:
        print(error, file=sys.stderr)
    if errors:
        print(f"check-sizes: {len(errors)} file(s) or function(s) over their limit",
              file=sys.stderr)
        return 1
    print(f"check-sizes: {nfiles} files of at most {FILE_LIMIT} lines, {nfuncs} functions of at "
          f"most {FUNCTION_LIMIT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
