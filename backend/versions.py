"""Versions of a chat's turns: a tree of turns, and the branch the person sees.

Regenerate and Edit never delete a turn: a regenerated answer or an edited question is a
new *version* of its turn, a sibling that follows the same earlier turns (its
``parent``), as in ChatGPT and Open WebUI. The later turns stay with the version they
followed. Each parent shows one of its versions: the one chosen last (``chosen``, a
number that only grows), so the branch on screen, and the one the model is asked with,
is :meth:`Versions.branch`. A chat that never forked is one branch, each turn the only
version of its place.

Keys are the store's turn keys (:attr:`backend.record.TurnRecord.message_id`): the
Chainlit id of the person's message for a turn asked in the composer, a fresh id for a
version made by Regenerate or Edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from backend.conversation import Turn

TURN_KEY: Final = "kimi_turn"
"""Metadata key of a person's message drawn again for a version (ui/versions_view.py): the
version's key, so a resumed chat, and the store (:mod:`backend.store.pages`), find the turn
of that message; a message without it is its turn's by its own id."""


@dataclass(eq=False)
class Version:
    """One version of a turn.

    Attributes:
        key: the turn's store key (unique in its chat).
        turn: its question, images, answer and reasoning.
        parent: the key of the turn it follows; None for a first turn.
        chosen: when it was last chosen (a number that grows with every choice in the
            chat); of a parent's versions, the highest is the one shown.
    """

    key: str
    turn: Turn
    parent: str | None
    chosen: int


class Versions:
    """The turns of one chat, every version of each, in the order they were made."""

    def __init__(self) -> None:
        self._nodes: dict[str, Version] = {}
        self._clock = 0

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def __getitem__(self, key: str) -> Version:
        return self._nodes[key]

    def __len__(self) -> int:
        return len(self._nodes)

    def add(self, key: str, turn: Turn, parent: str | None, chosen: int | None = None) -> Version:
        """Add ``turn`` as a version following ``parent``; it is the one shown there unless
        ``chosen`` (a stored choice, when a chat is read back) says otherwise.

        Raises:
            ValueError: ``key`` is taken, or ``parent`` is not a turn of this chat.
        """
        if key in self._nodes:
            raise ValueError(f"turn {key!r} is already in this chat")
        if parent is not None and parent not in self._nodes:
            raise ValueError(f"turn {parent!r} is not in this chat")
        if chosen is None:
            self._clock += 1
            chosen = self._clock
        self._clock = max(self._clock, chosen)
        version = Version(key, turn, parent, chosen)
        self._nodes[key] = version
        return version

    def choose(self, key: str) -> Version:
        """Show version ``key`` at its place (and the versions it was shown with after it).

        Raises:
            KeyError: no such turn.
        """
        version = self._nodes[key]
        self._clock += 1
        version.chosen = self._clock
        return version

    def branch(self) -> list[Version]:
        """The turns shown, first turn first: at each place the version chosen last."""
        shown: list[Version] = []
        parent: str | None = None
        while versions := self.siblings_under(parent):
            chosen = max(versions, key=lambda v: v.chosen)
            shown.append(chosen)
            parent = chosen.key
        return shown

    def siblings_under(self, parent: str | None) -> list[Version]:
        """The versions that follow ``parent`` (None: the first turns), oldest first."""
        return [v for v in self._nodes.values() if v.parent == parent]

    def siblings(self, key: str) -> list[Version]:
        """The versions of the place of ``key`` (itself included), oldest first."""
        return self.siblings_under(self._nodes[key].parent)

    def shown_at_place_of(self, key: str) -> Version | None:
        """The version shown at the place of version ``key`` (itself, if it is the one
        shown); None if ``key`` is unknown or its place is not on the branch shown."""
        version = self._nodes.get(key)
        if version is None:
            return None
        return next((v for v in self.branch() if v.parent == version.parent), None)

    def place(self, key: str) -> tuple[int, int]:
        """``(n, count)``: ``key`` is version ``n`` (from 1) of ``count`` at its place."""
        keys = [v.key for v in self.siblings(key)]
        return keys.index(key) + 1, len(keys)

    def neighbours(self, key: str) -> tuple[str, str]:
        """The keys of the versions before and after ``key`` at its place (‹ and ›),
        going round at either end (its own key twice when it is the only one)."""
        keys = [v.key for v in self.siblings(key)]
        at = keys.index(key)
        return keys[at - 1], keys[(at + 1) % len(keys)]

    def key_of(self, turn: Turn) -> str | None:
        """The key of ``turn``, if it is one of this chat's."""
        return next((v.key for v in self._nodes.values() if v.turn is turn), None)

    def last(self) -> str | None:
        """The key of the last turn shown, the one a new question follows."""
        shown = self.branch()
        return shown[-1].key if shown else None
