"""The lesson rules of the real-reviewer experiment (fixed before its run)."""

from types import SimpleNamespace

import pytest

from dyna.experiment.kinds.trajectories.lessons import (
    copied_share,
    junk_reason,
    lesson_text,
    misattributes,
    normalize,
    quotes_digest,
)

DIGEST = ('{"task": "Change my flight", "tool_calls": [{"name": "get_user_details", '
          '"args": {"user_id": "[REDACTED]"}, "output": "The user has 2 reservations and a '
          'gold membership with free checked bags"}, {"name": "update_reservation_flights",'
          ' "args": {"cabin": "economy"}, "output": "ok"}]}')
TOOLS = ("get_user_details", "update_reservation_flights")
ARGS = ("user_id", "cabin")


@pytest.mark.parametrize("text, why", [
    ("", "empty"),
    ("  \n ", "empty"),
    ("...", "empty"),
    ("value1", "placeholder"),
    ("Value 2", "placeholder"),
    ("the text", "placeholder"),
    ("TODO", "placeholder"),
    ("lorem ipsum", "placeholder"),
    ("get_user_details", "copied"),
    ("Change   my FLIGHT", "copied"),
    ("The user has 2 reservations and a gold membership (see above)", "copied"),
    ("Gold membership gives 2 free checked bags to the user", ""),
    ("Be careful with tools.", "not_concrete"),
    ("Always double check before acting", "not_concrete"),
    ("Call get_user_details before changing a flight", ""),
    ("Ask for the cabin first", ""),
    ("Gold members get 3 free bags", ""),
])
def test_junk_reason(text, why):
    assert junk_reason(text, DIGEST, TOOLS, ARGS) == why


def test_junk_tool_name_must_be_a_whole_word():
    text = "Before a booking use get_user_details_new"
    assert junk_reason(text, DIGEST, TOOLS, ARGS) == "not_concrete"


def test_quotes_digest():
    assert quotes_digest("get_user_details", DIGEST)
    assert quotes_digest("Note: the user has 2 reservations and a gold membership with it",
                         DIGEST)
    assert quotes_digest("The user has 2 reservations", DIGEST)
    assert not quotes_digest("Tell them: the user has 2 reservations, then stop", DIGEST)
    assert not quotes_digest("Check the membership before booking bags", DIGEST)
    assert not quotes_digest("", DIGEST)
    assert not quotes_digest("short", "")


def test_misattributes():
    assert misattributes("Call update_reservation_flights to change it", False, TOOLS)
    assert not misattributes("Call update_reservation_flights to change it", True, TOOLS)
    assert not misattributes("Do not call update_reservation_flights first", False, TOOLS)
    assert not misattributes("update_reservation_flights failed: check the cabin", False,
                             TOOLS)
    assert not misattributes("Ask the user for the cabin", False, TOOLS)


def test_normalize_and_lesson_text():
    assert normalize("  A\tB\n\nc ") == "a b c"
    memory = SimpleNamespace(kind="memory", text="fact 1")
    skill = SimpleNamespace(kind="skill", description="When x", body="Do 1")
    empty_body = SimpleNamespace(kind="skill", description="When x", body="")
    assert lesson_text(memory) == "fact 1"
    assert lesson_text(skill) == "When x\nDo 1"
    assert lesson_text(empty_body) == "When x"


def test_copied_share():
    assert copied_share("", DIGEST) == 0.0
    assert copied_share("get_user_details", DIGEST) == 1.0
    assert copied_share("abcd", "xxbcxx") == 0.5
    assert copied_share("The user has 2 reservations, call me", DIGEST) == 27 / 36
