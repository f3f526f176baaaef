"""Stored files by object key: :class:`Files`, the interface; :class:`FileStore`, a folder
(``KIMI_DATA_DIR/files/``, local or a shared volume); :mod:`backend.store.s3`, a bucket.

An object key is a relative path of safe segments (``user/element/photo.jpg``).
:func:`safe_key` makes one from any name: characters other than letters,
digits, ``.``, ``-`` and ``_`` become ``_``, and no segment may be empty, ``.``
or ``..``, so a key can never point outside the folder. Writes go to a temporary
file that is then renamed over the target (atomic on POSIX), so a crash never
leaves half a file under a key. Files are made ``0600`` and folders ``0700``
(:data:`FILE_MODE`, :data:`FOLDER_MODE`): uploads are private to the account the
app runs as, even on a machine shared with others.

Who may read a file is not decided here (see :mod:`backend.auth` and the file
route in ``ui/files.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Final, Protocol

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")
FILE_MODE: Final = 0o600
"""Stored files: read and written by the app's own account only."""
FOLDER_MODE: Final = 0o700
"""Folders of stored data: entered by the app's own account only."""
DATABASE_FILE: Final = "chat.db"
"""Name of the SQLite database inside the data folder (:mod:`backend.store.db`)."""


def private_folder(path: Path, top: Path | None = None) -> None:
    """Create folder ``path`` (and missing parents) with :data:`FOLDER_MODE`.

    ``top``, an existing or created ancestor of ``path`` (or ``path`` itself), and
    every folder below it down to ``path`` are set to :data:`FOLDER_MODE` even if
    they existed with a wider mode; folders above ``top`` are created if missing
    but left as they are.

    Raises:
        OSError: a folder cannot be created or its mode set.
    """
    path.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    top = top or path
    for folder in [path, *path.parents]:
        if folder.stat().st_mode & 0o777 != FOLDER_MODE:
            folder.chmod(FOLDER_MODE)
        if folder == top:
            break


def safe_key(key: str) -> str:
    """``key`` with every segment made safe (see the module docstring).

    Raises:
        ValueError: ``key`` has no usable segment.
    """
    segments = []
    for raw in key.replace("\\", "/").split("/"):
        segment = _UNSAFE.sub("_", raw)
        if segment in ("", ".", ".."):
            continue
        segments.append(segment[:200])
    if not segments:
        raise ValueError(f"not a usable object key: {key!r}")
    return "/".join(segments)


class StorageUnavailable(OSError):
    """A file store elsewhere (a bucket) cannot be reached or refused a request: held and
    retried like a write to a full disk."""


class Files(Protocol):
    """Where uploads and prepared images are kept, by object key (:func:`safe_key`).

    Every method blocks (disk or network): call it from a worker thread. Failures are
    ``OSError`` (``FileNotFoundError`` for a key with nothing stored), so a write the store
    cannot take now is held like a database write (:mod:`backend.store.pending`).
    """

    @property
    def where(self) -> str:
        """The folder or bucket, for messages."""
        ...

    def check(self) -> None:
        """Make sure files can be written and removed here (at start); raises ``OSError``."""
        ...

    def write(self, key: str, data: bytes) -> int:
        """Store ``data`` under ``key`` (replacing what was there); returns bytes written."""
        ...

    def read(self, key: str) -> bytes:
        """The bytes under ``key``; raises ``FileNotFoundError`` when there are none."""
        ...

    def exists(self, key: str) -> bool:
        """True if something is stored under ``key``."""
        ...

    def delete(self, key: str) -> bool:
        """Remove what is under ``key``; False if there was nothing."""
        ...

    def delete_tree(self, prefix: str) -> None:
        """Remove everything whose key starts with the folder ``prefix``."""
        ...


def probe(files: Files) -> None:
    """:meth:`Files.check`'s common part: write and remove a small file."""
    files.write("probe", b"ok")
    files.delete("probe")


class FileStore:
    """Files under one root folder, addressed by object keys (see :func:`safe_key`):
    :class:`Files` on disk."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def where(self) -> str:
        """The folder, resolved."""
        return str(self.root.resolve())

    def check(self) -> None:
        """Make the folder (and the data folder above it) private, then write in it.

        Raises:
            OSError: a folder cannot be made, or a file written.
        """
        private_folder(self.root, self.root.parent)
        probe(self)

    def path(self, key: str) -> Path:
        """Where ``key`` lies on disk.

        Raises:
            ValueError: ``key`` is not already safe (it would be changed by
                :func:`safe_key`), e.g. it contains ``..``.
        """
        if safe_key(key) != key:
            raise ValueError(f"unsafe object key: {key!r}")
        return self.root / key

    def write(self, key: str, data: bytes) -> int:
        """Store ``data`` under ``key`` (replacing what was there); returns bytes written.

        The file is :data:`FILE_MODE` (``mkstemp`` makes it so), its folders
        :data:`FOLDER_MODE` from the store's root down.
        """
        target = self.path(key)
        private_folder(target.parent, self.root)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return len(data)

    def read(self, key: str) -> bytes:
        """The bytes stored under ``key``.

        Raises:
            FileNotFoundError: nothing is stored under ``key``.
            ValueError: ``key`` is unsafe.
        """
        return self.path(key).read_bytes()

    def exists(self, key: str) -> bool:
        """True if a file is stored under ``key``."""
        try:
            return self.path(key).is_file()
        except ValueError:
            return False

    def delete(self, key: str) -> bool:
        """Remove the file under ``key``; False if there was none."""
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        return True

    def delete_tree(self, prefix: str) -> None:
        """Remove every file whose key starts with the folder ``prefix``."""
        shutil.rmtree(self.path(prefix), ignore_errors=True)
