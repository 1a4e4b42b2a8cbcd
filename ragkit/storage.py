"""
ragkit/storage.py: how the kit writes to disk and to databases without harming what is there.

  1. Mark first: whatever the kit creates (a folder, a Chroma collection, a Postgres table, a
     Qdrant collection) carries the kit's mark before anything else is written, so even an
     interrupted first save is recognisably ours and can be rebuilt.
  2. Refuse what is not ours: a folder or collection without the mark is never overwritten or
     deleted; the run stops with one line instead.
  3. Save whole or not at all: each file goes to a unique temporary name and is renamed into
     place, under the operating system's lock on the folder (released when the process ends,
     even by kill -9), so two runs saving at once take turns.

    with folder_lock(claim_folder("my_index", "--index")):
        digest = write_atomic(Path("my_index") / "chunks.json", b"[]")
"""

import contextlib
import glob
import hashlib
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ragkit.text import printable

OWNER = "rag_from_scratch"            # the mark: metadata created_by=OWNER, or this file
MARK_FILE = ".rag_from_scratch"       # in every folder the kit creates
LOCK_FILE = ".rag_from_scratch.lock"  # locked while a run saves into the folder
INDEX_FORMAT = "rag_from_scratch-index-2"   # the saved index's layout; any other is rebuilt
PARTIAL = ".rag_from_scratch.partial"        # the end of a temporary file only this kit writes
LOCK_WAIT_S = 120                             # how long a run waits for another run's save


def sha256_bytes(data: bytes) -> str:
    """The hex SHA-256 of some bytes."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path) -> str:
    """The hex SHA-256 of a file, read in 1 MB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_our_folder(folder) -> bool:
    """True if the kit created `folder`: our mark is the only proof (a file's name proves nothing)."""
    return (Path(folder) / MARK_FILE).is_file()


def usable_folder(folder, flag: str) -> Path:
    """`folder` if the kit may write there: ValueError, now, before any slow work, if it is a
    file, holds anything the kit did not create, or (or its nearest existing parent) is not
    writable."""
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {folder} is a file, not a folder: give a folder path")
    if folder.is_dir() and any(folder.iterdir()) and not is_our_folder(folder):
        raise ValueError(f"{flag} {folder} holds files the kit did not create; it will not touch "
                         f"them: choose a new or empty folder")
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:                                   # root passes os.access checks; a real write tells
        tempfile.TemporaryFile(dir=existing).close()
    except OSError:
        raise ValueError(f"cannot write to {flag} {folder}: choose a folder you can write to") from None
    return folder


def claim_folder(folder, flag: str) -> Path:
    """Create `folder` (or accept an empty one, or one of ours) and put our mark in it first."""
    folder = usable_folder(folder, flag)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not is_our_folder(folder):            # "x": created once, even by two runs at once
            with contextlib.suppress(FileExistsError), open(folder / MARK_FILE, "x") as mark:
                mark.write(f"created by {OWNER}; safe to delete with the folder\n")
    except OSError as exc:
        raise ValueError(f"cannot write to {flag} {folder} ({exc.strerror or exc}): "
                         f"choose a folder you can write to") from None
    return folder


def write_atomic(path, data, check=None) -> str | None:
    """Write `data` to `path` all or nothing (a unique temporary name, renamed); return its
    SHA-256. `data` may also be an iterable of byte blocks (a file too big to hold), and
    check(), if given, runs before the rename: an error there leaves `path` as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL)
    try:
        with os.fdopen(fd, "wb") as f:
            for block in [data] if isinstance(data, bytes) else data:
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        if check is not None:
            check()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return sha256_bytes(data) if isinstance(data, bytes) else None


def remove_partials(folder, name: str = "") -> None:
    """Remove the temporary files that a write_atomic killed mid-way (kill -9, a power cut) left
    in `folder`: of the file `name` only, if given ("model.gguf": ".model.gguf.x1y2z3" + PARTIAL).
    Call it holding the lock the writers take, so no write is under way. Only regular files
    with a name write_atomic makes are removed; anything else is left as it is."""
    pattern = f".{glob.escape(name)}.*{PARTIAL}" if name else f".*{PARTIAL}"
    for left in Path(folder).glob(pattern):
        if left.is_file() and not left.is_symlink():
            left.unlink(missing_ok=True)


@contextmanager
def folder_lock(folder):
    """Hold filelock's lock on `folder` while saving; another run waits its turn, and says so."""
    from filelock import FileLock, Timeout
    path = Path(folder) / LOCK_FILE
    if path.is_symlink():                         # older filelock versions would follow it
        raise ValueError(f"{path} is a link: the kit does not follow it; remove it")
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"waiting for another run to finish saving in {printable(str(folder), lines=False)} "
              f"(up to {LOCK_WAIT_S} s) ...",
              file=sys.stderr, flush=True)
        try:
            lock.acquire(timeout=LOCK_WAIT_S)
        except Timeout:
            raise TimeoutError(f"another run has held the lock on {folder} for {LOCK_WAIT_S} s: "
                               f"let it finish, or stop it, and run again") from None
    except OSError as exc:
        raise ValueError(f"cannot lock {path} ({exc.strerror or exc})") from None
    try:
        remove_partials(folder)         # the lock is ours, so no save is running
        yield Path(folder)
    finally:
        lock.release()


def regular_file_size(path, max_bytes: int, not_regular: str, too_big, error=ValueError) -> int:
    """A regular file's size (links followed), at most max_bytes; else error(your words for what is wrong)."""
    info = os.stat(path)                               # a path, or an open file's number
    if not stat.S_ISREG(info.st_mode):                 # a FIFO or a device could hang or never end
        raise error(not_regular)
    if info.st_size > max_bytes:
        raise error(too_big(info.st_size))
    return info.st_size


def read_plain_file(path, max_bytes: int, digest: str | None = None) -> bytes:
    """The bytes of a regular file (never a link, FIFO or device, which could hang or never
    end) of at most `max_bytes`; OSError or ValueError otherwise, with the reason. Given the
    SHA-256 `digest` it should have, the file is hashed a piece at a time first, so one that
    differs (a damaged 3 GB file) is refused without ever being held in memory."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)                          # a link: ELOOP; a FIFO: no wait
    with os.fdopen(fd, "rb") as f:
        regular_file_size(f.fileno(), max_bytes, f"{path} is not a regular file",
                          lambda size: f"{path} is {size:,} bytes, over the {max_bytes:,} it may be")
        if digest is not None:
            hashed = hashlib.sha256()
            for piece in iter(lambda: f.read(1 << 20), b""):
                hashed.update(piece)
            if hashed.hexdigest() != digest:
                raise ValueError(f"{path} is not the file that was saved (its SHA-256 differs)")
            f.seek(0)
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:                          # it grew while we read
        raise ValueError(f"{path} is over the {max_bytes:,} bytes it may be")
    return data


def is_our_store(metadata) -> bool:
    """True if a database collection/table's metadata carries our mark (created_by)."""
    return isinstance(metadata, dict) and metadata.get("created_by") == OWNER


def refuse_foreign(kind: str, name: str, where: str) -> ValueError:
    """The one-line refusal for a store the kit did not create."""
    return ValueError(f"{kind} {name!r} in {where} was not created by this kit; it will not "
                      f"replace or delete it: choose another name")
