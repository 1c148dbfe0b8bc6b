"""A long video decoded a few groups of pictures at a time, so that its length costs no memory.

decord's reader over a whole file holds about the encoded video from its opening, so a reader over an
hour of video grows with the hour (`benchmarks/long_videos.py`). Here decord only ever sees a small
MP4: the packets of the groups of pictures (keyframe to keyframe) that hold the frames asked for,
copied from the source without decoding (a remux) into memory. The frames are decord's own, pixel for
pixel, at the same size; what is held is one segment and a table of a few numbers per packet (its
timestamp, whether it is a keyframe, and what follows from those).

Frame i is the i-th in presentation order, as decord counts. A frame that comes after its keyframe in
decoding but is shown before it (an open group of pictures) also takes the group before, and a segment
with such a group after its first is read in order from its first frame: decord, seeking to a keyframe,
drops the leading frames of its group and miscounts the rest (whole file or segment alike). A segment
whose frame count differs from its packets' (a container the remux does not carry over faithfully), or
that decord cannot read, is answered by a reader over the whole video instead: more memory, the same
frames.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import av
import numpy as np

from vidtx.media.decode import (
    DecordVideo,
    Video,
    VideoDecodeError,
    VideoSource,
    open_container,
    open_video,
)
from vidtx.media.probe import VideoInfo, probe_video

log = logging.getLogger(__name__)

# A new segment runs on by whole groups to at least this many packets, so that the windows after the
# one that asked for it find their frames in it too (the memory it costs is about as many frames).
SEGMENT_PACKETS = 256


@dataclass(frozen=True)
class PacketTable:
    """A video stream's packets in decoding order: what is needed to cut it between keyframes."""

    pts: np.ndarray  # (N,) int64 presentation timestamps
    keyframes: np.ndarray  # (G,) positions of the packets that start a group (0 always among them)
    rotation: float  # the display rotation of the frames, degrees (copied to each segment)
    fps: float

    @functools.cached_property
    def position(self) -> np.ndarray:
        """(N,) each frame's packet: its place in decoding order."""
        return np.argsort(self.pts, kind="stable")

    @functools.cached_property
    def rank(self) -> np.ndarray:
        """(N,) each packet's frame index: its place in presentation order (`position` inverted)."""
        rank = np.empty(len(self.pts), dtype=np.int64)
        rank[self.position] = np.arange(len(self.pts))
        return rank

    @functools.cached_property
    def group(self) -> np.ndarray:
        """(N,) the group each packet belongs to (an index into `keyframes`)."""
        return np.searchsorted(self.keyframes, np.arange(len(self.pts)), side="right") - 1

    @functools.cached_property
    def leading(self) -> np.ndarray:
        """(N,) packets shown before their group's keyframe (an open group): they need the group before."""
        return self.pts < self.pts[self.keyframes[self.group]]

    @property
    def num_frames(self) -> int:
        return len(self.pts)

    def groups_needed(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(F,) each frame's first and last group to decode: its own, and the one before for a
        leading frame."""
        positions = self.position[frames]
        last = self.group[positions]
        first = np.where(self.leading[positions] & (last > 0), last - 1, last)
        return first, last

    @functools.cached_property
    def bounds(self) -> np.ndarray:
        """(G + 1,) the packet each group starts at, then the packet count."""
        return np.append(self.keyframes, self.num_frames)

    def span(self, first: int, last: int, min_packets: int) -> tuple[int, int]:
        """Packets [start, stop) of groups `first` to `last`, run on by whole groups to at least
        `min_packets` where the video goes on."""
        start = int(self.bounds[first])
        end = max(last + 1, int(np.searchsorted(self.bounds, start + min_packets)))
        return start, int(self.bounds[min(end, len(self.keyframes))])

    def reach(self, first: int, last: int, lasts: np.ndarray, max_packets: int) -> int:
        """The furthest of groups `last` and `lasts` that a segment from group `first` reaches with at
        most `max_packets` packets (`last` whatever it takes)."""
        fits = lasts[self.bounds[lasts + 1] - self.bounds[first] <= max_packets]
        return max(last, int(fits.max())) if fits.size else last

    def decodable(self, start: int, stop: int) -> np.ndarray:
        """The frames packets [start, stop) decode to, in presentation order: all but the leading
        frames of the first group, which the decoder drops for want of the group before."""
        dropped = self.leading[start:stop] & (self.group[start:stop] == self.group[start])
        return np.sort(self.rank[start:stop][~dropped])

    def reopens(self, start: int, stop: int) -> bool:
        """Whether a later group of packets [start, stop) has leading frames: decord, seeking to that
        group's keyframe, would drop them, so such a segment is decoded in order instead."""
        later = self.group[start:stop] > self.group[start]
        return bool(np.any(self.leading[start:stop] & later))


def packet_table(source: VideoSource) -> PacketTable:
    """The packet table of a video's first video stream, from its probe (one demux). Raises
    VideoDecodeError."""
    return table_from(probe_video(source, packets=True))


def table_from(info: VideoInfo) -> PacketTable:
    """The packet table of a video probed with its packets. Raises VideoDecodeError."""
    packets = info.packets
    assert packets is not None, "probed with packets=True"
    if packets.pts is None:
        raise VideoDecodeError("packets without timestamps: cannot be cut between keyframes")
    keys = packets.keyframes.copy()
    keys[0] = True  # a stream that does not start on a keyframe: its first packets are one group
    return PacketTable(
        pts=packets.pts, keyframes=np.flatnonzero(keys), rotation=packets.rotation, fps=info.fps
    )


def remuxed(container: av.container.InputContainer, table: PacketTable, start: int, stop: int) -> bytes:
    """Packets [start, stop) of an open video's stream, copied into a small MP4 (no decoding)."""
    output = io.BytesIO()
    with av.open(output, "w", format="mp4") as segment:
        stream = container.streams.video[0]
        copy = segment.add_stream_from_template(stream)
        if table.rotation:
            copy.set_display_rotation(table.rotation)
        container.seek(int(table.pts[start]), stream=stream, backward=True)  # a keyframe at or before
        position = None
        for packet in container.demux(stream):
            if not packet.size:
                continue
            if position is None and packet.pts == table.pts[start]:
                position = start
            if position is None:
                continue
            packet.stream = copy
            segment.mux(packet)
            position += 1
            if position == stop:
                break
        if position != stop:
            raise VideoDecodeError(f"packets {start}-{stop} could not be read back after a seek")
    return output.getvalue()


class SegmentedVideo:
    """decord's frames of a video, decoded from MP4s of the groups of pictures that hold them."""

    def __init__(
        self,
        source: VideoSource,
        *,
        width: int = -1,
        height: int = -1,
        num_threads: int = 1,
        table: PacketTable | None = None,
    ) -> None:
        """`table`: the video's packet table, where its probe has made it (else it is probed here)."""
        self._source, self._size, self._threads = source, (width, height), num_threads
        self._table = table if table is not None else packet_table(source)
        # the video stays open for its segments: opened again for each, an object in a bucket had its
        # header and index read again each time (about twice the bytes over a video)
        opened = contextlib.ExitStack()
        self._container = opened.enter_context(open_container(source))
        weakref.finalize(self, opened.close)
        self._whole: Video | None = None  # the reader over the whole video, once a segment fails
        # the last segment read: windows come in order, so the next ones often lie in it again, and its
        # reader goes on decoding forwards instead of from the keyframe
        self._last: tuple[int, int, DecordVideo] | None = None
        self.num_frames, self.fps = self._table.num_frames, self._table.fps

    def frames(self, indices: Sequence[int]) -> np.ndarray:
        wanted = np.asarray([int(i) for i in indices], dtype=np.int64)
        if not len(wanted) or wanted.min() < 0 or wanted.max() >= self.num_frames:
            raise VideoDecodeError(
                f"frames {wanted[:3].tolist()} asked for: not within 0-{self.num_frames - 1}"
            )
        if self._whole is None:
            try:
                return self._from_segments(wanted)
            except (VideoDecodeError, av.FFmpegError) as err:
                log.info("decoding the whole video instead of its segments: %s", err)
                size = self._size if self._size[0] > 0 else None
                self._whole = open_video(self._source, size=size, num_threads=self._threads)
        return self._whole.frames(wanted.tolist())

    def _from_segments(self, wanted: np.ndarray) -> np.ndarray:
        table = self._table
        unique, inverse = np.unique(wanted, return_inverse=True)
        first, last = table.groups_needed(unique)
        frames: np.ndarray | None = None  # (distinct, H, W, 3), in the order of `unique`
        pending = np.ones(len(unique), dtype=bool)
        while pending.any():
            earliest = int(np.flatnonzero(pending)[0])
            start, stop, reader, in_order = self._segment(
                int(first[earliest]), int(last[earliest]), last[pending]
            )
            held = pending & (first >= table.group[start]) & (last <= table.group[stop - 1])
            # (what decord counts: the segment's frames in presentation order)
            local = np.searchsorted(table.decodable(start, stop), unique[held])
            if in_order:
                decoded = reader.frames(range(local[-1] + 1))[local]
            else:
                decoded = reader.frames(local.tolist())
            if frames is None:
                frames = np.empty((len(unique), *decoded.shape[1:]), dtype=decoded.dtype)
            frames[held], pending[held] = decoded, False
        assert frames is not None, "frames are asked for"
        return frames[inverse]

    def _segment(self, first: int, last: int, lasts: np.ndarray) -> tuple[int, int, DecordVideo, bool]:
        """decord's reader of a segment holding groups `first` to `last` (packets [start, stop)), and
        whether its frames must be read in order from its first. Of closed groups: the last one read if
        it holds them, else a new one running on to `SEGMENT_PACKETS`, kept for the next windows. Where
        a later group of it is open, decord seeking to that group's keyframe would drop and miscount
        the group's leading frames: such a segment reaches as far among the groups `lasts` (the frames
        still wanted) as `SEGMENT_PACKETS` allows, is read from its first frame by a reader of its own,
        and is not kept."""
        table = self._table
        if self._last is not None:
            start, stop, reader = self._last
            if table.group[start] <= first and last <= table.group[stop - 1]:
                return start, stop, reader, False
        start, stop = table.span(first, last, SEGMENT_PACKETS)
        if not table.reopens(start, stop):
            self._last = (start, stop, self._reader(start, stop))
            return *self._last, False
        start, stop = table.span(first, table.reach(first, last, lasts, SEGMENT_PACKETS), 0)
        return start, stop, self._reader(start, stop), True

    def _reader(self, start: int, stop: int) -> DecordVideo:
        """decord's reader of packets [start, stop) remuxed into a small MP4."""
        width, height = self._size
        encoded = remuxed(self._container, self._table, start, stop)
        reader = DecordVideo(encoded, width=width, height=height, num_threads=self._threads)
        if reader.num_frames != stop - start:
            raise VideoDecodeError(f"a segment of {stop - start} packets reads as {reader.num_frames} frames")
        return reader


def open_segmented(
    source: VideoSource,
    *,
    size: tuple[int, int] | None = None,
    num_threads: int = 1,
    probed: VideoInfo | None = None,
) -> Video:
    """A video decoded segment by segment at `size` (width, height), cut by the packets of `probed`
    (its probe, made with `packets=True`) or of a probe of its own; one whose packets cannot be cut
    (no timestamps) is read whole (`open_video`)."""
    width, height = size or (-1, -1)
    try:
        table = table_from(probed) if probed is not None else None
        return SegmentedVideo(source, width=width, height=height, num_threads=num_threads, table=table)
    except VideoDecodeError as err:
        log.info("decoding the whole video: %s", err)
        return open_video(source, size=size, num_threads=num_threads)
