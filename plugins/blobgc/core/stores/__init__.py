"""Object stores other than S3, each behind `blobgc.core.objects.ObjectStore` (S3's calls and shapes)."""

from __future__ import annotations

from typing import Any


class OneCallCopies:
    """S3's multipart copy calls, for a store whose one copy call copies any object (GCS's rewrite, Azure's Copy
    Blob): `single_copy_limit` tells `blobgc.core.objects.copy_verified` so, and the multipart calls are never made."""

    single_copy_limit: int = 5 * 1024**4  # 5 TiB, the largest object either cloud stores
    copy_call = "one copy call"  # how the store copies, for the error a multipart call raises

    def _no_multipart(self) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} copies any object with {self.copy_call}: no multipart copy")

    def create_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        raise self._no_multipart()

    def upload_part_copy(self, **kwargs: Any) -> dict[str, Any]:
        raise self._no_multipart()

    def complete_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        raise self._no_multipart()

    def abort_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        raise self._no_multipart()
