"""An OpenAI-compatible chat-completions client, and the reviewer that uses it.

- :mod:`dyna.loops.llm.client`: :class:`Endpoint` (where and how to ask; the *name* of the
  API key's variable, never the key), :class:`ChatClient` (one request at a time, its
  retry rules, every exchange redacted and recorded in a :class:`Recording`, or answered
  from a :class:`Replay` without any network), :func:`redact_exchange`, :func:`json_depth`;
- :mod:`dyna.loops.llm.reviewer`: :class:`LLMReviewer`, a
  :class:`dyna.loops.review.Reviewer` that sends the digest of a finished run to the model
  with exactly one tool (:data:`MEMORY_TOOL` or :data:`SKILL_TOOL`) and turns its tool
  calls into proposals the loop validates and grades like any other;
- :mod:`dyna.loops.llm.wire`: what the wire format says beyond the message
  (``finish_reason``, error bodies, :data:`TOOL_CHOICES`, :data:`TOKEN_FIELDS`).
"""

from dyna.loops.llm.client import (API_KEY_SUFFIXES, MAX_JSON_DEPTH, MAX_RESPONSE_BYTES,
                                   MIN_SCRUBBED_KEY, REDACTED_MARK, STATUSES, ChatClient,
                                   ChatResult, Endpoint, Recording, Replay, ReplayError,
                                   json_depth, redact_exchange, request_key)
from dyna.loops.llm.reviewer import (LIMITS, MAX_TRIGGERS, MEMORY_TOOL, NOTHING_LEARNED,
                                     REVIEWER_PROMPT, SKILL_TOOL, LLMReviewer)
from dyna.loops.llm.wire import TOKEN_FIELDS, TOOL_CHOICES

__all__ = ["API_KEY_SUFFIXES", "ChatClient", "ChatResult", "Endpoint", "LIMITS", "LLMReviewer",
           "MAX_JSON_DEPTH", "MAX_RESPONSE_BYTES", "MAX_TRIGGERS", "MEMORY_TOOL",
           "MIN_SCRUBBED_KEY", "NOTHING_LEARNED", "REDACTED_MARK", "REVIEWER_PROMPT",
           "Recording", "Replay", "ReplayError", "SKILL_TOOL", "STATUSES", "TOKEN_FIELDS",
           "TOOL_CHOICES", "json_depth", "redact_exchange", "request_key"]
