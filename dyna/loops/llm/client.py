"""The OpenAI-compatible chat-completions client: endpoint, retries, recording and replay.

It speaks the chat-completions wire format (``POST {base_url}/chat/completions``, streaming
off) to any server that does: vLLM, llama.cpp's servers, Ollama, OpenRouter, OpenAI itself.
Tool calls need flags on most local servers (``docs/llm-endpoints.md`` lists them per server).

- :class:`Endpoint`: where and how to ask (``base_url``, ``model``, ``temperature``,
  ``seed``, ``timeout``, the *name* of the environment variable holding the API key, the
  field that caps new tokens). It is part of an experiment's hashed config; the key itself
  never is.
- :class:`ChatClient`: one request at a time, with the retry rules below, every exchange
  redacted (:func:`dyna.redact.redact`) and recorded (:class:`Recording`), or answered
  from a recording (:class:`Replay`) without any network.

Why plain httpx and not the ``openai`` SDK: one dependency fewer (httpx is what the SDK is
built on), and exact control of what this module must guarantee: the retry rules (the SDK
retries on its own schedule), the timeout, and that what is sent, what is recorded and
what is replayed are the same redacted bytes.

Retries
    ``429``: wait the ``Retry-After`` the server states (seconds or an HTTP date; 1 s when
    it states none; more than ``max_retry_after`` is not waited), at most 3 retries, then
    ``incomplete``. ``5xx``: at most 2 retries (``backoff``, doubling), then ``failed``.
    A ``Retry-After`` that is negative or not a number is taken as absent.
    Any other HTTP error, an unreadable answer or a refused connection: ``failed`` at once.
    The reason of a non-2xx end carries the explanation in the answer's body
    (:func:`error_text`: at most 4 KiB read, redacted, the key removed,
    cut to 300 characters), e.g. ``http_error: 400: 'tool_choice' is not supported``.
    An answer of more than
    :data:`MAX_RESPONSE_BYTES` bytes (read in chunks, never whole) or nested more than
    :data:`MAX_JSON_DEPTH` levels: ``failed`` (``malformed_response``).
    No answer within ``timeout`` seconds (no byte for that long, or a body still arriving
    that long after the request was sent): ``incomplete``.

How a reply ended
    The ``finish_reason`` of every choice is read (:func:`dyna.loops.llm.wire.finish_status`):
    ``length`` (cut at the token limit) is ``incomplete``, ``content_filter`` and an
    unknown value are ``failed``; the message of such a reply is not given to the caller.
    A reply whose ``completion_tokens`` reach the ``max_tokens`` asked for is ``incomplete``
    (``length``) whatever its ``finish_reason``: llama-cpp-python's server (0.3.36,
    ``chatml-function-calling``) ends a tool call cut at the limit with ``tool_calls``.

The API key is read from the environment at each request and sent only in the
``Authorization`` header; it is never recorded, logged or put in an error message, and
a value equal to it in anything recorded is replaced by ``[REDACTED]`` (a key of fewer
than :data:`MIN_SCRUBBED_KEY` characters is a placeholder and is left). A ``base_url``
with a secret-looking part (a key in the path) is refused.
"""

from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from dyna.fileio import DuplicateKeyError, loads_unique
from dyna.errors import ConfigError, check_range
from dyna.loops.llm.wire import (MAX_ERROR_BYTES, MAX_ERROR_CHARS, TOKEN_FIELDS,
                                 finish_status, limit_reason)
from dyna.redact import DEFAULT_SENSITIVE_KEYS, REDACTED, redact

__all__ = ["API_KEY_SUFFIXES", "ChatClient", "ChatResult", "Endpoint", "MAX_JSON_DEPTH",
           "MAX_RESPONSE_BYTES", "MIN_SCRUBBED_KEY", "REDACTED_MARK", "Recording", "Replay",
           "ReplayError", "STATUSES", "error_text", "json_depth", "mask_key_fragments",
           "redact_exchange",
           "request_key"]

log = logging.getLogger("dyna.loops.llm")

