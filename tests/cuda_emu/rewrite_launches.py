#!/usr/bin/env python3
"""Rewrites a .cu file's kernel launches for the CPU emulation (tests/cuda_emu/emu.hpp):

    kernel<T><<<grid, block, smem, stream>>>(a, b)
 -> ::tandem_emu::launch("kernel<T>", grid, block, smem, stream, std::make_tuple(a, b),
                         [](auto&... args_) { kernel<T>(args_...); })

The arguments are evaluated once, as a launch evaluates them; the kernel's template arguments
are deduced from them as before. Anything this cannot parse is an error, never a silent skip.
Usage: rewrite_launches.py IN OUT
"""
import re
import sys


def fail(src, pos, why):
    line = src.count("\n", 0, pos) + 1
    sys.exit(f"{sys.argv[1]}:{line}: rewrite_launches: {why}")


def kernel_start(src, end):
    """Start of the kernel expression ending at `end` (exclusive): a qualified name, optionally
    followed by one balanced <...> template argument list."""
    i = end
    while i > 0 and src[i - 1].isspace():
        i -= 1
    if src[i - 1] == ">":
        depth = 0
        while i > 0:
            i -= 1
            c = src[i]
            if c == ">":
                depth += 1
            elif c == "<":
                depth -= 1
                if depth == 0:
                    break
        if depth != 0:
            fail(src, end, "unbalanced template arguments before <<<")
    m = re.search(r"[A-Za-z_][A-Za-z_0-9:]*\s*$", src[:i])
    if not m:
        fail(src, end, "no kernel name before <<<")
    return m.start()


def balanced(src, open_pos, open_c, close_c):
    """Index just past the bracket closing the one at open_pos."""
    depth = 0
    for i in range(open_pos, len(src)):
        if src[i] == open_c:
            depth += 1
        elif src[i] == close_c:
            depth -= 1
            if depth == 0:
                return i + 1
    fail(src, open_pos, f"no closing {close_c}")


def rewrite(src):
    out, pos = [], 0
    while True:
        lt = src.find("<<<", pos)
        if lt < 0:
            break
        start = kernel_start(src, lt)
        if start < pos:
            fail(src, lt, "launch inside another launch's kernel expression")
        gt = src.find(">>>", lt)
        if gt < 0:
            fail(src, lt, "<<< without >>>")
        config = src[lt + 3:gt]
        paren = gt + 3
        while paren < len(src) and src[paren].isspace():
            paren += 1
        if paren >= len(src) or src[paren] != "(":
            fail(src, gt, "no argument list after >>>")
        close = balanced(src, paren, "(", ")")
        kernel = src[start:lt].strip()
        args = src[paren + 1:close - 1]
        # The line breaks dropped with the kernel's and the argument list's leading whitespace
        # go after the call: every later line keeps its number.
        dropped = src[start:lt].count("\n") + src[gt + 3:paren].count("\n")
        out.append(src[pos:start])
        name = " ".join(kernel.split()).replace('"', '')
        out.append(f'::tandem_emu::launch("{name}", {config}, std::make_tuple({args}), '
                   f"[](auto&... args_) {{ {kernel}(args_...); }})" + "\n" * dropped)
        pos = close
    out.append(src[pos:])
    return "".join(out)


def main():
    src = open(sys.argv[1]).read()
    text = rewrite(src)
    if "<<<" in text:
        fail(text, text.find("<<<"), "a launch left unrewritten")
    with open(sys.argv[2], "w") as f:
        f.write(f'#line 1 "{sys.argv[1]}"\n')  # diagnostics name the .cu file (same lines)
        f.write(text)


if __name__ == "__main__":
    main()
