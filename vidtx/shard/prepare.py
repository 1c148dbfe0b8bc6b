"""One source video -> the bytes and facts of a shard sample, in a child process with a time limit.

`prepare_video` reads a video and turns it into what the configured store keeps: the video bytes
(copied, or re-encoded when asked), probed (`vidtx.media.probe.probe_video`), or its frames as JPEG
(which decodes every frame). A pathological file, a decoder bug or a stalled network mount could block that forever, or
crash the process, so the sharding job runs it through `VideoPreparer`: one child process per shard
that prepares the videos one after the other, and that is killed when a video takes more than
`timeout_s` seconds (the video is rejected with "timeout") or replaced when it dies (rejected with
"decoder crashed"). Either way the next video gets a fresh child and the shard goes on.
"""

from __future__ import annotations

import contextlib
import signal
import stat
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import TracebackType
from typing import Any

import av
import decord

from vidtx.config import ShardConfig
from vidtx.manifest import FRAMES_MEMBER, VIDEO_EXTENSIONS
from vidtx.media.decode import VideoDecodeError
from vidtx.media.encode import reencode
from vidtx.media.jpeg import video_to_frames
from vidtx.media.probe import VideoInfo, probe_video
from vidtx.processes import forkserver_context, sigterm_deferred


class RejectedVideoError(Exception):
    """A video that cannot be used; the message is the reason recorded in the rejects list."""


@dataclass(frozen=True)
class PreparedVideo:
    """A video made ready for its shard: the sample's members and the facts its json records."""

    # tar member name (without the key) -> its bytes, or the file to stream into it (a copied video
    # is never read whole): "mp4", "webm", ... or "frames"
    members: dict[str, bytes | Path]
    info: VideoInfo  # of what is stored (after any re-encode or conversion)
    extra: dict[str, Any]  # store-specific json fields: the frames store's byte offsets


def _check_file(path: Path, max_mb: float) -> None:
    """A readable regular file no larger than `max_mb`, or a RejectedVideoError saying why not."""
    try:
        status = path.stat()
        if stat.S_ISDIR(status.st_mode):
            raise RejectedVideoError("unreadable: a folder named like a video")
        if not stat.S_ISREG(status.st_mode):  # a FIFO (whose read would block), a socket, a device
            raise RejectedVideoError("unreadable: not a regular file")
        with path.open("rb"):
            pass
    except FileNotFoundError as err:
        raise RejectedVideoError("missing: file not found") from err
    except OSError as err:
        raise RejectedVideoError(f"unreadable: {err.strerror or err}") from err
    size = status.st_size
    if size > max_mb * 1e6:
        raise RejectedVideoError(f"too large: {size / 1e6:,.0f} MB > shard.max_video_mb {max_mb:g}")


def _source_size(path: Path) -> dict[str, int]:
    """The upright size of the source video, recorded beside the stored (scaled, even) one; probing
    it first also proves the file readable before it is decoded in full."""
    info = probe_video(path)
    return {"source_width": info.width, "source_height": info.height}


def _as_frames(path: Path, cfg: ShardConfig) -> PreparedVideo:
    source = _source_size(path)
    frames = video_to_frames(path, short_side=cfg.short_side, fps=cfg.fps, quality=cfg.jpeg_quality)
    info = VideoInfo(len(frames.offsets) - 1, frames.fps, frames.width, frames.height)
    return PreparedVideo({FRAMES_MEMBER: frames.data}, info, {"offsets": frames.offsets, **source})


def _as_video(path: Path, cfg: ShardConfig) -> PreparedVideo:
    if cfg.reencode is None:
        extension = path.suffix.lower() if path.suffix.lower() in VIDEO_EXTENSIONS else ".mp4"
        return PreparedVideo({extension[1:]: path}, probe_video(path), {})
    source = _source_size(path)
    try:
        data = reencode(path, cfg.reencode)
    except (av.FFmpegError, ValueError) as err:
        raise VideoDecodeError(f"re-encode failed ({err})") from err
    return PreparedVideo({"mp4": data}, probe_video(data), source)


def prepare_video(path: Path, cfg: ShardConfig) -> PreparedVideo:
    """The sample of the video at `path` for `cfg.store`; raises RejectedVideoError with the reason."""
    _check_file(path, cfg.max_video_mb)
    try:
        return _as_frames(path, cfg) if cfg.store == "frames" else _as_video(path, cfg)
    except VideoDecodeError as err:
        raise RejectedVideoError(str(err)) from err


def _serve(connection: Connection) -> None:
    """The child: announce itself, then prepare each (path, shard config) received and send back the
    result or the exception, until the parent closes the pipe."""
    # decord's FFmpeg prints every bad packet to stderr; the reject reason already says it in one line.
    decord.logging.set_level(decord.logging.FATAL)
    try:
        connection.send(None)
        while True:
            path, cfg = connection.recv()
            try:
                result: PreparedVideo | Exception = prepare_video(path, cfg)
            except Exception as err:  # sent to the parent, which re-raises it
                result = err
            connection.send(result)
    except (EOFError, ConnectionError):  # the parent closed the pipe, or was stopped: nobody waits
        return


def _exit_description(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


class VideoPreparer:
    """`prepare_video` in a child process, at most `timeout_s` seconds per video. Use it as a
    context manager (the child is started on the first video and stopped on exit)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._child: BaseProcess | None = None
        self._connection: Connection | None = None

    def __enter__(self) -> VideoPreparer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def prepare(self, path: Path, cfg: ShardConfig) -> PreparedVideo:
        """Like `prepare_video`; a video that overruns or kills the child is a RejectedVideoError."""
        child, connection = self._started()
        with contextlib.suppress(ConnectionError):  # a child that died idle: reported below
            connection.send((path, cfg))
        ready = wait([connection, child.sentinel], self.timeout_s)
        if connection in ready:  # a result, or the end of file of a child that died
            with contextlib.suppress(EOFError, ConnectionError):
                result = connection.recv()
                if isinstance(result, Exception):
                    raise result
                return result
        self.close()
        if not ready:
            raise RejectedVideoError(f"timeout: not probed within {self.timeout_s:g} s")
        raise RejectedVideoError(f"decoder crashed ({_exit_description(child.exitcode)})")

    def close(self) -> None:
        """Stop the child (a later `prepare` starts a new one)."""
        if self._child is not None and self._connection is not None:
            self._child.kill()  # it holds nothing worth a graceful stop, and may be stuck
            self._child.join()
            self._connection.close()
        self._child = self._connection = None

    def _started(self) -> tuple[BaseProcess, Connection]:
        if self._child is None or self._connection is None:
            # The server (once per process) imports this module and the program's: a child starts in
            # ~10 ms, not the 0.1-1.3 s of importing them itself (one child per shard).
            context = forkserver_context(__name__)
            self._connection, child_end = context.Pipe()
            self._child = context.Process(target=_serve, args=(child_end,), name="vidtx-prepare", daemon=True)
            with sigterm_deferred():  # a pool being stopped may SIGTERM this worker at any moment
                self._child.start()
                child_end.close()
                self._connection.recv()  # ready: imports done, so they do not count against the limit
        return self._child, self._connection
