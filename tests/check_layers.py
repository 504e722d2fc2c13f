#!/usr/bin/env python3
"""Checks that every #include of the library points down the layer table.

Reads the quoted and angled includes of include/tandem/** and src/**, resolves each to a file
of the repository (relative includes by the including file's folder, then include/), and fails
listing file:line for every include whose target sits in a layer the including file's layer may
not use. Usage: check_layers.py <repository root>
"""
import os
import re
import sys

# --- the layer table: the one place to change when the design changes -----------------------
# Bottom to top, as the "Layers, bottom to top" table of DESIGN.md (shared folder; mapped onto
# the code in docs/ARCHITECTURE.md). A layer may include its own layer and any layer below it.
LAYERS = ["core", "kernels", "autograd", "ops", "nn", "optim", "amp", "comm", "parallel", "data",
          "io", "monitor"]
# Arrows down the table that DESIGN.md's text forbids all the same: "comm knows tensors, not
# modules" (nn, and optim and amp, which act on modules' parameters).
FORBIDDEN = {"comm": {"nn", "optim", "amp"}}
# Folders whose name is not their layer (paths relative to the root). include/tandem/cuda is the
# CUDA runtime API (devices, streams, the caching allocator behind core's Storage): core, as
# DESIGN.md gives core the CUDA caching allocator; its implementation in src/cuda is kernels.
FOLDER_LAYER = {"src/cpu": "kernels", "src/cuda": "kernels", "include/tandem/cuda": "core"}
TOP = "tandem.hpp"  # include/tandem/tandem.hpp includes everything and nothing includes it
# -----------------------------------------------------------------------------------------------

SOURCE_SUFFIXES = (".hpp", ".h", ".cpp", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


def layer_of(rel):
    """The layer of a repository path, TOP for the everything-header, None outside the library."""
    parts = rel.split("/")
    if rel == "include/tandem/" + TOP:
        return TOP
    for folder, layer in FOLDER_LAYER.items():
        if rel.startswith(folder + "/"):
            return layer
    if parts[0] == "include" and len(parts) == 3 and parts[2].endswith(".hpp"):
        return parts[2][:-4]  # the umbrella header include/tandem/<layer>.hpp
    if parts[0] == "include" and len(parts) > 3:
        return parts[2]
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return None


def may_include(layer, target):
    if layer == TOP or target == layer:
        return True
    if target == TOP:
        return False
    return LAYERS.index(target) < LAYERS.index(layer) and target not in FORBIDDEN.get(layer, ())


def resolve(root, including, name):
    """The repository path `name` refers to from file `including`, or None (a system header)."""
    for base in (os.path.dirname(including), "include"):
        path = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, path)):
            return path
    if name.startswith("tandem/"):
        return os.path.join("include", name)  # a header that does not exist (yet): still layered
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems = []
    files = []
    for top in ("include/tandem", "src"):
        for folder, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.relpath(os.path.join(folder, n), root)
                      for n in names if n.endswith(SOURCE_SUFFIXES)]
    for rel in sorted(files):
        layer = layer_of(rel)
        if layer != TOP and layer not in LAYERS:
            problems.append(f"{rel}: folder of no layer (add it to FOLDER_LAYER in {__file__})")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(root, rel, m.group(1))
                target_layer = layer_of(target) if target else None
                if target_layer is None:
                    continue
                if target_layer != TOP and target_layer not in LAYERS:
                    problems.append(f"{rel}:{number}: includes {target}, in a folder of no layer")
                elif not may_include(layer, target_layer):
                    problems.append(f"{rel}:{number}: {layer} includes {target} ({target_layer})")
    if problems:
        print("includes against the layer table (DESIGN.md: an arrow only points down; "
              "comm knows tensors, not modules):")
        print("\n".join("  " + p for p in problems))
        return 1
    print(f"{len(files)} files: every include points down the layer table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
