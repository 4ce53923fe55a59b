"""A record's image path -> its data URL, read only when it is safe to read (pure but for the file).

A record names its image by a path an input line chose, so the line decides what the job opens. Read are
only regular files under the image root (the input's folder, or ``--image-root``) once symlinks are
resolved, of at most ``max_bytes`` (the config's ``limits.max_image_bytes``: the server refuses a larger
image anyway): a FIFO, a device, a folder, a path out of the root or a file too large is refused without
reading it. The file is opened with ``O_NONBLOCK`` and ``O_NOFOLLOW`` and checked again once open (its
type, size, inode, and the path the kernel opened it at), so a FIFO or a symlink swapped in after the
first check, for the file or a folder on its way, cannot block the job or lead it out of the root.
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

from serve_app.edge.images import sniff_format


class ImageRefused(Exception):
    """An image path the job will not read: the message names the limit, ``code`` the kind."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.message, self.code = message, code


def image_data_url(image: str, base: Path, root: Path, max_bytes: int) -> str:
    """``image`` as a data URL: a data URL as it is, a path (relative ones from ``base``) read from
    under ``root``; ``ImageRefused`` naming the limit otherwise."""
    if image.startswith("data:"):
        return image
    try:
        path = Path(os.path.realpath(base / image))  # an absolute image replaces base
    except (OSError, ValueError) as exc:  # a NUL byte, a loop of symlinks
        raise _unreadable(image, exc) from None
    if not path.is_relative_to(os.path.realpath(root)):
        raise ImageRefused(
            f"image {image!r} is outside the image root {str(root)!r} (--image-root)", "image_outside_root"
        )
    try:
        before = os.stat(path)
    except (OSError, ValueError) as exc:
        raise _unreadable(image, exc) from None
    _check(image, before, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _unreadable(image, exc) from None
    with os.fdopen(fd, "rb") as file:
        opened = os.fstat(file.fileno())
        _check(image, opened, max_bytes)
        if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            raise ImageRefused(f"image {image!r} changed while it was opened", "invalid_image")
        if not _opened_under(file.fileno(), root):  # a folder on the way swapped for a link meanwhile
            raise ImageRefused(
                f"image {image!r} is outside the image root {str(root)!r} (--image-root)",
                "image_outside_root",
            )
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew since
        raise ImageRefused(_too_large(image, f"more than {max_bytes}", max_bytes), "image_too_large")
    kind = sniff_format(data)
    if kind is None:
        raise ImageRefused(f"image {image!r} is not PNG, JPEG, GIF or WebP", "invalid_image")
    return f"data:image/{kind.lower()};base64," + base64.b64encode(data).decode("ascii")


def _opened_under(fd: int, root: Path) -> bool:
    """Whether the file open as ``fd`` is, by the path the kernel resolved it at, under ``root`` (where
    the kernel does not say, /proc absent, the checks before the open stand)."""
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return True
    return Path(opened).is_relative_to(os.path.realpath(root))


def _check(image: str, status: os.stat_result, max_bytes: int) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise ImageRefused(f"image {image!r} is not a regular file: only files are read", "image_not_a_file")
    if status.st_size > max_bytes:
        raise ImageRefused(_too_large(image, str(status.st_size), max_bytes), "image_too_large")


def _unreadable(image: str, exc: OSError | ValueError) -> ImageRefused:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return ImageRefused(f"image {image!r}: {reason}", "invalid_image")


def _too_large(image: str, size: str, max_bytes: int) -> str:
    return f"image {image!r} has {size} bytes, over the limit of {max_bytes} (limits.max_image_bytes)"
