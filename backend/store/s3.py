"""Stored files in an S3 bucket (AWS, or any S3-compatible server: SeaweedFS, MinIO), for
UI workers on several hosts: :class:`S3Files`, the :class:`backend.store.files.Files`
interface over boto3's S3 client.

Chosen by ``KIMI_FILES_S3_BUCKET`` (:mod:`backend.settings`); the keys are boto3's own
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``~/.aws``), never a ``KIMI_*`` setting
or a command line. The page never gets a bucket URL: files are still served by the app's
route (``ui/files.py``), which checks who may read them on every request, so a shared
chat's photos stop being readable the moment it is unshared (a signed URL would stay
valid until it expires).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from backend.store.files import StorageUnavailable, probe, safe_key

_MISSING: Final = frozenset({"404", "NoSuchKey", "NotFound"})
_BATCH: Final = 1000
"""Most keys one DeleteObjects request may name (the S3 API's limit)."""


class S3Files:
    """:class:`backend.store.files.Files` in ``bucket``.

    Args:
        bucket: an existing bucket; every host of one app must name the same one.
        endpoint_url: an S3-compatible server's URL; empty for AWS.
        region: the bucket's region; empty for boto3's default.
    """

    def __init__(self, bucket: str, endpoint_url: str = "", region: str = "") -> None:
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        config = Config(
            connect_timeout=5, read_timeout=30, retries={"max_attempts": 3, "mode": "standard"}
        )
        session = boto3.session.Session()  # its own: credentials read now, not cached at import
        self.client = session.client(
            "s3", endpoint_url=endpoint_url or None, region_name=region or None, config=config
        )

    @property
    def where(self) -> str:
        """``s3://bucket``, with the endpoint when it is not AWS."""
        return f"s3://{self.bucket}" + (f" at {self.endpoint_url}" if self.endpoint_url else "")

    def check(self) -> None:
        """Write and remove a small object.

        Raises:
            StorageUnavailable: the bucket cannot be reached, does not exist, or refuses.
        """
        probe(self)

    def write(self, key: str, data: bytes) -> int:
        """Put ``data`` under ``key`` (one PUT: readers see the old or the new object)."""
        with self._failures(key):
            self.client.put_object(Bucket=self.bucket, Key=_checked(key), Body=data)
        return len(data)

    def read(self, key: str) -> bytes:
        """The object's bytes.

        Raises:
            FileNotFoundError: no object under ``key``.
            StorageUnavailable: the bucket cannot be read.
        """
        with self._failures(key):
            found = self.client.get_object(Bucket=self.bucket, Key=_checked(key))
            body: bytes = found["Body"].read()
        return body

    def exists(self, key: str) -> bool:
        try:
            with self._failures(key):
                self.client.head_object(Bucket=self.bucket, Key=_checked(key))
        except FileNotFoundError:
            return False
        return True

    def delete(self, key: str) -> bool:
        """Remove the object; False if there was none (S3's DELETE does not say: HEAD first)."""
        if not self.exists(key):
            return False
        with self._failures(key):
            self.client.delete_object(Bucket=self.bucket, Key=_checked(key))
        return True

    def delete_tree(self, prefix: str) -> None:
        """Remove every object under the folder ``prefix``, a thousand per request."""
        folder = _checked(prefix) + "/"
        batch: list[dict[str, str]] = []
        with self._failures(prefix):
            for key in self._keys(folder):
                batch.append({"Key": key})
                if len(batch) == _BATCH:
                    self._delete_batch(batch)
                    batch = []
            if batch:
                self._delete_batch(batch)

    def _keys(self, folder: str) -> Iterator[str]:
        pages = self.client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.bucket, Prefix=folder):
            for item in page.get("Contents", []):
                yield str(item["Key"])

    def _delete_batch(self, batch: list[dict[str, str]]) -> None:
        self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    @contextmanager
    def _failures(self, key: str) -> Iterator[None]:
        """boto3's errors as ``OSError``: a missing key as ``FileNotFoundError``, anything
        else as :class:`StorageUnavailable` naming the bucket and the cause."""
        try:
            yield
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise FileNotFoundError(f"{self.where}: no object {key}") from None
            raise StorageUnavailable(f"{self.where} refused ({code}: {exc})") from None
        except BotoCoreError as exc:
            raise StorageUnavailable(f"{self.where} cannot be reached ({exc})") from None


def _checked(key: str) -> str:
    """``key`` if it is already safe (:func:`backend.store.files.safe_key`).

    Raises:
        ValueError: it is not.
    """
    if safe_key(key) != key:
        raise ValueError(f"unsafe object key: {key!r}")
    return key