#: Retries of a 429 answer, and of a 5xx answer.
RETRIES_429, RETRIES_5XX = 3, 2
#: Largest answer body read (bytes, after content decoding); a longer one is ``failed``.
MAX_RESPONSE_BYTES = 8 * 2**20
#: Deepest nesting of arrays and objects accepted in an answer (chat completions need ~6).
MAX_JSON_DEPTH = 64
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: An API key's variable name ends so (``OPENAI_API_KEY``, ``OPENROUTER_API_KEY``,
#: ``HF_API_TOKEN``); any other name is refused, so that an experiment file from elsewhere
#: cannot send an arbitrary variable (a cloud secret, a database password) to its base_url.
API_KEY_SUFFIXES = ("API_KEY", "API_TOKEN")


def _is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
# "name" is a personal key for free-form dicts, but in the wire format it names tools and
# functions: kept, so tool definitions and calls survive redaction.
_WIRE_KEYS = frozenset(DEFAULT_SENSITIVE_KEYS - {"name"})
REDACTED_MARK = REDACTED
"""What a recording writes in place of the API key: the marker of every redaction."""


class ReplayError(ConfigError):
    """A request that is not in the recording being replayed (the run would diverge)."""


# ============================================================================ endpoint

@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat-completions endpoint.

    Parameters
    ----------
    base_url : str
        ``http(s)://host[:port]/path`` up to, not including, ``/chat/completions`` (e.g.
        ``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1``). Credentials in the URL
        are refused: the key belongs in the environment.
    model : str
    api_key_env : str
        Name of the environment variable holding the API key (default ``OPENAI_API_KEY``);
        it must end in ``API_KEY`` or ``API_TOKEN`` (:data:`API_KEY_SUFFIXES`). Unset or
        empty: no ``Authorization`` header (local servers). A key is sent only over https,
        or plain http to a loopback address.
    temperature : float
        In [0, 2].
    seed : int or None
        Sent as the request's ``seed`` (servers that support it sample reproducibly).
    timeout : float
        Seconds (> 0) to wait for an answer (connect, read, write each).
    max_retry_after : float
        Longest ``Retry-After`` (seconds) that is waited; a longer one ends the request as
        ``incomplete`` at once.
    backoff : float
        Seconds before the first retry of a 5xx answer (doubling after).
    max_tokens_field : {"max_tokens", "max_completion_tokens"}
        The request field that caps a reply's new tokens (:data:`dyna.loops.llm.wire.
        TOKEN_FIELDS`): ``max_tokens`` (default) for llama.cpp's servers, vLLM and Ollama;
        ``max_completion_tokens`` for OpenAI's reasoning models, which refuse the other.

    Raises
    ------
    ConfigError
        Naming the field and the value.
    """

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    seed: int | None = 0
    timeout: float = 60.0
    max_retry_after: float = 60.0
    backoff: float = 0.5
    max_tokens_field: str = "max_tokens"

    def __post_init__(self):
        if not isinstance(self.base_url, str):
            raise ConfigError("base_url", self.base_url, "must be a URL string")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            hidden = parts.username or parts.password or parts.query or parts.fragment
            shown = "(a URL with credentials, a query or a fragment)" if hidden else \
                self.base_url   # not echoed: those parts may carry a key
            raise ConfigError("base_url", shown, "must be an http(s)://host/... URL")
        if parts.username or parts.password:
            raise ConfigError("base_url", "(a URL with credentials)",
                              "must not hold credentials; put the key in the environment "
                              "variable named by api_key_env")
        if parts.query or parts.fragment:   # not echoed: a query may carry a key
            raise ConfigError("base_url", "(a URL with a query or fragment)",
                              "must have no query or fragment; put the key in the "
                              "environment variable named by api_key_env")
        from dyna.redact import redact_text
        if redact_text(self.base_url) != self.base_url:   # a key in the path
            raise ConfigError("base_url", redact_text(self.base_url),
                              "holds a secret-looking value; put the key in the environment "
                              "variable named by api_key_env")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError("model", self.model, "must be a non-empty string")
        if not isinstance(self.api_key_env, str) or not _ENV_NAME_RE.match(self.api_key_env):
            raise ConfigError("api_key_env", self.api_key_env,
                              "must be an environment variable name (letters, digits, _)")
        if not self.api_key_env.upper().endswith(API_KEY_SUFFIXES):
            raise ConfigError("api_key_env", self.api_key_env,
                              "must name an API key's variable (ending in _API_KEY or "
                              "_API_TOKEN): any other variable, e.g. a cloud secret, would "
                              "be sent to base_url")
        object.__setattr__(self, "temperature",
                           float(check_range("temperature", self.temperature, 0.0, 2.0)))
        if self.seed is not None:
            check_range("seed", self.seed, 0, None, integer=True)
        for f in ("timeout", "max_retry_after", "backoff"):
            lo_open = f == "timeout"
            object.__setattr__(self, f, float(check_range(f, getattr(self, f), 0.0, None,
                                                          lo_open=lo_open)))
        if self.max_tokens_field not in TOKEN_FIELDS:
            raise ConfigError("max_tokens_field", self.max_tokens_field,
                              f"must be one of {TOKEN_FIELDS}")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def to_dict(self) -> dict:
        """The settings (for a hashed config): never the key, only its variable's name."""
        return {"base_url": self.base_url, "model": self.model,
                "api_key_env": self.api_key_env, "temperature": self.temperature,
                "seed": self.seed, "timeout": self.timeout,
                "max_retry_after": self.max_retry_after, "backoff": self.backoff,
                "max_tokens_field": self.max_tokens_field}

    def api_key(self) -> str:
        """The key from the environment ("" when unset)."""
        return os.environ.get(self.api_key_env, "")


# ============================================================================ recording

#: Shortest API key scrubbed from bodies: a shorter one is a local server's placeholder
#: ("x", "EMPTY", "ollama"), and replacing it would rewrite the model name and prompts.
MIN_SCRUBBED_KEY = 8


def _scrub(obj, secret: str):
    """``obj`` with every occurrence of ``secret`` (of at least :data:`MIN_SCRUBBED_KEY`
    characters) in its strings replaced."""
    if len(secret) < MIN_SCRUBBED_KEY:
        return obj
    if isinstance(obj, str):
        return obj.replace(secret, REDACTED_MARK)
    if isinstance(obj, Mapping):
        return {_scrub(k, secret): _scrub(v, secret) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_scrub(v, secret) for v in obj]
    return obj


def mask_key_fragments(text: str, secret: str) -> str:
    """``text`` with every run of at least :data:`MIN_SCRUBBED_KEY` characters that also
    occurs in ``secret`` replaced by :data:`REDACTED_MARK`: the whole key, and the parts of
    it that an exact match misses (a key cut where a body is cut, a key echoed without its
    last characters). A secret shorter than :data:`MIN_SCRUBBED_KEY` is a placeholder and
    is left."""
    n = MIN_SCRUBBED_KEY
    if len(secret) < n or len(text) < n:
        return text
    windows = {secret[i:i + n] for i in range(len(secret) - n + 1)}
    hidden = [False] * len(text)
    for i in range(len(text) - n + 1):
        if text[i:i + n] in windows:
            hidden[i:i + n] = [True] * n
    out, i = [], 0
    while i < len(text):
        if hidden[i]:
            while i < len(text) and hidden[i]:
                i += 1
            out.append(REDACTED_MARK)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def redact_exchange(obj, api_key: str = ""):
    """A request or response body as it may be sent, recorded and replayed: redacted by
    :func:`dyna.redact.redact` (every sensitive key but ``name``, which names tools in this
    format; secret-looking values, embedded JSON, user ids) and with ``api_key`` removed."""
    return _scrub(redact(obj, _WIRE_KEYS), api_key)


def _message(obj) -> str:
    """The explanation in a parsed error body: ``error.message``, ``error``, ``message``
    or ``detail`` when it is text (the shapes of OpenAI, llama.cpp, vLLM, Ollama and
    FastAPI servers), else the JSON itself ("" for an empty object)."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, Mapping):
        err = obj.get("error")
        if isinstance(err, Mapping) and isinstance(err.get("message"), str):
            return err["message"]
        for text in (err, obj.get("message"), obj.get("detail")):
            if isinstance(text, str):
                return text
        if not obj:
            return ""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False)


def error_text(raw: bytes, api_key: str = "") -> str:
    """The explanation in an error answer's body, safe to log and record (module docstring);
    "" when it has none.

    Parameters
    ----------
    raw : bytes
        The body as read (at most :data:`MAX_ERROR_BYTES`; a cut body is read as text).
    api_key : str
        Removed wherever it appears (see :func:`redact_exchange`).
    """
    text = mask_key_fragments(bytes(raw[:MAX_ERROR_BYTES]).decode("utf-8", errors="replace"),
                              api_key)
    try:
        obj = loads_unique(text)
    except (DuplicateKeyError, ValueError, RecursionError):
        obj = text
    if json_depth(obj) > MAX_JSON_DEPTH:
        obj = text
    try:
        shown = _message(redact_exchange(obj, api_key))
    except RecursionError:   # embedded JSON text nested too deeply to redact
        return "(an error body nested too deeply to show)"
    shown = " ".join("".join(c if c.isprintable() else " " for c in shown).split())
    return shown if len(shown) <= MAX_ERROR_CHARS else shown[:MAX_ERROR_CHARS - 3] + "..."


def request_key(body: Mapping) -> str:
    """SHA-256 of the canonical JSON of a (redacted) request body."""
    raw = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class Recording:
    """Every exchange of a client, in order (thread-safe).

    Each exchange is a dict: ``seq`` (0-based), ``key`` (:func:`request_key`), ``request``
    and ``response`` (JSON text, redacted; response ``""`` when there was none),
    ``status`` (``ok``, ``incomplete`` or ``failed``), ``reason``, ``attempts`` (the HTTP
    status of each attempt, ``"timeout"`` for none, comma-separated).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self.exchanges: list[dict] = []

    def add(self, key: str, request: Mapping, result: "ChatResult") -> None:
        with self._lock:
            self.exchanges.append({
                "seq": len(self.exchanges), "key": key,
                "request": json.dumps(request, sort_keys=True, ensure_ascii=False),
                "response": ("" if result.response is None else
                             json.dumps(result.response, sort_keys=True, ensure_ascii=False)),
                "status": result.status, "reason": result.reason,
                "attempts": ",".join(map(str, result.attempts))})


class Replay:
    """Answers from a recording: the ``n``-th request with a given body gets the answer
    the ``n``-th such request got when recorded (so background reviews, whose order with
    the run's own requests may differ, replay too).

    Parameters
    ----------
    exchanges : iterable of Mapping
        As :attr:`Recording.exchanges` (read from a file: hostile).

    Raises
    ------
    ReplayError
        An exchange that is not as :class:`Recording` writes it, naming the field
        (``replay.<column>``) and the exchange: a missing column, a ``seq`` that is not a
        non-negative integer or repeats, a ``key`` that is not a SHA-256, a ``response``
        that is not ``""`` or JSON text of an object, a ``status`` not ``ok``,
        ``incomplete`` or ``failed``.
    """

    def __init__(self, exchanges):
        self._lock = threading.Lock()
        self._queues: dict[str, list] = {}
        checked, seqs = [], set()
        for i, ex in enumerate(exchanges):
            checked.append(_checked_exchange(i, ex, seqs))
        for ex in sorted(checked, key=lambda e: e["seq"]):
            self._queues.setdefault(ex["key"], []).append(ex)

    def take(self, key: str) -> "ChatResult":
        """The recorded answer to the next request with this key.

        Raises
        ------
        ReplayError
            The request is not in the recording (or was asked more often than recorded).
        """
        with self._lock:
            queue = self._queues.get(key)
            if not queue:
                raise ReplayError("replay", key[:16], "this request is not in the recording "
                                  "(the config, the code or the recording differ)")
            ex = queue.pop(0)
        attempts = tuple(int(a) if a.isdigit() else a
                         for a in str(ex["attempts"]).split(",") if a)
        return _result(ex["status"], ex["parsed"], ex["reason"], attempts)


_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
STATUSES = ("ok", "incomplete", "failed")


def _checked_exchange(i: int, ex, seqs: set) -> dict:
    """One recorded exchange, checked (see :class:`Replay`), its response parsed."""
    def bad(col, reason):
        raise ReplayError(f"replay.{col}", f"exchange {i}", reason)

    if not isinstance(ex, Mapping):
        bad("exchange", "must be a mapping of the recording's columns")
    for col in ("seq", "key", "response", "status", "reason", "attempts"):
        if col not in ex:
            bad(col, "missing")
    seq = ex["seq"]
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        bad("seq", "must be a non-negative integer")
    if seq in seqs:
        bad("seq", f"{seq} repeats")
    seqs.add(seq)
    if not isinstance(ex["key"], str) or not _KEY_RE.match(ex["key"]):
        bad("key", "must be the SHA-256 (64 hex digits) of a request")
    if ex["status"] not in STATUSES:
        bad("status", f"must be one of {STATUSES}")
    for col in ("reason", "attempts", "response"):
        if not isinstance(ex[col], str):
            bad(col, "must be text")
    parsed = None
    if ex["response"]:
        try:
            parsed = loads_unique(ex["response"])
        except DuplicateKeyError as exc:
            bad("response", f"not JSON text ({exc})")
        except (ValueError, RecursionError):
            bad("response", "not JSON text")
        if not isinstance(parsed, dict) or json_depth(parsed) > MAX_JSON_DEPTH:
            bad("response", f"must be a JSON object nested at most {MAX_JSON_DEPTH} levels")
    return {**ex, "parsed": parsed}


# ============================================================================ client

@dataclass(frozen=True)
class ChatResult:
    """One request's outcome.

    Attributes
    ----------
    status : {"ok", "incomplete", "failed"}
    response : dict or None
        The answer's JSON (redacted); None without one.
    reason : str
    attempts : tuple
        HTTP status of each attempt (``"timeout"`` for no answer).
    message : dict
        ``choices[0].message`` (empty when not ok: also when the reply was cut).
    prompt_tokens, completion_tokens : int
        ``usage`` of the answer (0 when absent or without an answer).
    """

    status: str
    response: dict | None = None
    reason: str = ""
    attempts: tuple = ()
    message: dict = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0


def _count(usage: Mapping, key: str) -> int:
    v = usage.get(key, 0) if isinstance(usage, Mapping) else 0
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _result(status: str, response, reason: str, attempts) -> ChatResult:
    """A :class:`ChatResult`, the message, the ``finish_reason`` of every choice
    (:func:`~dyna.loops.llm.wire.finish_status`) and the usage read from ``response``
    (hostile: a missing or odd field is a ``failed`` result, never an exception). The
    usage of an answer with a message counts also when the reply was cut, so a replayed
    result is the recorded one."""
    try:
        message = response["choices"][0]["message"]
        if not isinstance(message, dict):
            raise TypeError
    except (KeyError, IndexError, TypeError):
        if status != "ok":
            return ChatResult(status, response, reason, tuple(attempts))
        return ChatResult("failed", response, "malformed_response: no choices[0].message",
                          tuple(attempts))
    usage = response.get("usage") or {}
    tokens = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    if status == "ok":
        status, reason = finish_status(response)
    if status != "ok":
        return ChatResult(status, response, reason, tuple(attempts), {}, *tokens)
    return ChatResult("ok", response, reason, tuple(attempts), message, *tokens)


def _explained(raw: bytes, api_key: str) -> str:
    """``": <explanation>"`` from an error answer's body (:func:`~dyna.loops.llm.wire.
    error_text`), to end a failure's reason; "" when the body explains nothing."""
    text = error_text(raw, api_key)
    return f": {text}" if text else ""


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (a number or an HTTP date); None if absent
    or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:   # a negative or NaN delay is not a delay the server stated
        return seconds if seconds >= 0.0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class ChatClient:
    """Chat-completions requests to one :class:`Endpoint` (see the module docstring).

    Parameters
    ----------
    endpoint : Endpoint
    recording : Recording, optional
        Where every exchange goes (also when replaying).
    replay : Replay, optional
        Answer from this recording instead of the network.
    sleep : callable
        ``sleep(seconds)`` between retries (default :func:`time.sleep`).
    """

    def __init__(self, endpoint: Endpoint, *, recording: Recording | None = None,
                 replay: Replay | None = None, sleep: Callable[[float], None] = time.sleep):
        if not isinstance(endpoint, Endpoint):
            raise ConfigError("endpoint", endpoint, "must be an Endpoint")
        self.endpoint = endpoint
        self.recording = recording
        self.replay = replay
        self._sleep = sleep
        self._http = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the HTTP connection pool."""
        if self._http is not None:
            self._http.close()
            self._http = None

    def body(self, messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None,
             max_tokens: int | None = None, tool_choice=None) -> dict:
        """The redacted request body for ``messages`` (what is sent and recorded):
        ``tool_choice`` is sent when given (:func:`dyna.loops.llm.wire.tool_choice`),
        ``max_tokens`` under the endpoint's ``max_tokens_field``."""
        ep = self.endpoint
        body = {"model": ep.model, "messages": list(messages), "temperature": ep.temperature,
                "stream": False}
        if ep.seed is not None:
            body["seed"] = ep.seed
        if tools:
            body["tools"] = list(tools)
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
        if max_tokens is not None:
            body[ep.max_tokens_field] = int(max_tokens)
        return redact_exchange(body, ep.api_key())

    def chat(self, messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None,
             max_tokens: int | None = None, tool_choice=None) -> ChatResult:
        """Send one request (retrying as the module docstring says); never raises for
        what the server does. ``tool_choice`` (with ``tools``): ``"auto"``, ``"required"``
        or a named tool's object, sent as given.

        Returns
        -------
        ChatResult

        Raises
        ------
        ReplayError
            Replaying, and the request is not in the recording.
        """
        body = self.body(messages, tools, max_tokens, tool_choice)
        key = request_key(body)
        if self.replay is not None:
            result = self.replay.take(key)
        else:
            result = self._send(body)
        if result.status == "ok" and max_tokens is not None and \
                result.completion_tokens >= max_tokens:
            finish = result.response["choices"][0].get("finish_reason")
            result = dataclasses.replace(result, status="incomplete", message={},
                                         reason=limit_reason(int(max_tokens), finish))
        if self.recording is not None:
            self.recording.add(key, body, result)
        return result

    def _client(self):
        import httpx
        with self._lock:
            if self._http is None:
                self._http = httpx.Client(timeout=httpx.Timeout(self.endpoint.timeout))
            return self._http

    def _send(self, body: dict) -> ChatResult:
        import httpx
        ep = self.endpoint
        key = ep.api_key()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            parts = urlsplit(ep.base_url)
            if parts.scheme == "http" and not _is_loopback(parts.hostname or ""):
                raise ConfigError("base_url", ep.base_url,
                                  f"is plain http to another host: the key in "
                                  f"{ep.api_key_env} would travel unencrypted; use https "
                                  "(or a loopback address for a local server)")
            headers["Authorization"] = f"Bearer {key}"
        attempts: list = []
        n429 = n5xx = 0
        delay = ep.backoff
        while True:
            try:
                status, retry_after, raw = self._post(body, headers)
            except httpx.TimeoutException:
                attempts.append("timeout")
                return ChatResult("incomplete", None, f"timeout: no answer within "
                                  f"{ep.timeout:g} s", tuple(attempts))
            except httpx.HTTPError as exc:   # refused connection, protocol error, ...
                attempts.append("error")
                return ChatResult("failed", None, f"connection failed ({type(exc).__name__})",
                                  tuple(attempts))
            attempts.append(status)
            why = "" if status == 200 else _explained(raw, key)
            if status == 429:
                wait = _retry_after(retry_after)
                wait = 1.0 if wait is None else wait
                if n429 >= RETRIES_429:
                    return ChatResult("incomplete", None, f"rate_limited: 429 after "
                                      f"{RETRIES_429} retries{why}", tuple(attempts))
                if wait > ep.max_retry_after:
                    return ChatResult("incomplete", None, f"rate_limited: Retry-After "
                                      f"{wait:g} s > max_retry_after {ep.max_retry_after:g} s",
                                      tuple(attempts))
                n429 += 1
                log.info("429 from the endpoint; retrying in %.3g s (%d of %d)", wait, n429,
                         RETRIES_429)
                self._sleep(wait)
                continue
            if 500 <= status < 600:
                if n5xx >= RETRIES_5XX:
                    return ChatResult("failed", None, f"server_error: {status} after "
                                      f"{RETRIES_5XX} retries{why}", tuple(attempts))
                n5xx += 1
                log.info("%d from the endpoint; retrying in %.3g s (%d of %d)", status,
                         delay, n5xx, RETRIES_5XX)
                self._sleep(delay)
                delay *= 2
                continue
            if status != 200:
                return ChatResult("failed", None, f"http_error: {status}{why}",
                                  tuple(attempts))
            if raw is None:
                return ChatResult("failed", None, f"malformed_response: more than "
                                  f"{MAX_RESPONSE_BYTES} bytes", tuple(attempts))
            try:
                data = loads_unique(raw)
            except DuplicateKeyError as exc:   # which value counts differs between readers
                return ChatResult("failed", None, f"malformed_response: not JSON ({exc})",
                                  tuple(attempts))
            except (ValueError, RecursionError):
                return ChatResult("failed", None, "malformed_response: not JSON",
                                  tuple(attempts))
            if not isinstance(data, dict):
                return ChatResult("failed", None, "malformed_response: not a JSON object",
                                  tuple(attempts))
            if json_depth(data) > MAX_JSON_DEPTH:
                return ChatResult("failed", None, f"malformed_response: nested more than "
                                  f"{MAX_JSON_DEPTH} levels", tuple(attempts))
            try:
                data = redact_exchange(data, key)
            except RecursionError:   # embedded JSON text nested too deeply to redact
                return ChatResult("failed", None, "malformed_response: embedded JSON nested "
                                  "too deeply", tuple(attempts))
            return _result("ok", data, "", attempts)

    def _post(self, body: dict, headers: dict) -> tuple[int, str | None, bytes | None]:
        """One POST: ``(status, Retry-After header, body)``. The body is read in chunks:
        a 200 answer's whole (None when it exceeds :data:`MAX_RESPONSE_BYTES`), another
        answer's first :data:`~dyna.loops.llm.wire.MAX_ERROR_BYTES` only."""
        import httpx
        deadline = time.monotonic() + self.endpoint.timeout
        with self._client().stream("POST", self.endpoint.url, json=body,
                                   headers=headers) as r:
            error = r.status_code != 200
            chunks, n = [], 0
            for chunk in r.iter_bytes():
                n += len(chunk)
                if error and n >= MAX_ERROR_BYTES:
                    chunks.append(chunk)
                    break
                if n > MAX_RESPONSE_BYTES:
                    return 200, None, None
                if time.monotonic() > deadline:   # a trickle resets httpx's read timeout
                    raise httpx.ReadTimeout("the answer took longer than the timeout")
                chunks.append(chunk)
            raw = b"".join(chunks)
            if error:
                return r.status_code, r.headers.get("retry-after"), raw[:MAX_ERROR_BYTES]
            return 200, None, raw


def json_depth(obj) -> int:
    """Nesting depth of arrays and objects in parsed JSON (iterative: no recursion, so
    it measures what would overflow a recursive reader); 0 for a scalar."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            o = list(o.values())
        elif not isinstance(o, list):
            continue
        deepest = max(deepest, d)
        stack.extend((v, d + 1) for v in o if isinstance(v, (dict, list)))
    return deepest


