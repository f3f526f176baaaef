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
The counts here are per process; with a store (sign-in on), :class:`AnswerQueues` and a
person's upload bytes in :class:`UploadRoom` are counted through it as well
(:attr:`AnswerQueues.shared`, :attr:`UploadRoom.shared`:
:class:`backend.store.bounds.Leases`), so every worker and host sharing the store counts
together.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Protocol

from backend.errors import ChatError
from backend.i18n import msg


class Busy(ChatError):
    """An answer refused because its chat or its person has as many as allowed already."""


class TooLong(ChatError):
    """A message refused because it has more characters than one message may."""


def check_message_length(text: str, limit_chars: int) -> None:
    """Refuse ``text`` if it has more than ``limit_chars`` characters.

    Raises:
        TooLong: it has; the sentence names both numbers.
    """
    if len(text) > limit_chars:
        raise TooLong(
            msg(
                "This message has {count:,} characters; one message may have at most {limit:,}. "
                "It was not sent: shorten it or split it.",
                count=len(text),
                limit=limit_chars,
            )
        )


class NoRoom(ChatError):
    """An upload refused because its chat or its person holds as many bytes as allowed."""


class StoreFull(ChatError):
    """A message refused because its person's stored chats would hold more than allowed."""


def check_stored(held: int, adding: int, limit: int) -> None:
    """Refuse a message of ``adding`` bytes (its text and files) from a person whose stored
    chats hold ``held`` bytes, where they may hold ``limit`` (``KIMI_USER_STORE_MB``).

    Raises:
        StoreFull: ``held + adding`` is over ``limit``; the sentence says both in MB and
            what to do.
    """
    if held + adding > limit:
        raise StoreFull(
            msg(
                "Your stored chats hold {held:.1f} MB, and with this message they would "
                "pass the {limit:g} MB one person may keep on this server. It was not sent "
                "or stored: delete chats you no longer need, then send it again.",
                held=held / 1_000_000,
                limit=limit / 1_000_000,
            )
        )


@dataclass
class Place:
    """What one answer or one upload adds to its chat's and its person's counts
    (``amount``: 1 answer, or bytes); :meth:`leave` once."""

    tally: Tally
    chat: str
    person: str
    amount: int
    left: bool = False
    gone: Callable[[], None] | None = None
    """Called once the place is left: gives back what it holds in a store, if anything."""

    def leave(self) -> None:
        """Give the place back (the answer ended, was stopped, or never started; the
        upload was stored, where its chat's files count it, or failed)."""
        if not self.left:
            self.left = True
            self.tally.remove(self)
            if self.gone is not None:
                self.gone()


class Leaving(Protocol):
    """A place held for one answer: a :class:`Place` here, or a lease in the store
    (:class:`backend.store.bounds.Lease`)."""

    def leave(self) -> None:
        """Give the place back; once."""


class SharedUploads(Protocol):
    """Upload bytes counted for every process that shares a store
    (:class:`backend.store.bounds.Leases`)."""

    async def hold(
        self, chat: str, person: str, size: int, fits: Callable[[int, int], None]
    ) -> Callable[[], None]:
        """Hold ``size`` bytes once ``fits(chat's, person's)`` has not raised; returns what
        gives them back."""


class SharedAnswers(Protocol):
    """Answers counted for every process that shares a store
    (:class:`backend.store.bounds.Leases`)."""

    async def confirm(
        self, chat: str, person: str, released: Callable[[], None] = lambda: None
    ) -> Leaving | None:
        """A lease for one more answer; None while the store cannot be asked (this
        process's count stands alone); :class:`Busy` when every process's answers together
        are at a bound. ``released``: called once a granted lease, left, no longer counts
        in the store."""


