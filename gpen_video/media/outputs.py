"""One OUTPUT, one job: OUTPUT is checked before any work (:func:`check_paths`), a job writes
through a hidden temporary file beside OUTPUT and holds OUTPUT's claim from start to rename, so a
second job on the same OUTPUT is refused at once, and a finished file replaces an existing one
only when the user said ``--overwrite``.
"""

from __future__ import annotations

import fcntl
import glob
import os
import tempfile
from pathlib import Path
from typing import TypeVar

from ..errors import OutputBusyError, UsageError


def _partial_prefix(output: Path) -> str:
    return f".{output.stem}.partial-"


def partial_path(output: Path) -> Path:
    """The temporary file this process writes OUTPUT through: hidden beside it and named by the
    process id, so a later run can tell the leftovers of a dead one (:func:`remove_stale_partials`)."""
    return output.with_name(f"{_partial_prefix(output)}{os.getpid()}{output.suffix}")


def remove_stale_partials(output: Path) -> None:
    """Delete temporary files that runs killed outright (``kill -9``, power loss) left beside OUTPUT;
    a partial file of a process still running is left alone."""
    prefix = _partial_prefix(output)
    for path in output.parent.glob(glob.escape(prefix) + "*" + glob.escape(output.suffix)):
        pid = path.name.removeprefix(prefix).removesuffix(output.suffix)
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except PermissionError:  # another user's live process
            pass


_Written = TypeVar("_Written", bound="AbortedOnError")


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` at ``path``, whole or not at all, even after a power cut or ``kill -9``: written to
    a hidden file beside it, flushed to disk, then renamed into place (removed if anything fails)."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class AbortedOnError:
    """A file being written, as a context manager: a block left by an error aborts it, so nothing
    is left at OUTPUT; a block left normally leaves the file to whoever finishes it (``close``)."""

    def abort(self) -> None:
        """Drop what was written."""
        raise NotImplementedError

    def __enter__(self: _Written) -> _Written:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        if kind is not None:
            self.abort()


class OutputClaim:
    """This job's hold on OUTPUT: an exclusive lock on a hidden lock file beside it (released by
    the kernel if the process dies), and the rename that puts the finished file in place.

    Without ``overwrite`` the lock makes a second job on the same OUTPUT fail at once, and the
    rename never replaces a file (it links, then unlinks): an OUTPUT that appeared meanwhile is
    kept. With ``overwrite`` jobs do not exclude each other, and the last to finish wins.
    """

    def __init__(self, output: Path, overwrite: bool) -> None:
        self.output = output
        self.overwrite = overwrite
        self.lock_path = output.with_name(f".{output.name}.lock")
        self._fd: int | None = None
        if not overwrite:
            self._lock()

    def _lock(self) -> None:
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OutputBusyError(f"another gpen-video job is writing {self.output}; wait for it, "
                                      f"or pass --overwrite to let the last job to finish win") from None
            try:  # the holder before us may have unlinked the file we opened: lock the one at the path
                if os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino:
                    self._fd = fd
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        if self.output.exists():  # finished by a job that held the lock until a moment ago
            self.release()
            raise OutputBusyError(f"{self.output} exists; pass --overwrite to replace it")

    def publish(self, finished: Path) -> None:
        """Move ``finished`` (beside OUTPUT) into place, then let OUTPUT go."""
        try:
            if self.overwrite:
                os.replace(finished, self.output)
            else:
                try:
                    os.link(finished, self.output)
                except FileExistsError:
                    raise OutputBusyError(f"{self.output} appeared while this job ran and was kept; "
                                          f"pass --overwrite to replace it") from None
                except OSError:  # no hard links on this file system: check, then rename
                    if self.output.exists():
                        raise OutputBusyError(f"{self.output} appeared while this job ran and was kept; "
                                              f"pass --overwrite to replace it") from None
                    os.replace(finished, self.output)
                else:
                    finished.unlink()
        finally:
            self.release()

    def release(self) -> None:
        """Let OUTPUT go (on success, failure or interruption); idempotent."""
        if self._fd is None:
            return
        try:
            os.unlink(self.lock_path)  # while still locked: a waiting job then re-checks the path
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None


def check_paths(input: Path, output: Path, overwrite: bool, extensions: set[str] | dict) -> None:
    """OUTPUT can be written, is not the input, and replaces nothing unasked."""
    if not output.suffix and not output.is_dir():
        raise UsageError(f"OUTPUT {output} has no extension: name a file such as {output}.mp4 (the container "
                         f"follows the extension), or end it with / to write into that folder")
    if output.suffix.lower() not in extensions:
        raise UsageError(f"unsupported output extension {output.suffix!r}; use one of {', '.join(sorted(extensions))}")
    if input.exists() and output.exists() and os.path.samefile(input, output):
        raise UsageError("OUTPUT is the input file; choose another path")
    if output.resolve() == input.resolve():
        raise UsageError("OUTPUT is the input file; choose another path")
    if output.is_dir():
        raise UsageError(f"OUTPUT is a directory: {output}")
    if output.exists() and not overwrite:
        raise UsageError(f"{output} exists; pass --overwrite to replace it")
    parent = output.resolve().parent
    if not parent.is_dir():
        raise UsageError(f"output directory does not exist: {parent}")
    try:  # a real probe: permissions, read-only file systems and ACLs all answer the same way
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError:
        raise UsageError(f"output directory is not writable: {parent}") from None
