#!/usr/bin/env python3
"""Checks that no function of libtandem that uses AVX registers can be bound to a baseline caller.

The CPU kernels are compiled for scalar, AVX2 and AVX-512, and the rest of the library for the
x86-64 baseline; the vector objects' functions are made local (cmake/isolate_isa_object.cmake).
A function using ymm/zmm registers that is in the dynamic symbol table could stand in for a
baseline copy of the same inline function or template instance (one COMDAT name, one copy kept)
and crash an AVX2-only machine with SIGILL. Fails listing such functions.
Usage: check_isa_isolation.py <libtandem.so>
"""
import re
import subprocess
import sys


def main():
    so = sys.argv[1]
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so], check=True,
                         capture_output=True, text=True).stdout
    vector = {}  # function address -> registers seen
    current = None
    for line in dis.splitlines():
        m = re.match(r"^([0-9a-f]+) <(.+)>:$", line)
        if m:
            current = int(m.group(1), 16)
        elif current is not None and ("ymm" in line or "zmm" in line):
            vector.setdefault(current, set()).add("zmm" if "zmm" in line else "ymm")
    dynamic = subprocess.run(["nm", "-D", "--defined-only", so], check=True, capture_output=True,
                             text=True).stdout
    exported = {}
    for line in dynamic.splitlines():
        fields = line.split()
        if len(fields) == 3:
            exported[int(fields[0], 16)] = fields[2]
    bad = sorted(exported[a] for a in vector if a in exported)
    print(f"{so}: {len(vector)} functions use ymm/zmm registers, {len(bad)} of them exported")
    if not vector:
        print("no AVX code at all: the avx2/avx512 kernel objects are missing")
        return 1
    for name in bad[:50]:
        print("  exported:", subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
