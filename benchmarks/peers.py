"""What the side-by-side benchmark drivers share: each side (tandem's program, PyTorch's worker)
runs in its own process at its own defaults. Nothing here may slow the peer: an
OMP_WAIT_POLICY in the caller's environment is removed (PASSIVE costs PyTorch 10-15% on the
ResNet path)."""
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
