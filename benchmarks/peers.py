"""What the side-by-side benchmark drivers share: each side (tandem's program, PyTorch's worker)
runs in its own process at its own defaults. Nothing here may slow the peer: an
OMP_WAIT_POLICY in the caller's environment is removed (PASSIVE costs PyTorch 10-15% on the
ResNet path). Nor may the peer run on a BLAS slower than the one its package brings:
require_optimized_blas refuses Debian's reference BLAS."""
import json
import os
import subprocess


def peer_env():
    """The caller's environment without OMP_WAIT_POLICY."""
    return {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}


def run_side(cmd):
    """Runs cmd; returns the JSON object its last line of output prints."""
    out = subprocess.run(cmd, env=peer_env(), check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def require_optimized_blas():
    """Exits, saying why, when the PyTorch of this process runs its matmuls on Debian's reference
    BLAS: libtorch1.13 recommends libopenblas0, and without it a 1024^3 product runs at 6 GFLOP/s,
    a peer no user has (scripts/setup.sh --bench installs OpenBLAS). Call after importing torch."""
    with open("/proc/self/maps") as f:
        reference = sorted({line.split()[-1] for line in f if "/blas/libblas.so.3" in line})
    if reference:
        raise SystemExit(f"PyTorch's BLAS is the reference implementation ({reference[0]}), which "
                         "would make a false peer; install libopenblas0 (scripts/setup.sh --bench)")
