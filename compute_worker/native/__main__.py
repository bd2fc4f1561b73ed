"""`python -m compute_worker.native`: build the kernels now (make setup), or say why not."""
import sys

from compute_worker import native

if __name__ == "__main__":
    if native.ops() is None:
        print(f"native kernels not built: {native.why_not()} (torch's kernels are used)")
    else:
        print(f"native kernels built in {native.build_dir()}")
    sys.exit(0)
