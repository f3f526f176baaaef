"""Preparing one message's uploads for the model, off the event loop, in bounded workers.

:func:`prepare_uploads` turns the files a person attached (:class:`Upload`) into
prepared images (:mod:`backend.images`), PDF pages (:mod:`backend.documents`) and
video frames (:mod:`backend.video`), with a sentence for each file that could not
be used. Decoding runs in a :class:`MediaWorkers` pool that the app owns: as many
threads as cores, not asyncio's default pool of up to 32, so a message of twelve
64-megapixel PNGs decodes two at a time on two cores instead of all at once.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from backend.errors import ImageError
from backend.i18n import msg
from backend.images import PreparedImage, prepare_image, release_kept_blocks
from backend.logs import LOGGER_NAME
from backend.media import MEDIA_CONTEXT_SHARE, MediaBudget, MediaResult
from backend.upload_kinds import sniff_kind

log = logging.getLogger(LOGGER_NAME)

T = TypeVar("T")


def _malloc_trim() -> Callable[[], None]:
    """glibc's ``malloc_trim(0)``, which hands freed heap pages back to the system.

    Decoding a large image leaves hundreds of MB freed but still mapped by the C
    allocator; without a trim the process keeps that RSS (measured: 1.4-1.8 GB
    after twelve 64 MP PNGs). A no-op where the C library has no such function.
    """
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return lambda: None

    def call() -> None:
        trim(0)

    return call


MMAP_THRESHOLD_BYTES = 128 * 1024
"""Blocks at least this big get their own mapping from the C allocator (glibc's
``M_MMAP_THRESHOLD``), so freeing one hands its memory back to the system."""

_M_MMAP_THRESHOLD = -3  # glibc malloc.h


def hand_back_large_blocks(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Make glibc map blocks of ``threshold`` bytes or more on their own; True if set.

    glibc raises its threshold to the largest block freed so far (up to 32 MB), so
    after a few large images every prepared image and data URL comes from the heap
    and stays in the process's RSS once freed. Measured with bench/bench_load.py's
    ``tabs`` mode (300 tabs, each a 1.47 MB photo, then 90 s): 610 MB RSS with the
    default, 223 MB with a fixed 128 KiB threshold (the ``MALLOC_MMAP_THRESHOLD_``
    variable has the same effect). A no-op where the C library has no ``mallopt``.
    """
    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold)) if mallopt is not None else False


