"""Fair use of a shared box: bounds on the answers and uploads of one chat and one person.

Each chat gives one answer at a time; a few more may wait behind it
(``KIMI_CHAT_QUEUE``), and one person (a signed-in user; in open mode, one browser)
may have at most ``KIMI_USER_ANSWERS`` answers running or waiting in all their tabs.
An answer beyond either bound is refused at once with a sentence (:class:`Busy`) and
never reaches the model server, so one tab sending hundreds of messages, or one person
opening many tabs, cannot queue the GPU for everybody else. Uploads are bounded the same
way, in bytes (:class:`UploadRoom`): ``KIMI_UPLOAD_SESSION_MB`` per chat session,
``KIMI_UPLOAD_USER_MB`` per person; a file beyond is refused before a byte of it is read
(:class:`NoRoom`), so a tab cannot fill the disk with files it never sends.

:class:`AnswerQueues` and :class:`UploadRoom` only count; the UI takes a :class:`Place`
for every answer before it waits for the chat's turn (``ui/tasks.py``) and for every upload
before Chainlit reads it (``ui/security.py``), and gives it back when that ends.
The counts are per process: with several UI workers (``--ui-workers``), HAProxy keeps a
browser on one worker, so a browser's bound holds; a user signed in from several
browsers on several workers gets the bound on each.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Container
from dataclasses import dataclass

from backend.errors import ChatError
from backend.i18n import msg


class Busy(ChatError):
    """An answer refused because its chat or its person has as many as allowed already."""


class NoRoom(ChatError):
    """An upload refused because its chat or its person holds as many bytes as allowed."""


@dataclass
class Place:
    """What one answer or one upload adds to its chat's and its person's counts
    (``amount``: 1 answer, or bytes); :meth:`leave` once."""

    tally: Tally
    chat: str
    person: str
    amount: int
    left: bool = False

    def leave(self) -> None:
        """Give the place back (the answer ended, was stopped, or never started; the
        upload was stored, where its chat's files count it, or failed)."""
        if not self.left:
            self.left = True
            self.tally.remove(self)


class Tally:
    """Amounts counted per chat and per person, each taken back by its :class:`Place`."""

    def __init__(self) -> None:
        self.chats: Counter[str] = Counter()
        self.people: Counter[str] = Counter()

    def add(self, chat: str, person: str, amount: int) -> Place:
        """Count ``amount`` for ``chat`` and ``person``; the place gives it back."""
        self.chats[chat] += amount
        self.people[person] += amount
        return Place(self, chat, person, amount)

    def remove(self, place: Place) -> None:
        """Take ``place`` out of the counts (use :meth:`Place.leave`)."""
        for counts, key in ((self.chats, place.chat), (self.people, place.person)):
            counts[key] -= place.amount
            if counts[key] <= 0:
                del counts[key]


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
        self.last_entered = -math.inf
        """``time.monotonic()`` of the last :meth:`enter` (-inf: none yet)."""
        self._tally = Tally()

    def enter(self, chat: str, person: str) -> Place:
        """A place for one more answer of ``chat`` asked by ``person``.

        Raises:
            Busy: ``chat`` or ``person`` has as many answers running or waiting as allowed.
        """
        self.last_entered = time.monotonic()
        in_chat, of_person = self._tally.chats[chat], self._tally.people[person]
        if in_chat >= self.per_chat:
            raise Busy(
                msg(
                    "This chat already has {count} answers running or waiting, the most it "
                    "may; this one was not asked. Wait for them, or press Stop.",
                    count=in_chat,
                )
            )
        if of_person >= self.per_person:
            raise Busy(
                msg(
                    "You already have {count} answers running or waiting in your chats, the "
                    "most one person may on this shared server; this one was not asked. Wait "
                    "for one to end.",
                    count=of_person,
                )
            )
        return self._tally.add(chat, person, 1)


class UploadRoom:
    """Bytes of uploads each chat session and each person may hold, stored or on the way.

    An upload is counted from its request's declared size as it starts arriving (so
    uploads sent at once cannot all pass one check), and, once stored (:meth:`keep`), until
    its chat session ends: Chainlit keeps a session's uploads on disk until then, sent or
    not. Files the app itself shows (a starter's sample, a resumed chat's photos) are not
    uploads and do not count.

    Args:
        per_chat: bytes one chat session may hold (``KIMI_UPLOAD_SESSION_MB`` x 10^6).
        per_person: bytes one person may hold in all their chats (``KIMI_UPLOAD_USER_MB``
            x 10^6).
    """

    def __init__(self, per_chat: int, per_person: int) -> None:
        self.per_chat = per_chat
        self.per_person = per_person
        self._arriving = Tally()
        self._kept = Tally()
        self._kept_places: dict[str, list[Place]] = {}

    def enter(self, chat: str, person: str, size: int, live: Container[str]) -> Place:
        """A place for an upload of ``size`` bytes into ``chat`` by ``person``; give it to
        :meth:`keep` once the upload is stored, or leave it if it failed. ``live``: the
        chat sessions that still exist (what ended ones kept is forgotten).

        Raises:
            NoRoom: the upload would take the chat or the person past their bound.
        """
        for ended in [c for c in self._kept_places if c not in live]:
            for place in self._kept_places.pop(ended):
                place.leave()
        in_chat = self._kept.chats[chat] + self._arriving.chats[chat] + size
        of_person = self._kept.people[person] + self._arriving.people[person] + size
        if in_chat > self.per_chat:
            raise NoRoom(
                msg(
                    "This file would take this chat's uploads past the {limit:g} MB one chat "
                    "may hold; it was not uploaded. Start a new chat for more files.",
                    limit=self.per_chat / 1_000_000,
                )
            )
        if of_person > self.per_person:
            raise NoRoom(
                msg(
                    "This file would take your uploads past the {limit:g} MB one person may "
                    "hold in all their open chats; it was not uploaded. Close chats you no "
                    "longer need, then try again.",
                    limit=self.per_person / 1_000_000,
                )
            )
        return self._arriving.add(chat, person, size)

    def keep(self, place: Place) -> None:
        """The upload of ``place`` (from :meth:`enter`) was stored: it counts until its
        chat session ends."""
        if place.left:
            return
        place.leave()
        kept = self._kept.add(place.chat, place.person, place.amount)
        self._kept_places.setdefault(place.chat, []).append(kept)
