"""A local OpenAI-compatible chat-completions server on a free loopback port.

:class:`LocalServer` runs llama-cpp-python's server (the ``local-llm`` extra)::

    python -m llama_cpp.server --model <gguf> --model_alias gemma-3-270m-q4_k_m
        --host 127.0.0.1 --port <free port> --n_ctx 4096
        --chat_format chatml-function-calling --n_threads 2 --n_threads_batch 2
        --logits_all False --interrupt_requests False

in a process group of its own, waits until ``GET /v1/models`` answers, and stops the whole
group when the ``with`` block ends: normally, on an exception, on Ctrl-C, and on SIGTERM
(when started from the main thread, a SIGTERM handler stops the group first, then does what
the handler before it did). A SIGKILL of the parent leaves the server running: nothing can
run then.

``chatml-function-calling`` is the chat format under which this model answers a request
with ``tools`` and a named ``tool_choice`` by a well-formed tool call; the format the
server picks by itself for this file gives empty answers. ``--logits_all False`` keeps the
server from holding the logits of every position (4096 x 262,144 floats, 4 GiB, for this
model's vocabulary); ``--interrupt_requests False`` lets a request finish when another one
arrives (a background review beside the agent's own requests).

The server listens only on 127.0.0.1 and takes no API key (any key a client sends is
ignored). It gets only the environment variables of :data:`PASSED_ENV`: it reads its
settings from the environment too (``HOST``, ``PORT``, ``API_KEY``, ``CONFIG_FILE`` and
every other setting's name override the command line or add to it), and no key of the
caller's reaches it. It also gets ``OMP_WAIT_POLICY=PASSIVE``: llama.cpp's OpenMP threads
otherwise spin while they wait for each other, and on a machine whose cores are busy with
other work a spinning thread takes the time slice its partner needs (measured here, 2
threads on 2 loaded cores: 282 prompt tokens and 32 new ones in 23-31 s spinning, 4 s
passive, 4-6 s with 1 thread).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from dyna.errors import MissingExtraError, ServerStartError, check_range
from dyna.llm_local.model import MODEL_ALIAS, ensure_model, verify_model

__all__ = ["CHAT_FORMAT", "HOST", "LocalServer", "PASSED_ENV", "free_port",
           "require_server", "server_command"]

HOST = "127.0.0.1"
CHAT_FORMAT = "chatml-function-calling"
#: The only environment variables the server process gets (those that are set).
PASSED_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
              "LD_LIBRARY_PATH", "VIRTUAL_ENV", "SYSTEMROOT")


def free_port(host: str = HOST) -> int:
    """A TCP port of ``host`` that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(model, port: int, *, n_ctx: int = 4096,
                   threads: int = 2) -> list[str]:
    """The server's command line (this interpreter, the module docstring's flags)."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model),
            "--model_alias", MODEL_ALIAS, "--host", HOST, "--port", str(port),
            "--n_ctx", str(n_ctx), "--chat_format", CHAT_FORMAT,
            "--n_threads", str(threads), "--n_threads_batch", str(threads),
            "--logits_all", "False", "--interrupt_requests", "False"]


def require_server() -> None:
    """Check that llama-cpp-python's server can be imported (without importing it).

    Raises
    ------
    MissingExtraError
        Naming the missing module and the command that installs the extra.
    """
    for module in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(f"{module}: not installed, so llama-cpp-python's server "
                                    "cannot run; install the local-llm extra: "
                                    "pip install -e '.[local-llm]'")


def _signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to every process of the group ``pgid`` (none left: nothing to do)."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _exited(proc: subprocess.Popen, seconds: float) -> bool:
    """Whether ``proc`` exits within ``seconds``. Polls: a blocking wait could deadlock
    when :meth:`LocalServer.stop` runs in a signal handler that interrupted a wait on the
    same process (:class:`subprocess.Popen` keeps a lock while it waits)."""
    deadline = time.monotonic() + seconds
    while proc.poll() is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _last_line(path: Path) -> str:
    """The last non-empty line of the server's log (at most 200 characters), or ""."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    lines = [ln.strip() for ln in lines if ln.strip()]
    return lines[-1][:200] if lines else ""