class MediaWorkers:
    """The process's pool of media-decoding threads; one owner, the app (or the CLI).

    Args:
        workers: threads; default one per core (``os.cpu_count()``).

    Use :meth:`run` to call a blocking function in the pool; :meth:`close` at stop.
    After :meth:`close`, :meth:`run` raises ``RuntimeError`` (a programming error:
    nothing should prepare uploads once the app stops).
    """

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="media")
        self._trim = _malloc_trim()
        self._busy = 0
        self._idle_since = time.monotonic()

    async def run(self, function: Callable[..., T], *args: object, **kwargs: object) -> T:
        """Run ``function(*args, **kwargs)`` in a worker thread and return its result."""
        loop = asyncio.get_running_loop()
        self._busy += 1
        try:
            return await loop.run_in_executor(self._pool, lambda: function(*args, **kwargs))
        finally:
            self._busy -= 1
            if not self._busy:
                self._idle_since = time.monotonic()

    def release_memory(self) -> None:
        """Hand freed decode memory back to the system (after a message's media)."""
        self._trim()

    async def release_when_idle(self, idle_s: float) -> bool:
        """Hand freed memory back, and Pillow's kept blocks too once no media has been
        prepared for ``idle_s`` seconds (they speed up a burst of photos, then would stay
        in the RSS for good: :data:`backend.images.FREED_BLOCKS_KEPT`). True if the
        blocks went. Runs in the pool, but does not count as media work.
        """
        idle = not self._busy and time.monotonic() - self._idle_since >= idle_s

        def release() -> None:
            if idle:
                release_kept_blocks()
            self._trim()

        await asyncio.get_running_loop().run_in_executor(self._pool, release)
        return idle

    def close(self) -> None:
        """Stop the threads (waits for running work to finish)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True, slots=True)
class Upload:
    """A file the person attached: its display name and where it lies on disk."""

    name: str
    path: Path


@dataclass(frozen=True, slots=True)
class UploadResult:
    """Prepared images, one sentence per file that could not be used, and remarks.

    ``notices`` are about files that were used but changed in a way the person
    should know (only the first frame of an animated GIF, pages left out of a
    PDF, say). ``texts`` are lines for the model about PDFs and videos (which
    pages, the frames' timestamps), in upload order: see :meth:`message_text`.
    """

    images: list[PreparedImage]
    problems: list[str]
    notices: list[str]
    texts: list[str] = field(default_factory=list)

    def message_text(self, typed: str) -> str:
        """The text to send: :attr:`texts`, one per line, before what the person typed."""
        return "\n".join([*self.texts, typed]) if self.texts else typed


@dataclass(frozen=True, slots=True)
class UploadLimits:
    """What one message's pictures may take.

    Attributes:
        in_token_limit: the served model's budget per image in 14x14 patches.
        images_per_prompt: the server's image limit per request.
        max_model_len: the server's max model length in tokens.
        max_bytes: the largest accepted file in bytes.
    """

    in_token_limit: int
    images_per_prompt: int
    max_model_len: int
    max_bytes: int


MAX_PREFETCHED = 16
"""Images one chat may hold prepared ahead of sending (about 1.4 MB each for a photo):
attachments removed from the message box are never announced, so what is held is bounded;
the oldest goes first, and is prepared again if its message is sent after all."""


class Prefetched:
    """Images being prepared before their message is sent (preparation starts on upload).

    Keyed by the upload's path; each entry remembers the limits it was made for,
    and is made again for other limits. At most ``limit`` entries, the oldest
    dropped first. Owned by one chat: it clears them when a message is sent (what
    that message did not use was removed before sending) and when the chat ends.
    """

    def __init__(self, limit: int = MAX_PREFETCHED) -> None:
        self.limit = limit
        self._tasks: dict[Path, tuple[UploadLimits, asyncio.Task[PreparedImage]]] = {}

    def start(self, upload: Upload, limits: UploadLimits, workers: MediaWorkers) -> bool:
        """Start preparing ``upload`` if it is an image; True if started (or already)."""
        found = self._tasks.get(upload.path)
        if found is not None and found[0] == limits:
            return True
        if found is not None:
            self._tasks.pop(upload.path)[1].cancel()  # made for other limits (another model)
        if not sniff_kind(upload.path).prepared_early:
            return False  # PDFs and videos depend on what else the message holds
        while len(self._tasks) >= self.limit:
            self._tasks.pop(next(iter(self._tasks)))[1].cancel()
        self._tasks[upload.path] = (limits, _preparing(upload, limits, workers))
        return True

    def claim(
        self, upload: Upload, limits: UploadLimits, workers: MediaWorkers
    ) -> asyncio.Task[PreparedImage]:
        """The preparation of image ``upload`` for ``limits`` (removed from here): the one
        started early if it was made for them, else one started now."""
        found = self._tasks.pop(upload.path, None)
        if found is not None and found[0] == limits:
            return found[1]
        if found is not None:
            found[1].cancel()
        return _preparing(upload, limits, workers)

    async def problem(self, path: Path) -> str | None:
        """Wait for the preparation started for ``path`` and say why it cannot be used (its
        :class:`~backend.errors.ImageError` message; the entry is dropped), or None: it
        can, nothing was started, or it failed otherwise (said again when it is sent).
        The preparation itself is never cancelled by the wait being cancelled."""
        found = self._tasks.get(path)
        if found is None:
            return None
        task = found[1]
        try:
            await asyncio.shield(task)
        except ImageError as error:
            if self._tasks.get(path) is found:
                del self._tasks[path]
            return error.message
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # the wait itself was cancelled
        except Exception:
            return None  # said when its message is sent
        return None

    async def prepared(self, path: Path) -> PreparedImage | None:
        """Wait for the preparation started for ``path`` and return its image; None if
        nothing was started or it failed (its failure is said by :meth:`problem` or when
        its message is sent). The preparation is never cancelled by the wait."""
        found = self._tasks.get(path)
        if found is None:
            return None
        task = found[1]
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # the wait itself was cancelled
            return None
        except Exception:
            return None

    def clear(self) -> None:
        """Cancel and forget everything not yet sent (the chat ended)."""
        for _, task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    def __len__(self) -> int:
        return len(self._tasks)


Outcome = PreparedImage | MediaResult | BaseException
"""What preparing one upload gave: an image, a document's or video's frames, or a failure."""


async def prepare_uploads(
    uploads: Sequence[Upload],
    limits: UploadLimits,
    workers: MediaWorkers,
    prefetched: Prefetched | None = None,
) -> UploadResult:
    """Prepare uploaded images, PDFs and videos for the model, in ``workers``.

    Each file's kind is sniffed from its first bytes (:func:`backend.upload_kinds.sniff_kind`).
    Images are prepared in parallel, at most ``workers.workers`` at a time. PDFs and
    videos follow, one at a time, in upload order, each within what the message has
    left (:class:`backend.media.MediaBudget`): the image limit per request minus the
    images before it, and :data:`backend.media.MEDIA_CONTEXT_SHARE` of the max model
    length minus their tokens. Results keep the upload order. Never raises for a bad
    file: each one becomes a sentence in :attr:`UploadResult.problems`. Images whose
    preparation started on upload (``prefetched``) are not prepared again.
    """
    kinds = [sniff_kind(upload.path) for upload in uploads]  # reads 1 KB of each
    photos = [i for i, kind in enumerate(kinds) if kind.prepared_early]
    early = prefetched or Prefetched()
    started = [early.claim(uploads[i], limits, workers) for i in photos]
    prepared = await asyncio.gather(*started, return_exceptions=True)
    outcomes: dict[int, Outcome] = dict(zip(photos, prepared, strict=True))
    budget = MediaBudget(
        images=limits.images_per_prompt,
        tokens=int(MEDIA_CONTEXT_SHARE * limits.max_model_len),
        in_token_limit=limits.in_token_limit,
        max_bytes=limits.max_bytes,
    ).after([image for image in outcomes.values() if isinstance(image, PreparedImage)])
    for i, kind in enumerate(kinds):
        if not kind.prepared_early:
            try:
                media = await workers.run(kind.prepare, uploads[i].path, budget, uploads[i].name)
            except Exception as error:  # reported below with the others
                outcomes[i] = error
            else:
                outcomes[i] = media
                budget = budget.after(media.images)
    if uploads:
        await workers.run(workers.release_memory)
    return _collected(uploads, outcomes)


def _collected(uploads: Sequence[Upload], outcomes: dict[int, Outcome]) -> UploadResult:
    """The outcomes of ``uploads`` (by index) as one result, in upload order."""
    result = UploadResult([], [], [], [])
    for i, upload in enumerate(uploads):
        outcome = outcomes[i]
        if isinstance(outcome, PreparedImage):
            result.images.append(outcome)
            result.notices.extend(outcome.notices)
        elif isinstance(outcome, MediaResult):
            result.images.extend(outcome.images)
            result.notices.extend(outcome.notices)
            result.texts.append(outcome.text)
        elif isinstance(outcome, ImageError):
            # The decoder's own words are the operator's (app.log), not the person's.
            log.info("%s refused: %s (%r)", upload.name, outcome, outcome.__cause__)
            result.problems.append(outcome.message)  # a Message: the UI translates it
        else:
            log.error("preparing %s failed: %r", upload.name, outcome)
            result.problems.append(
                msg("{name}: could not be prepared; app.log has the details.", name=upload.name)
            )
    return result


def _preparing(
    upload: Upload, limits: UploadLimits, workers: MediaWorkers
) -> asyncio.Task[PreparedImage]:
    """Prepare image ``upload`` for ``limits`` in ``workers``, as a task."""
    work = workers.run(
        prepare_image, upload.path, limits.in_token_limit, upload.name, max_bytes=limits.max_bytes
    )
    return asyncio.ensure_future(work)
