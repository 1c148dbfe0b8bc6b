"""What a sharding job tells about the dataset as a whole: the files under it that are not videos of it
(`<output>/ignored.jsonl`, one `{"path", "reason"}` per line, next to the splits' rejects), and one
line that counts what was found, sharded, rejected and ignored.

Rejects belong to a split (a video that was meant to be sharded); ignored files belong to no split
(hidden files, non-videos, stray or nested videos, unreadable folders, an unlabelled Kinetics CSV),
so they are written once per dataset.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from vidtx import storage
from vidtx.locations import Location
from vidtx.manifest import Manifest, recorded_name
from vidtx.shard.records import Source
from vidtx.storage import join

IGNORED_FILE = "ignored.jsonl"

log = logging.getLogger(__name__)


def write_ignored(output: Location, source: Source) -> Location:
    """`<output>/ignored.jsonl` (empty when nothing was ignored, so a re-run never leaves a stale one)."""
    storage.make_folder(output)
    path = join(output, IGNORED_FILE)
    entries = [
        {"path": recorded_name(storage.relative_name(item.path, source.root)), "reason": item.reason}
        for item in source.ignored
    ]
    storage.write_text(path, "".join(json.dumps(entry) + "\n" for entry in entries))
    if entries:
        log.warning(
            "%d file(s) under %s ignored (not videos of the dataset): see %s", len(entries), source.root, path
        )
    return path


def shard_summary(output: Location, manifests: Mapping[str, Manifest]) -> str:
    """One line for `vidtx shard`: 'N found: S sharded, R rejected, I ignored (see .../ignored.jsonl)'."""
    sharded = sum(manifest.num_samples for manifest in manifests.values())
    rejected = sum(len(manifest.rejects) for manifest in manifests.values())
    ignored_file = join(output, IGNORED_FILE)
    ignored = len(storage.read_text(ignored_file).splitlines()) if storage.is_file(ignored_file) else 0
    found = sharded + rejected + ignored
    return f"{found} found: {sharded} sharded, {rejected} rejected, {ignored} ignored (see {ignored_file})"
