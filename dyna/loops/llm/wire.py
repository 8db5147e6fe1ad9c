"""What the chat-completions wire format says beyond the message: how a reply ended, what
an error answer explains, which tool the model must call, which field caps the tokens.

- :data:`FINISH_REASONS` and :func:`finish_status`: every choice's ``finish_reason``
  decides whether its message may be used. ``stop``, ``tool_calls`` and the legacy
  ``function_call``: the reply is whole (``ok``). ``length``: the reply was cut at the
  token limit, so a tool call in it is a fragment even when its arguments still parse
  (``incomplete``). ``content_filter``: the endpoint's filter withheld or cut the reply
  (``failed``). ``eos_token`` and ``stop_sequence``: the reply ended at the model's
  end-of-sequence token or at a stop sequence, as Hugging Face text-generation-inference
  says ``stop`` (``ok``). Any other value, or none: ``failed`` (``unknown_finish_reason``).
  A reply that used every new token asked for is cut too, whatever it says
  (:func:`limit_reason`).
- :data:`MAX_ERROR_BYTES` and :data:`MAX_ERROR_CHARS`: how much of a non-2xx answer's body
  is read, and how much of its text a failure's reason keeps
  (:func:`dyna.loops.llm.client.error_text` reads and redacts it).
- :data:`TOOL_CHOICES` and :func:`tool_choice`: the request's ``tool_choice``.
- :func:`assistant_turn`: a reply with tool calls as it is sent back in the conversation.
- :data:`TOKEN_FIELDS`: the request field that caps the new tokens (``max_tokens``, or
  ``max_completion_tokens``, which OpenAI's reasoning models require in its place).

Source: OpenAI's chat-completions API reference (``finish_reason``, ``tool_choice``,
``max_completion_tokens``; ``max_tokens`` is deprecated there but is what llama.cpp's
servers, vLLM and Ollama read); text-generation-inference's ``FinishReason`` enum
(``length``, ``eos_token``, ``stop_sequence``) for its extra values.
"""

from __future__ import annotations

from collections.abc import Mapping

from dyna.errors import ConfigError

__all__ = ["FINISH_REASONS", "MAX_ERROR_BYTES", "MAX_ERROR_CHARS", "TOKEN_FIELDS",
           "TOOL_CHOICES", "assistant_turn", "check_choice", "finish_status",
           "limit_reason", "tool_choice"]

#: ``finish_reason`` values and the status of a reply that ends so.
FINISH_REASONS = {"stop": "ok", "tool_calls": "ok", "function_call": "ok",
                  "length": "incomplete", "content_filter": "failed",
                  "eos_token": "ok", "stop_sequence": "ok"}
_FINISH_WHY = {
    "length": "length: the reply was cut at the token limit (finish_reason 'length'); a "
              "tool call in it is a fragment and is not used",
    "content_filter": "content_filter: the endpoint's content filter withheld or cut the "
                      "reply (finish_reason 'content_filter')"}
#: Bytes of an error answer's body that are read (the rest is never read).
MAX_ERROR_BYTES = 4096
#: Characters of an error answer's text kept in a failure's reason.
MAX_ERROR_CHARS = 300
#: ``tool_choice`` settings: the one offered tool by name (the model must call it),
#: ``auto`` (the model may answer without a call), ``required`` (it must call some tool).
TOOL_CHOICES = ("named", "auto", "required")
#: Request fields that cap the new tokens of a reply.
TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")


def finish_status(response: Mapping) -> tuple[str, str]:
    """``(status, reason)`` of an answer by the ``finish_reason`` of every choice: ``("ok",
    "")`` when all are whole, else the first cut one's (see the module docstring).

    Parameters
    ----------
    response : Mapping
        A parsed answer with a non-empty ``choices`` list (hostile: odd values are read
        as unknown, never raised).
    """
    for choice in response["choices"]:
        finish = choice.get("finish_reason") if isinstance(choice, Mapping) else None
        status = FINISH_REASONS.get(finish) if isinstance(finish, str) else None
        if status is None:
            return "failed", (f"unknown_finish_reason: {repr(finish)[:40]} (known: "
                              f"{', '.join(FINISH_REASONS)})")
        if status != "ok":
            return status, _FINISH_WHY[finish]
    return "ok", ""


def limit_reason(max_tokens: int, finish) -> str:
    """The reason of a reply that used all ``max_tokens`` new tokens asked for, ended by
    the server with ``finish`` (a server may say ``tool_calls`` of a call it cut)."""
    return (f"length: the reply used all {max_tokens} new tokens asked for (finish_reason "
            f"{repr(finish)[:40]}); a tool call in it is a fragment and is not used")


def check_choice(field: str, value) -> str:
    """``value`` if it is one of :data:`TOOL_CHOICES`.

    Raises
    ------
    ConfigError
        Naming ``field`` and the value.
    """
    if not isinstance(value, str) or value not in TOOL_CHOICES:
        raise ConfigError(field, value, f"must be one of {TOOL_CHOICES}")
    return value


def tool_choice(choice: str, tool_name: str):
    """The request's ``tool_choice`` for a :data:`TOOL_CHOICES` setting: ``"auto"``,
    ``"required"``, or ``{"type": "function", "function": {"name": tool_name}}``."""
    if choice == "named":
        return {"type": "function", "function": {"name": tool_name}}
    return check_choice("tool_choice", choice)


def assistant_turn(message: Mapping, calls: list) -> dict:
    """The assistant message that carries ``calls`` back to the model on the next turn.

    Its ``content`` is the reply's text, or ``""`` when the reply had none: the format
    allows ``null`` beside tool calls, but llama-cpp-python's server refuses an assistant
    message whose content is ``null``. The legacy ``function_call`` field is not carried.
    """
    content = message.get("content")
    return {"role": "assistant", "content": content if isinstance(content, str) else "",
            "tool_calls": calls}