class LocalServer:
    """llama-cpp-python's server with the local model, as a context manager (module
    docstring).

    Parameters
    ----------
    model : path-like, optional
        A GGUF file; its SHA-256 must be :data:`dyna.llm_local.model.MODEL_SHA256`.
        Default: :func:`dyna.llm_local.model.ensure_model` (assembled into the cache once).
    port : int
        Loopback port; 0 (default) picks a free one.
    n_ctx : int
        Context window in tokens (default 4096).
    threads : int
        CPU threads for generation and for prompt processing (default 2).
    startup_timeout : float
        Seconds (> 0) to wait for ``/v1/models`` to answer (default 180: loading is a few
        seconds on an idle machine, much longer on a loaded one).
    log : path-like, optional
        Where the server's output goes; default a temporary file, removed at :meth:`stop`.

    Attributes
    ----------
    base_url : str
        ``http://127.0.0.1:PORT/v1`` (set by :meth:`start`), for
        :class:`dyna.loops.llm.Endpoint`.
    model_name : str
        :data:`~dyna.llm_local.model.MODEL_ALIAS`, the ``model`` of requests.
    seconds_to_start : float
        Wall-clock seconds from launch until the server answered.

    Raises
    ------
    ConfigError
        A bad port, context size, thread count or timeout.
    """

    def __init__(self, model=None, *, port: int = 0, n_ctx: int = 4096, threads: int = 2,
                 startup_timeout: float = 180.0, log=None):
        self.model = model
        self.port = check_range("port", port, 0, 65535, integer=True)
        self.n_ctx = check_range("n_ctx", n_ctx, 256, None, integer=True)
        self.threads = check_range("threads", threads, 1, None, integer=True)
        self.startup_timeout = float(check_range("startup_timeout", startup_timeout, 0.0,
                                                 None, lo_open=True))
        self.log = Path(log) if log is not None else None
        self.model_name = MODEL_ALIAS
        self.base_url = ""
        self.seconds_to_start = 0.0
        self.process: subprocess.Popen | None = None
        self._log_path: Path | None = None
        self._own_log = False
        self._previous_sigterm = None
        self._sigterm_handler = None

    def __enter__(self) -> "LocalServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "LocalServer":
        """Launch the server and wait until it answers.

        Raises
        ------
        MissingExtraError
            llama-cpp-python or the model package is not installed.
        ModelChecksumError
            The model file is not the expected one.
        ServerStartError
            The server exited, or did not answer within ``startup_timeout`` (it was
            stopped); the message ends with the last line of its log.
        """
        if self.process is not None:
            return self
        require_server()
        model = ensure_model() if self.model is None else verify_model(self.model)
        port = self.port or free_port()
        if self.log is None:
            fd, name = tempfile.mkstemp(prefix="dyna-llm-server-", suffix=".log")
            os.close(fd)
            self._log_path, self._own_log = Path(name), True
        else:
            self._log_path, self._own_log = self.log, False
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        env["OMP_WAIT_POLICY"] = "PASSIVE"
        t0 = time.monotonic()
        with open(self._log_path, "ab") as out:
            self.process = subprocess.Popen(
                server_command(model, port, n_ctx=self.n_ctx, threads=self.threads),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
        self._catch_sigterm()
        self.base_url = f"http://{HOST}:{port}/v1"
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.seconds_to_start = time.monotonic() - t0
        return self

    def _wait_ready(self, t0: float) -> None:
        """Poll ``/v1/models`` until it answers 200; raise if the server exits first or
        the start-up timeout passes."""
        url = self.base_url + "/models"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy
        while True:
            code = self.process.poll()
            if code is not None:
                raise ServerStartError(f"llm server: exited with status {code} before "
                                       f"answering: {_last_line(self._log_path)}")
            try:
                with opener.open(url, timeout=2.0) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() - t0 > self.startup_timeout:
                raise ServerStartError(f"llm server: no answer from {url} within "
                                       f"{self.startup_timeout:g} s; stopped it: "
                                       f"{_last_line(self._log_path)}")
            time.sleep(0.25)

    def _catch_sigterm(self) -> None:
        """From the main thread: on SIGTERM stop the server's group, then hand the signal
        to the handler that was there before (the default one ends the process)."""
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum, frame):
            self.stop()
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
        self._previous_sigterm, self._sigterm_handler = previous, on_sigterm

    def wait(self) -> int:
        """Block until the server exits; its exit status (0 if it was not started).

        It polls rather than blocking in :meth:`subprocess.Popen.wait`, whose lock a
        SIGTERM handler running :meth:`stop` in the same thread could never take."""
        proc = self.process
        if proc is None:
            return 0
        while proc.poll() is None:
            time.sleep(0.2)
        return proc.returncode

    def stop(self, grace: float = 10.0) -> None:
        """Stop the server's whole process group: SIGTERM, then SIGKILL after ``grace``
        seconds. Idempotent; also restores the SIGTERM handler :meth:`start` replaced."""
        if (self._sigterm_handler is not None
                and threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) is self._sigterm_handler):
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._sigterm_handler = None
        proc, self.process = self.process, None
        if proc is not None:
            _signal_group(proc.pid, signal.SIGTERM)   # the group's id is the server's pid
            if not _exited(proc, grace):
                _signal_group(proc.pid, signal.SIGKILL)
                _exited(proc, 5.0)
            _signal_group(proc.pid, signal.SIGKILL)   # what outlived the group's leader
        if self._own_log and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None
