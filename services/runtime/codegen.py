"""Generate the gRPC stubs of protos/bidaw/v1 into services/runtime/gen (never edited by hand).

protoc writes absolute imports (`from bidaw.v1 import common_pb2`); we rewrite them to relative
ones so the stubs live inside our package without touching sys.path.
"""
from __future__ import annotations

import pathlib
import re
import shutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
OUT = ROOT / "services" / "runtime" / "gen"


def generate() -> list[pathlib.Path]:
    from grpc_tools import protoc  # imported here: only setup needs grpcio-tools

    sources = sorted(PROTOS.glob("bidaw/v1/*.proto"))
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{PROTOS}", f"-I{include}", f"--python_out={tmp}",
                f"--pyi_out={tmp}", f"--grpc_python_out={tmp}", *map(str, sources)]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        if OUT.exists():
            shutil.rmtree(OUT)
        OUT.mkdir(parents=True)
        for path in sorted((pathlib.Path(tmp) / "bidaw" / "v1").iterdir()):
            text = re.sub(r"^from bidaw\.v1 import", "from . import", path.read_text(), flags=re.M)
            (OUT / path.name).write_text(text)
    (OUT / "__init__.py").write_text('"""Generated from protos/bidaw/v1 by services/runtime/codegen.py."""\n')
    return sorted(OUT.iterdir())


if __name__ == "__main__":
    files = generate()
    print(f"generated {len(files)} files into {OUT.relative_to(ROOT)}", file=sys.stderr)
