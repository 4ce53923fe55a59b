"""An output named by a filesystem URI (``s3://``, ``gs://``, ``file://``, any filesystem pyarrow
writes): written locally, then uploaded.

The driver writes the lines to a staging copy on the local disk as rows finish, exactly as it writes
a local output (one writer, one line per row, appended), and uploads the copy whole when the job
ends: done, interrupted (Ctrl-C) or failed. An object store takes whole objects, not appends, so
this is the one way its copy is never a half-written line. What a crash does:

- Ctrl-C or an error: the copy is uploaded before the command exits; the rerun resumes from it.
- a killed driver or a lost machine: the upload does not happen. On the same machine the rerun
  resumes from the staging copy, which has every line written; on another, it starts from the URI's
  copy (downloaded when there is no staging copy), which has the lines of the last upload.

The staging copy lives in ``$MAI_BATCH_STAGING`` (default ``~/.cache/mai-batch``), in a folder named
by the URI's digest, and is kept after the upload so the next run of the same job finds it at once.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STAGING_ENV = "MAI_BATCH_STAGING"


def is_uri(output: str) -> bool:
    return "://" in output


@dataclass(frozen=True)
class StagedOutput:
    uri: str  # where the output belongs
    local: Path  # where it is written meanwhile: a file, or a records folder

    def sibling(self, suffix: str) -> tuple[Path, str]:
        """A file beside the output (an OpenAI output's ``.summary.json``), locally and at the URI."""
        return self.local.with_name(self.local.name + suffix), self.uri.rstrip("/") + suffix


def staged(uri: str, root: Path | None = None) -> StagedOutput:
    """Where ``uri``'s output is staged: a folder of ``root`` (``$MAI_BATCH_STAGING``, else
    ``~/.cache/mai-batch``) named by the URI's digest, holding a file or folder of the URI's name."""
    root = root or Path(os.environ.get(STAGING_ENV) or Path.home() / ".cache" / "mai-batch")
    digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
    name = uri.rstrip("/").rpartition("/")[2] or "output"
    return StagedOutput(uri, root / digest / name)


def _filesystem(uri: str) -> tuple[Any, str]:
    from pyarrow import fs

    return fs.FileSystem.from_uri(uri.rstrip("/"))


def fetch(output: StagedOutput) -> bool:
    """The URI's copy downloaded to the staging place when there is no staging copy yet (a job that
    resumes on another machine); True when one was downloaded. ``OSError`` naming the URI when its
    filesystem cannot be read."""
    from pyarrow import fs

    if output.local.exists():
        return False
    try:
        filesystem, path = _filesystem(output.uri)
        info = filesystem.get_file_info(path)
    except (OSError, ValueError) as exc:
        raise OSError(f"cannot reach the output {output.uri}: {exc}") from exc
    if info.type == fs.FileType.NotFound:
        return False
    output.local.parent.mkdir(parents=True, exist_ok=True)
    fs.copy_files(
        path, str(output.local), source_filesystem=filesystem, destination_filesystem=fs.LocalFileSystem()
    )
    return True


def upload(output: StagedOutput, *, suffixes: tuple[str, ...] = (".summary.json",)) -> list[str]:
    """The staging copy (a file or a records folder) and the files beside it (``suffixes``) copied to
    the URI, replacing what is there; the URIs written. ``OSError`` naming the URI when it fails."""
    from pyarrow import fs

    written = []
    pairs = [(output.local, output.uri.rstrip("/")), *(output.sibling(suffix) for suffix in suffixes)]
    try:
        for local, uri in pairs:
            if not local.exists():
                continue
            filesystem, path = _filesystem(uri)
            if local.is_dir():
                filesystem.create_dir(path, recursive=True)
            else:
                parent = path.rpartition("/")[0]
                if parent:
                    filesystem.create_dir(parent, recursive=True)
            fs.copy_files(
                str(local), path, source_filesystem=fs.LocalFileSystem(), destination_filesystem=filesystem
            )
            written.append(uri)
    except (OSError, ValueError) as exc:
        raise OSError(f"cannot write the output {output.uri}: {exc}") from exc
    return written