class Confirming:
    """One answer's place counted in this process, whose lease in the shared store is
    being taken meanwhile (a task), so that the model request need not wait for the
    store's transaction: the answer is refused (:meth:`confirmed` raises :class:`Busy`)
    before its first words are drawn if the store finds its person or chat at a bound.

    :meth:`leave` once. The place counts in this process until its lease no longer counts
    in the store (a lease granted after :meth:`leave` is given back as it arrives), so this
    process never admits an answer the store would refuse for its own leases: a message
    it admits is not refused after Chainlit stored it (issue 52 item 5)."""

    def __init__(self, place: Place, lease: asyncio.Task[Leaving | None]) -> None:
        self.place = place
        self.lease = lease
        self.left = False
        lease.add_done_callback(self._settled)

    async def confirmed(self) -> None:
        """Wait for the store's answer.

        Raises:
            Busy: the store refused the lease (another worker holds the rest).
        """
        await asyncio.shield(self.lease)

    def _granted(self) -> Leaving | None:
        if self.lease.cancelled() or self.lease.exception() is not None:
            return None
        return self.lease.result()

    def _settled(self, _: object) -> None:
        granted = self._granted()  # also marks a refusal as seen
        if self.left:
            self._give_back(granted)

    def _give_back(self, granted: Leaving | None) -> None:
        if granted is None:
            self.place.leave()
        else:  # the lease's release leaves the place (``released`` of SharedAnswers.confirm)
            granted.leave()

    def leave(self) -> None:
        """Give the place back: at once where the store holds no lease for it, else once
        the store lets the lease go."""
        if self.left:
            return
        self.left = True
        if self.lease.done():
            self._give_back(self._granted())


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
        """``time.monotonic()`` of the last :meth:`take` (-inf: none yet)."""
        self.shared: SharedAnswers | None = None
        """Where the counts live when a store is shared (None: in this process)."""
        self._tally = Tally()

    async def take(self, chat: str, person: str) -> Leaving:
        """A place for one more answer of ``chat`` asked by ``person``, counted in this
        process (:meth:`enter`: a refusal here is certain, as every answer counted here is
        counted in the store too); with :attr:`shared`, a :class:`Confirming` place whose
        lease in the store is taken in a task, off the path to the model request.

        Raises:
            Busy: ``chat`` or ``person`` has as many answers running or waiting as allowed
                in this process.
        """
        place = self.enter(chat, person)
        if self.shared is None:
            return place
        lease = self.shared.confirm(chat, person, released=place.leave)
        return Confirming(place, asyncio.create_task(lease))

    def check(self, in_chat: int, of_person: int) -> None:
        """Refuse one more answer where its chat has ``in_chat`` and its person
        ``of_person`` answers running or waiting.

        Raises:
            Busy: either is at its bound; the sentence says which.
        """
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

    def enter(self, chat: str, person: str) -> Place:
        """A place for one more answer of ``chat`` asked by ``person``, counted in this
        process (open mode; with a store, :class:`backend.store.bounds.Leases`).

        Raises:
            Busy: ``chat`` or ``person`` has as many answers running or waiting as allowed.
        """
        self.last_entered = time.monotonic()
        self.check(self._tally.chats[chat], self._tally.people[person])
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
        self.shared: SharedUploads | None = None
        """Where a person's uploads are also counted when a store is shared (None: only
        in this process)."""

    async def take(self, chat: str, person: str, size: int, live: Container[str]) -> Place:
        """:meth:`enter`, and with :attr:`shared` the person's uploads in every process
        sharing the store counted as well.

        Raises:
            NoRoom: the upload would take the chat or the person past their bound.
        """
        place = self.enter(chat, person, size, live)
        if self.shared is not None:
            try:
                place.gone = await self.shared.hold(chat, person, size, self._fits(size))
            except NoRoom:
                place.leave()
                raise
        return place

    def _fits(self, size: int) -> Callable[[int, int], None]:
        def fits(_in_chat: int, of_person: int) -> None:
            if of_person + size > self.per_person:
                raise self._person_full()

        return fits

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
            raise self._person_full()
        return self._arriving.add(chat, person, size)

    def _person_full(self) -> NoRoom:
        return NoRoom(
            msg(
                "This file would take your uploads past the {limit:g} MB one person may "
                "hold in all their open chats; it was not uploaded. Close chats you no "
                "longer need, then try again.",
                limit=self.per_person / 1_000_000,
            )
        )

    def keep(self, place: Place) -> None:
        """The upload of ``place`` (from :meth:`enter` or :meth:`take`) was stored: it
        counts until its chat session ends."""
        if place.left:
            return
        gone, place.gone = place.gone, None
        place.leave()
        kept = self._kept.add(place.chat, place.person, place.amount)
        kept.gone = gone
        self._kept_places.setdefault(place.chat, []).append(kept)
