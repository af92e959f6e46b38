"""Regenerate the Python code of ``proto/mtawindows/v1/windows.proto`` into this folder.

    python -m mtawindows.v1.generate            # rewrite the generated files
    python -m mtawindows.v1.generate --check    # exit 1 if they are out of date

Needs ``grpcio-tools`` (the ``test`` extra). The generated modules sit beside their .proto and
are imported under its proto package, ``mtawindows.v1`` (as ``grpc_health.v1`` is): protoc's
output is used unedited.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_DIR = HERE.parent.parent  # proto/: the include root
PROTO = "mtawindows/v1/windows.proto"
OUTPUTS = ("windows_pb2.py", "windows_pb2.pyi", "windows_pb2_grpc.py")


def generate() -> dict[str, str]:
    """The generated files' texts, by name."""
    import grpc_tools
    from grpc_tools import protoc

    include = str(Path(grpc_tools.__file__).parent / "_proto")
    with tempfile.TemporaryDirectory() as out:
        args = [
            "protoc",
            f"-I{PROTO_DIR}",
            f"-I{include}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO_DIR / PROTO),
        ]
        if protoc.main(args) != 0:
            msg = f"protoc failed on {PROTO}"
            raise RuntimeError(msg)
        gen = Path(out) / "mtawindows" / "v1"
        texts = {name: (gen / name).read_text() for name in OUTPUTS}
    return texts


def stale() -> list[str]:
    """Names of the generated files that differ from what the .proto gives now."""
    return [
        name
        for name, text in generate().items()
        if not (HERE / name).exists() or (HERE / name).read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check, exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        if bad:
            print(f"out of date: {', '.join(bad)}; run python -m mtawindows.v1.generate")
            return 1
        print("generated code is up to date")
        return 0
    for name, text in generate().items():
        (HERE / name).write_text(text)
    print(f"wrote {', '.join(OUTPUTS)} in {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
