"""Fair use of a shared model server: bounds on the answers one chat and one person ask.

Each chat gives one answer at a time; a few more may wait behind it
(``KIMI_CHAT_QUEUE``), and one person (a signed-in user; in open mode, one browser)
may have at most ``KIMI_USER_ANSWERS`` answers running or waiting in all their tabs.
An answer beyond either bound is refused at once with a sentence (:class:`Busy`) and
never reaches the model server, so one tab sending hundreds of messages, or one person
opening many tabs, cannot queue the GPU for everybody else.

:class:`AnswerQueues` only counts; the UI (``ui/tasks.py``) takes a :class:`Place` for
every answer before it waits for the chat's turn and gives it back when the answer ends.
The counts are per process: with several UI workers (``--ui-workers``), HAProxy keeps a
browser on one worker, so a browser's bound holds; a user signed in from several
browsers on several workers gets the bound on each.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from backend.errors import ChatError
from backend.i18n import msg


class Busy(ChatError):
    """An answer refused because its chat or its person has as many as allowed already."""


@dataclass
class Place:
    """One answer's place in its chat's and its person's counts; :meth:`leave` once."""

    queues: AnswerQueues
    chat: str
    person: str
    left: bool = False

    def leave(self) -> None:
        """Give the place back (the answer ended, was stopped, or never started)."""
        if not self.left:
            self.left = True
            self.queues.release(self)


class AnswerQueues:
    """How many answers each chat and each person have running or waiting.

    Args:
        per_chat: answers one chat may have running or waiting (1 + ``KIMI_CHAT_QUEUE``).
        per_person: answers one person may have running or waiting in all chats
            (``KIMI_USER_ANSWERS``).
    """

    def __init__(self, per_chat: int, per_person: int) -> None:
        self.per_chat = per_chat
        self.per_person = per_person
        self._chats: Counter[str] = Counter()
        self._people: Counter[str] = Counter()

    def enter(self, chat: str, person: str) -> Place:
        """A place for one more answer of ``chat`` asked by ``person``.

        Raises:
            Busy: ``chat`` or ``person`` has as many answers running or waiting as allowed.
        """
        if self._chats[chat] >= self.per_chat:
            raise Busy(
                msg(
                    "This chat already has {count} answers running or waiting, the most it "
                    "may; this one was not asked. Wait for them, or press Stop.",
                    count=self._chats[chat],
                )
            )
        if self._people[person] >= self.per_person:
            raise Busy(
                msg(
                    "You already have {count} answers running or waiting in your chats, the "
                    "most one person may on this shared server; this one was not asked. Wait "
                    "for one to end.",
                    count=self._people[person],
                )
            )
        self._chats[chat] += 1
        self._people[person] += 1
        return Place(self, chat, person)

    def release(self, place: Place) -> None:
        """Take ``place`` out of the counts (use :meth:`Place.leave`)."""
        for counts, key in ((self._chats, place.chat), (self._people, place.person)):
            counts[key] -= 1
            if counts[key] <= 0:
                del counts[key]
