"""What a model spec names, checked without loading it (no torch): the worker asks before Ray
and the engine actor start, so a wrong --model is one line, not the actor's traceback."""
from __future__ import annotations

from pathlib import Path

DEFAULT_SPEC = "smollm2-135m"
GGUF_MAGIC = b"GGUF"


def model_source(spec: str = DEFAULT_SPEC) -> Path | None:
    """The file or directory `spec` names (None: the bundled default); a ValueError that says
    what is wrong with it otherwise. Cheap: the worker asks before Ray and the model start."""
    if spec in (DEFAULT_SPEC, "smollm2-135m-instruct", "default", ""):
        return None
    path = Path(spec).expanduser()
    if path.is_file():
        with open(path, "rb") as f:  # an unreadable file raises OSError, naming it
            magic = f.read(len(GGUF_MAGIC))
        if path.suffix != ".gguf" or magic != GGUF_MAGIC:
            raise ValueError(f"{spec}: not a GGUF file (expected a .gguf file starting with "
                             f"{GGUF_MAGIC!r})")
        return path
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ValueError(f"{spec}: a directory without config.json is no Hugging Face "
                             "checkpoint")
        return path
    raise ValueError(f"{spec}: no such file or directory; expected {DEFAULT_SPEC!r}, a .gguf "
                     "file or a Hugging Face checkpoint directory")
