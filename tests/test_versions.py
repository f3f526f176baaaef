"""Versions of turns (backend/versions.py): Regenerate and Edit keep every version, and
the branch shown is the one chosen last at each place."""

from __future__ import annotations

import pytest

from backend.conversation import Turn
from backend.versions import Versions


def four_turns() -> Versions:
    """A chat of four turns, q1..q4, each following the one before."""
    versions = Versions()
    parent = None
    for n in range(1, 5):
        versions.add(f"q{n}", Turn(text=f"question {n}"), parent)
        parent = f"q{n}"
    return versions


def keys(versions: Versions) -> list[str]:
    return [v.key for v in versions.branch()]


def test_a_chat_that_never_forked_is_one_branch_of_only_versions() -> None:
    versions = four_turns()
    assert keys(versions) == ["q1", "q2", "q3", "q4"]
    assert [versions.place(k) for k in keys(versions)] == [(1, 1)] * 4
    assert versions.last() == "q4"


def test_a_new_version_of_turn_two_is_shown_and_keeps_the_later_turns_of_the_first() -> None:
    versions = four_turns()
    versions.add("q2b", Turn(text="question 2"), "q1")
    assert keys(versions) == ["q1", "q2b"]
    assert versions.place("q2b") == (2, 2)
    assert versions.place("q2") == (1, 2)

    versions.choose("q2")  # ‹ : back to the first version, with its later turns
    assert keys(versions) == ["q1", "q2", "q3", "q4"]
    versions.choose("q2b")  # › : the new version, which has no later turns yet
    assert keys(versions) == ["q1", "q2b"]


def test_each_version_keeps_the_branch_it_was_left_on() -> None:
    versions = four_turns()
    versions.add("q3b", Turn(text="question 3, edited"), "q2")  # an edit of turn 3
    versions.add("q2b", Turn(text="question 2"), "q1")  # then Regenerate on turn 2
    versions.add("q3c", Turn(text="question 3 again"), "q2b")
    versions.choose("q2")
    assert keys(versions) == ["q1", "q2", "q3b"]  # turn 3's edit, as it was left
    versions.choose("q3")
    assert keys(versions) == ["q1", "q2", "q3", "q4"]
    versions.choose("q2b")
    assert keys(versions) == ["q1", "q2b", "q3c"]


def test_stored_choices_come_back_whatever_order_they_were_made_in() -> None:
    versions = Versions()
    versions.add("q1", Turn(text="1"), None, chosen=1)
    versions.add("q2", Turn(text="2"), "q1", chosen=9)  # chosen again after q2b was made
    versions.add("q2b", Turn(text="2"), "q1", chosen=3)
    assert keys(versions) == ["q1", "q2"]
    versions.add("q2c", Turn(text="2"), "q1")  # a new version comes after every choice
    assert keys(versions) == ["q1", "q2c"]
    assert versions.place("q2c") == (3, 3)


def test_a_turn_is_found_by_identity_and_keys_are_checked() -> None:
    versions = four_turns()
    turn = versions["q3"].turn
    assert versions.key_of(turn) == "q3"
    assert versions.key_of(Turn(text="question 3")) is None  # equal text, other turn
    with pytest.raises(ValueError, match="already"):
        versions.add("q3", Turn(text="x"), "q2")
    with pytest.raises(ValueError, match="not in this chat"):
        versions.add("q9", Turn(text="x"), "nope")
