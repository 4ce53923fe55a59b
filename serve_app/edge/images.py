"""Checking the image of a request before any model sees it.

Only inline images (``data:`` URLs or bare base64) are accepted unless remote images are enabled;
the bytes must be PNG, JPEG, WebP or GIF, within the byte limit, and the declared pixel count (read
from the header, before decoding) within the pixel limit, which stops decompression bombs.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from .errors import RequestError

# Downloads an allowed remote image and checks it like an inline one: (URL, param) -> a data URL.
ImageFetcher = Callable[[str, str], Awaitable[str]]

_DATA_URL = re.compile(
    r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[\w-]+=[\w.-]+)*)(?P<b64>;base64)?,(?P<data>.*)$",
    re.DOTALL,
)
_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}


@dataclass(frozen=True)
class CheckedImage:
    data_url: str
    mime: str
    width: int
    height: int
    num_bytes: int


def sniff_format(data: bytes) -> str | None:
    """PNG, JPEG, WEBP or GIF from the file's magic bytes; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    return None


def _describe(data: bytes) -> str:
    if not data:
        return "no bytes"
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in data[:64])
    what = "text" if printable == min(len(data), 64) else "binary data"
    return f"{len(data)} bytes of {what}"


def is_remote(url: str) -> bool:
    return url[:16].lower().startswith(("http://", "https://"))


def check_image(url: str, *, max_bytes: int, max_pixels: int, allow_remote: bool, param: str) -> CheckedImage:
    """Validate one image reference and return it as a canonical data URL."""
    if not isinstance(url, str) or not url.strip():
        raise RequestError("the image URL is empty", param=param, code="invalid_image")
    url = url.strip()
    lowered = url[:16].lower()
    if is_remote(url):
        if not allow_remote:
            raise RequestError(
                "remote image URLs are disabled on this server; send the image inline as a data URL "
                "(data:image/png;base64,...)",
                param=param,
                code="remote_image_disabled",
            )
        raise ValueError(
            "a remote image is downloaded first (serve_app.edge.remote_images), then checked as bytes"
        )
    if lowered.startswith("file:"):
        raise RequestError(
            "file: URLs are not accepted; send the image inline as a data URL",
            param=param,
            code="invalid_image",
        )
    match = _DATA_URL.match(url)
    if match:
        if not match.group("b64"):
            raise RequestError(
                "the image data URL must be base64-encoded (data:image/png;base64,...)",
                param=param,
                code="invalid_image",
            )
        payload = match.group("data")
    elif lowered.startswith("data:"):
        raise RequestError(
            "the image data URL is malformed; expected data:<mime>;base64,<data>",
            param=param,
            code="invalid_image",
        )
    elif ":" in url[:12]:
        raise RequestError(
            f"unsupported image URL scheme {url.split(':', 1)[0]!r}; send a data URL",
            param=param,
            code="invalid_image",
        )
    else:
        payload = url  # bare base64
    # Base64 is 4 characters per 3 bytes: reject an oversized payload before decoding it.
    if len(payload) > (max_bytes + 2) // 3 * 4 + 4:
        raise RequestError(
            f"the image is larger than the limit of {max_bytes} bytes",
            param=param,
            code="image_too_large",
            status=413,
        )
    try:
        data = base64.b64decode(re.sub(r"\s+", "", payload), validate=True)
    except (binascii.Error, ValueError):
        raise RequestError("the image data is not valid base64", param=param, code="invalid_image") from None
    return check_image_bytes(data, max_bytes=max_bytes, max_pixels=max_pixels, param=param)


class ImageLimits(Protocol):
    """The limits an image is checked under (``config.Limits`` has them)."""

    @property
    def max_image_bytes(self) -> int: ...
    @property
    def max_image_pixels(self) -> int: ...
    @property
    def allow_remote_images(self) -> bool: ...
    @property
    def max_image_aspect_ratio(self) -> float | None: ...
    @property
    def min_image_side(self) -> int: ...


def check_image_under(limits: ImageLimits, url: str, *, param: str) -> str:
    """``check_image`` and ``check_geometry`` under ``limits``: the checked image as a data URL."""
    image = check_image(
        url,
        max_bytes=limits.max_image_bytes,
        max_pixels=limits.max_image_pixels,
        allow_remote=limits.allow_remote_images,
        param=param,
    )
    return check_geometry(image, limits, param=param).data_url


def check_image_bytes_under(limits: ImageLimits, data: bytes, *, param: str) -> str:
    """``check_image_bytes`` and ``check_geometry`` under ``limits`` (a downloaded image)."""
    image = check_image_bytes(
        data, max_bytes=limits.max_image_bytes, max_pixels=limits.max_image_pixels, param=param
    )
    return check_geometry(image, limits, param=param).data_url


def check_geometry(image: CheckedImage, limits: ImageLimits, *, param: str) -> CheckedImage:
    """The shape the models' image processors take (limits learnt from them when the app is built):
    no side under ``min_image_side``, no aspect ratio over ``max_image_aspect_ratio``."""
    width, height = image.width, image.height
    if min(width, height) < limits.min_image_side:
        raise RequestError(
            f"the image is {width}x{height}; the models' image processor needs at least "
            f"{limits.min_image_side} pixels a side",
            param=param,
            code="invalid_image",
        )
    ratio = max(width, height) / min(width, height)
    if limits.max_image_aspect_ratio is not None and ratio > limits.max_image_aspect_ratio:
        raise RequestError(
            f"the image is {width}x{height}, an aspect ratio of {ratio:g}; the models' image processor "
            f"takes at most {limits.max_image_aspect_ratio:g}",
            param=param,
            code="invalid_image",
        )
    return image


def check_image_bytes(data: bytes, *, max_bytes: int, max_pixels: int, param: str) -> CheckedImage:
    """Validate an image's bytes (inline once decoded, or downloaded) and return it as a data URL."""
    if len(data) > max_bytes:
        raise RequestError(
            f"the image is larger than the limit of {max_bytes} bytes",
            param=param,
            code="image_too_large",
            status=413,
        )
    kind = sniff_format(data)
    if kind is None:
        raise RequestError(
            f"the image is not a PNG, JPEG, WebP or GIF (got {_describe(data)})",
            param=param,
            code="invalid_image",
        )
    width, height = _dimensions(data, kind, max_pixels, param)
    mime = _FORMATS[kind]
    return CheckedImage(
        data_url=f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}",
        mime=mime,
        width=width,
        height=height,
        num_bytes=len(data),
    )


def _dimensions(data: bytes, kind: str, max_pixels: int, param: str) -> tuple[int, int]:
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[kind]) as image:  # reads the header only
                width, height = image.size
                if width * height > max_pixels:
                    raise RequestError(
                        f"the image is {width}x{height} = {width * height} pixels, over the limit of "
                        f"{max_pixels}",
                        param=param,
                        code="image_too_large",
                        status=413,
                    )
                image.verify()  # structure and checksums, without decoding the pixels
    except RequestError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise RequestError(
            "the image declares too many pixels (decompression bomb)",
            param=param,
            code="image_too_large",
            status=413,
        ) from None
    except Exception as exc:
        raise RequestError(
            f"the {kind} image is corrupt or truncated ({type(exc).__name__})",
            param=param,
            code="invalid_image",
        ) from None
    if width < 1 or height < 1:
        raise RequestError("the image has no pixels", param=param, code="invalid_image")
    return width, height
