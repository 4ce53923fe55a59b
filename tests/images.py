"""Images for tests, made on the fly."""

from __future__ import annotations

import base64
import io

from PIL import Image


def image_bytes(fmt: str = "PNG", size: tuple[int, int] = (64, 64), color=(200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, fmt)
    return buffer.getvalue()


def data_url(fmt: str = "PNG", size: tuple[int, int] = (64, 64), color=(200, 30, 30)) -> str:
    mime = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}[fmt]
    return f"data:{mime};base64,{base64.b64encode(image_bytes(fmt, size, color)).decode()}"


def png_bomb(width: int = 30000, height: int = 30000) -> str:
    """A tiny PNG whose header declares a huge image (the pixels are a few compressed bytes)."""
    import struct
    import zlib

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload))
            + kind
            + payload
            + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit greyscale
    raw = zlib.compress(b"\x00" * 64)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def chat_body(
    question: str = "Is the shape red?", image: str | None = None, model: str = "mai", **extra
) -> dict:
    content = [
        {"type": "image_url", "image_url": {"url": image or data_url()}},
        {"type": "text", "text": question},
    ]
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}
