"""Input files as streams of text lines, whatever they were saved as.

A path is a file or a folder (every regular file under it, sorted; a
TORCH_TRACE folder holds one ``dedicated_log_torch_trace_*.log`` per rank and
process). Files may be gzip- or zstd-compressed (recognised by their magic
bytes, not their names), have Windows line endings or ANSI colours. Reading
is streaming: fixed-size chunks are decompressed, decoded and split, so memory
does not grow with the file; a "line" longer than :data:`MAX_LINE` characters
(a file of noise without newlines) is cut there and its rest skipped (the
reader is told its line number: a report that lay past the cut is never
read, and an input that reports nothing then says why).

Only regular files are read: a FIFO or a device would block or never end
(and every file is read twice: its first line tells the format). A
compressed file that ends before its last frame does (copied while it was
written) is reported as cut, gzip and zstd alike; a zstd file may hold
several frames (``pzstd``, ``cat a.zst b.zst``).
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

# What --format accepts: auto looks at each file's first line.
FORMATS = ("auto", "torch-trace", "text")

CHUNK = 1 << 20
MAX_LINE = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
TRACE_PREFIX = "dedicated_log_torch_trace_"
_RANK_IN_NAME = re.compile(re.escape(TRACE_PREFIX) + r"rank_(\d+)_")


class IngestError(Exception):
    """Input that cannot be read at all: one line for the user, exit code 2."""


@dataclass(frozen=True)
class InputFile:
    path: Path
    # gzip, zstd or "" (plain)
    compression: str
    # Found in a folder rather than named: one that cannot be read is skipped, not fatal.
    in_folder: bool = False

    @property
    def name(self) -> str:
        return str(self.path)

    def rank_from_name(self) -> int | None:
        """torch/_logging/_internal.py names a distributed rank's trace
        ``dedicated_log_torch_trace_rank_<N>_<random>.log``."""
        m = _RANK_IN_NAME.match(self.path.name)
        return int(m.group(1)) if m else None


def input_kind(raw: str | os.PathLike) -> str:
    """'file' or 'folder'; an IngestError (one line) for anything else: missing,
    a symlink loop, unreadable, a FIFO, a device or a socket."""
    try:
        mode = os.stat(raw).st_mode
    except FileNotFoundError:
        raise IngestError(f"{raw}: no such file or folder") from None
    except (OSError, ValueError) as e:  # ELOOP (a symlink loop), EACCES, a NUL byte in the name
        raise IngestError(f"{raw}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
    raise IngestError(f"{raw}: is {what}, not a regular file: ingest reads files and folders "
                      "(each file twice); save the stream to a file first")


def expand(paths: list[str]) -> list[InputFile]:
    """The files to read, in a stable order; an IngestError for anything missing or empty."""
    files: list[InputFile] = []
    for raw in paths:
        path = Path(raw)
        if input_kind(raw) == "folder":
            found = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
            if not found:
                raise IngestError(f"{raw}: the folder holds no files (expected a TORCH_TRACE folder or logs)")
            files.extend(_opened(p, in_folder=True) for p in found)
        else:
            files.append(_opened(path))
    return files


def _opened(path: Path, in_folder: bool = False) -> InputFile:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise IngestError(f"{path}: cannot read: {e.strerror or e}") from e
    if head.startswith(_GZIP_MAGIC):
        return InputFile(path, "gzip", in_folder)
    if head == _ZSTD_MAGIC:
        return InputFile(path, "zstd", in_folder)
    return InputFile(path, "", in_folder)


class _ZstdStream:
    """A zstd file as a binary stream, frame after frame. Unlike zstandard's
    own stream reader it tells a file that ends inside a frame (EOFError, as
    gzip does) and a frame it cannot decode (ValueError: a dictionary
    mismatch, corrupt data) from the end of the data."""

    _RAW = 1 << 16  # compressed bytes per step: what one step yields stays bounded

    def __init__(self, raw: BinaryIO, zstandard: Any) -> None:
        self._raw, self._zstd = raw, zstandard
        self._frame = zstandard.ZstdDecompressor().decompressobj()
        self._started = False  # the current frame has received input
        self._end = False

    def read1(self, size: int = -1) -> bytes:
        while not self._end:
            data = self._raw.read(self._RAW)
            if not data:
                self._end = True
                if self._started and not self._frame.eof:
                    raise EOFError("the zstd stream ends before its frame does")
                return b""
            out = self._feed(data)
            if out:
                return out
        return b""

    read = read1

    def _feed(self, data: bytes) -> bytes:
        out = []
        try:
            while data:
                self._started = True
                out.append(self._frame.decompress(data))
                if not self._frame.eof:
                    break
                data = self._frame.unused_data  # the next frame starts here
                self._frame = self._zstd.ZstdDecompressor().decompressobj()
                self._started = False
        except self._zstd.ZstdError as e:
            raise ValueError(str(e)) from None
        return b"".join(out)

    def close(self) -> None:
        self._raw.close()


def _binary_stream(file: InputFile) -> BinaryIO:
    raw = open(file.path, "rb")
    if file.compression == "gzip":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if file.compression == "zstd":
        try:
            import zstandard
        except ImportError:
            raw.close()
            raise IngestError(
                f"{file.path}: is zstd-compressed; reading it needs the 'zstandard' package "
                "(pip install zstandard), or decompress it first (zstd -d)"
            ) from None
        return _ZstdStream(raw, zstandard)  # type: ignore[return-value]
    return raw


def lines(file: InputFile, on_cut: Callable[[str], None] | None = None,
          on_long: Callable[[int], None] | None = None) -> Iterator[str]:
    """The file's lines without line endings; an IngestError if it is not text.

    A compressed file that breaks off (copied while it was written) keeps
    the lines before the cut, if any: ``on_cut`` is told why it ended early.
    Data that cannot be decompressed at all (not a cut) is an IngestError.
    ``on_long`` is told the number (from 1) of each line longer than
    MAX_LINE, whose first MAX_LINE characters are all that is read of it."""
    stream = _binary_stream(file)
    read = 0
    try:
        for line in _split(file, stream, on_long or (lambda _number: None)):
            read += 1
            yield line
    except (OSError, EOFError, ValueError) as e:
        # gzip.BadGzipFile and zstandard.ZstdError are OSError/ValueError
        # subclasses; a gzip or zstd stream that breaks off ends in EOFError,
        # also one cut inside its first block, before any line.
        why = f"cannot decompress ({file.compression}): {e or type(e).__name__}"
        if on_cut is None or not (read or isinstance(e, EOFError)):
            raise IngestError(f"{file.path}: {why}") from e
        on_cut(why)
    finally:
        stream.close()


def _split(file: InputFile, stream: BinaryIO, on_long: Callable[[int], None]) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    rest = ""
    skipping = False  # inside an over-long line: drop until its end
    first = True
    number = 0  # lines yielded so far
    # read1: what the decompressor has so far, so a file that breaks off keeps its lines.
    read = getattr(stream, "read1", stream.read)
    while True:
        chunk = read(CHUNK)
        if first:
            first = False
            if b"\x00" in chunk[:8192]:
                raise IngestError(f"{file.path}: a binary file, not a log or a TORCH_TRACE (it holds NUL bytes)")
        if not chunk:
            break
        parts = (rest + decoder.decode(chunk)).split("\n")
        rest = parts.pop()
        for part in parts:
            if skipping:
                skipping = False
                continue
            number += 1
            yield part[:-1] if part.endswith("\r") else part
        if len(rest) > MAX_LINE:
            if not skipping:
                number += 1
                on_long(number)
                yield rest[:MAX_LINE]
            skipping, rest = True, ""
    rest += decoder.decode(b"", final=True)
    if rest and not skipping:
        yield rest[:-1] if rest.endswith("\r") else rest


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def peek(file: InputFile, count: int = 20, budget: int = 4 * MAX_LINE) -> list[str]:
    """The first non-empty lines of a file, reading at most ``budget`` characters."""
    out: list[str] = []
    seen = 0
    # A cut is not an error here: reading the file says where it ends (on_cut).
    stream = lines(file, on_cut=lambda why: None)
    try:
        for line in stream:
            seen += len(line) + 1
            if line.strip():
                out.append(line)
            if len(out) >= count or seen > budget:
                break
    finally:
        stream.close()
    return out


# Saved findings are read whole; a file that decompresses to more is a log.
MAX_JSON_BYTES = 1 << 30


def _cut_json(error: json.JSONDecodeError) -> bool:
    """Whether a file that starts like JSON and does not parse is one JSON
    document gone wrong (an error, never a log that reports nothing) rather
    than a log. A log that opens with ``[rank0]:`` fails on its first line; a
    JSON-lines log holds a whole value on its first line and more after it,
    a server log may open with a whole JSON dump. Anything else -- cut
    short, damaged past its first line -- was meant to be one document."""
    text = error.doc
    if error.pos >= len(text.rstrip()):
        return True  # cut short
    first_line_end = text.find("\n", len(text) - len(text.lstrip()))
    if first_line_end == -1 or error.pos <= first_line_end:
        return False
    # A whole document and text after it: a log that opens with a JSON dump
    # (a server's configuration), not a document cut short.
    return error.msg != "Extra data"


class NotJSON(ValueError):
    """json_document(strict=True): the file is not one JSON document (why)."""


def json_document(path: str | os.PathLike, *, strict: bool = False) -> Any:
    """The JSON document a regular file holds -- plain, gzip- or
    zstd-compressed, with or without a UTF-8 byte-order mark, keys in any
    order. When it is not one: None (it is a log; a JSON-lines log is not one
    document), or with ``strict`` a NotJSON saying why. An IngestError (one
    line) when the file cannot be read at all, or is JSON nested too deeply
    to load."""
    file = _opened(Path(path))
    stream = _binary_stream(file)
    try:
        head = b""
        # The first character that is not white space says whether it may be
        # JSON (however much white space comes first, up to a chunk's worth).
        while (len(head) < 64 or not head.removeprefix(codecs.BOM_UTF8).strip()) and len(head) < CHUNK \
                and (chunk := stream.read(64)):
            head += chunk
        if not strict and head.removeprefix(codecs.BOM_UTF8).lstrip()[:1] not in (b"{", b"["):
            return None
        parts, size = [head], len(head)
        while chunk := stream.read(CHUNK):
            parts.append(chunk)
            size += len(chunk)
            if size > MAX_JSON_BYTES:
                if strict:
                    raise NotJSON(f"larger than {MAX_JSON_BYTES >> 20} MiB")
                return None
    except EOFError as e:
        # A compressed file that ends early: not one whole document. As a log,
        # what came before the cut is read and the cut reported (lines).
        if not strict:
            return None
        raise IngestError(f"{path}: cannot read ({file.compression}): {e or type(e).__name__}") from e
    except OSError as e:
        raise IngestError(f"{path}: cannot read ({file.compression or 'plain'}): {e or type(e).__name__}") from e
    except ValueError as e:
        if isinstance(e, NotJSON):
            raise
        raise IngestError(f"{path}: cannot read ({file.compression or 'plain'}): {e or type(e).__name__}") from e
    finally:
        stream.close()
    try:
        return json.loads(b"".join(parts).decode("utf-8-sig"))
    except RecursionError:
        raise IngestError(f"{path}: JSON nested too deeply to be findings") from None
    except UnicodeDecodeError:
        if strict:
            raise NotJSON("not UTF-8 text") from None
        return None
    except json.JSONDecodeError as e:
        if strict:
            raise NotJSON(str(e)) from None
        if _cut_json(e):
            raise IngestError(f"{path}: starts as one JSON document but does not parse ({e.msg} at line "
                              f"{e.lineno} column {e.colno}): a findings file cut short or damaged?") from None
        return None
    except ValueError as e:  # a JSON number Python will not convert (an integer of thousands of digits)
        raise IngestError(f"{path}: JSON that cannot be read: {e}") from None
