"""Kind ``trajectories``: the ``[llm]`` reviewer, a chat-completions model instead of the
rule-based one, every exchange recorded and replayable.

The table (all keys optional but ``model`` when ``base_url`` is not ``"local"``)::

    [llm]
    base_url = "local"          # or http(s)://host/v1 of an OpenAI-compatible server
    model = "gemma-3-270m-q4_k_m"
    api_key_env = "OPENAI_API_KEY"   # the *name* of the key's variable, never the key
    temperature = 0.0
    seed = 0
    timeout = 120.0             # seconds per request
    max_new_tokens = 64         # completion tokens per request (the reply is cut there)
    review_max_tokens = 8000    # prompt + completion tokens per review
    review_max_turns = 2        # requests per review
    max_lessons = 1             # lessons asked for per run
    threads = 2                 # "local" only: the server's CPU threads
    n_ctx = 4096                # "local" only: the server's context window

``base_url = "local"`` starts :class:`dyna.llm_local.LocalServer` (Gemma 3 270M through
llama-cpp-python's server) for each job and stops it after; a replay starts nothing. The
reviewer is :class:`dyna.loops.llm.LLMReviewer` through a :class:`TimedClient`, which caps
each request's ``max_tokens`` at ``max_new_tokens`` and times each request, so that the
recording (``llm_exchanges``: the :class:`dyna.loops.llm.Recording` columns plus
``seconds``) replays the tables byte for byte, the seconds included.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from dyna.errors import ConfigError, check_range
from dyna.loops.llm import ChatClient, Endpoint, Recording, Replay

__all__ = ["EXCHANGE_COLUMNS", "LLM_DEFAULTS", "LOCAL", "TimedClient", "endpoint_of",
           "parse_llm_table"]

#: ``base_url`` that starts the local model server for each job.
LOCAL = "local"
#: The ``[llm]`` table's keys and defaults.
LLM_DEFAULTS = {"base_url": LOCAL, "model": None, "api_key_env": "OPENAI_API_KEY",
                "temperature": 0.0, "seed": 0, "timeout": 120.0, "max_new_tokens": 64,
                "review_max_tokens": 8000, "review_max_turns": 2, "max_lessons": 1,
                "threads": 2, "n_ctx": 4096}
#: Columns of the ``llm_exchanges`` table after ``variant`` and ``run``.
EXCHANGE_COLUMNS = ("seq", "key", "request", "response", "status", "reason", "attempts",
                    "seconds")
_PLACEHOLDER_URL = "http://127.0.0.1/v1"


def endpoint_of(llm: Mapping, base_url: str | None = None) -> Endpoint:
    """The :class:`~dyna.loops.llm.Endpoint` of a checked ``[llm]`` table (``base_url``
    replaces ``"local"`` by the started server's URL).

    Raises
    ------
    ConfigError
        As :class:`~dyna.loops.llm.Endpoint`.
    """
    url = base_url or (_PLACEHOLDER_URL if llm["base_url"] == LOCAL else llm["base_url"])
    return Endpoint(url, llm["model"], llm["api_key_env"], llm["temperature"], llm["seed"],
                    llm["timeout"])


def parse_llm_table(raw) -> dict:
    """Check a trajectories experiment's ``[llm]`` table (module docstring); the table
    with its defaults filled in (``model`` of ``"local"``: the local model's alias).

    Raises
    ------
    ConfigError
        Naming ``llm.<key>`` and the value: an unknown key (a key, token or password is
        never accepted: the key is read from the environment only), a bad URL, model,
        variable name or number, ``threads``/``n_ctx`` with a remote ``base_url``.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError("llm", raw, "must be a table")
    for k in raw:
        if k not in LLM_DEFAULTS:
            secret = any(w in str(k).lower() for w in ("key", "token", "password"))
            raise ConfigError(f"llm.{k}", "(not shown)" if secret else raw[k],
                              "unknown key" + ("; the API key is read only from the "
                                               "environment variable named by "
                                               "llm.api_key_env" if secret else ""))
    t = {**LLM_DEFAULTS, **raw}
    if t["base_url"] == LOCAL:
        from dyna.llm_local.model import MODEL_ALIAS
        t["model"] = MODEL_ALIAS if t["model"] is None else t["model"]
    elif "threads" in raw or "n_ctx" in raw:
        bad = "threads" if "threads" in raw else "n_ctx"
        raise ConfigError(f"llm.{bad}", raw[bad], 'only with base_url = "local"')
    if t["model"] is None:
        raise ConfigError("llm.model", None, "missing")
    try:
        endpoint_of(t)
    except ConfigError as exc:
        raise ConfigError(f"llm.{exc.field}", exc.value, exc.reason) from None
    for k, lo in (("max_new_tokens", 1), ("review_max_tokens", 1), ("review_max_turns", 1),
                  ("max_lessons", 1), ("threads", 1), ("n_ctx", 256)):
        check_range(f"llm.{k}", t[k], lo, None, integer=True)
    t["temperature"] = float(t["temperature"])
    t["timeout"] = float(t["timeout"])
    return t


class TimedClient(ChatClient):
    """A :class:`~dyna.loops.llm.ChatClient` whose requests ask for at most
    ``max_new_tokens`` completion tokens and are timed.

    Parameters
    ----------
    endpoint : Endpoint
    max_new_tokens : int
        Cap of every request's ``max_tokens`` (the reviewer asks for what is left of its
        whole-review budget, which is far more).
    recorded : iterable of Mapping, optional
        A recording to replay (rows of ``llm_exchanges``): the answers and the seconds
        each request took when recorded, so nothing is sent.

    Attributes
    ----------
    recording : Recording
        Every exchange, in order.
    seconds : list of float
        Wall-clock seconds of each exchange (recorded seconds when replaying), aligned with
        ``recording.exchanges``.
    """

    def __init__(self, endpoint: Endpoint, max_new_tokens: int, recorded=None):
        rows = None if recorded is None else sorted(recorded, key=lambda e: e["seq"])
        super().__init__(endpoint, recording=Recording(),
                         replay=None if rows is None else Replay(rows))
        self.max_new_tokens = check_range("max_new_tokens", max_new_tokens, 1, None,
                                          integer=True)
        self.seconds: list[float] = []
        self._recorded_seconds: dict[str, list[float]] = {}
        for ex in rows or ():
            self._recorded_seconds.setdefault(ex["key"], []).append(float(ex["seconds"]))

    def chat(self, messages, tools=None, max_tokens=None, **options):
        """:meth:`ChatClient.chat` with ``max_tokens`` capped at ``max_new_tokens`` (other
        keywords passed on as they are)."""
        cap = self.max_new_tokens if max_tokens is None else min(max_tokens,
                                                                 self.max_new_tokens)
        t0 = time.perf_counter()
        result = super().chat(messages, tools, cap, **options)
        elapsed = time.perf_counter() - t0
        if self.replay is not None:
            elapsed = self._recorded_seconds[self.recording.exchanges[-1]["key"]].pop(0)
        self.seconds.append(round(elapsed, 3))
        return result

    def exchanges(self) -> list[dict]:
        """The recorded exchanges, each with its ``seconds``."""
        return [{**ex, "seconds": s} for ex, s in zip(self.recording.exchanges, self.seconds)]
