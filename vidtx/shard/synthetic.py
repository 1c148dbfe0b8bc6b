"""A generated dataset of real MP4 videos whose class only the order of the frames tells.

The classes come in time-reversed pairs: moving right / left, down / up, growing / shrinking,
approaching / receding (growing while drifting away from the centre, as perspective makes an object
coming closer do). Video i of one class of a pair is video i of the other class played backwards:
both render the same scene (random shape, colour of any hue brighter than the background, rotation,
darkish textured gradient background, start and end state, hence speed). So the set of frames of a video, and any single frame, is equally likely under
both classes of its pair; a model that ignores frame order cannot beat 50%, one that reads motion
can reach 100%. This is the Something-Something property in miniature.

Layout: `OUT/<split>/<class>/<index>.mp4` plus `OUT/annotations.csv` (`path,label,split`), readable
as `--format csv` or `--format folder`. Deterministic: the same config writes the same bytes.

Several labels per video (`synth.objects_per_video` N > 1): each video shows N shapes over one
background, each moving along another motion axis (so never both classes of a time-reversed pair:
every label stays decidable from frame order), each in either direction. Video i of a split has
class i mod C (of the C classes) among its labels, the others drawn; the layout is
`OUT/<split>/<index>.mp4`, and annotations.csv joins a video's labels with `LABEL_SEPARATOR` ("|":
shard it with `shard.label_separator: "|"`, quoted in YAML). One object per video writes what it
always has.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vidtx.config import SynthConfig
from vidtx.log import track
from vidtx.media.encode import encode_mp4
from vidtx.shard.scenes import PLACEMENT_TRIES, Scene, apart, background_of, render_objects, sample_object

log = logging.getLogger(__name__)

PAIRS = {  # motion -> (forward class, backward class)
    "horizontal": ("moving_right", "moving_left"),
    "vertical": ("moving_down", "moving_up"),
    "scale": ("growing", "shrinking"),
    "depth": ("approaching", "receding"),
}
CLASSES = tuple(name for pair in PAIRS.values() for name in pair)
# class -> its time-reversed partner
PARTNER = dict(PAIRS.values()) | {backward: forward for forward, backward in PAIRS.values()}
SPLIT_SEEDS = {"train": 0, "val": 1, "validation": 1, "test": 2}
LABEL_SEPARATOR = "|"  # joins the labels of a video with several objects in annotations.csv


def sample_scene(motion: str, rng: np.random.Generator, size: int) -> Scene:
    return sample_object(motion, rng, size, background_of(rng, size))


def render(scene: Scene, num_frames: int, reverse: bool = False) -> np.ndarray:
    """Frames moving from `scene.start` to `scene.end` (or back), uint8 (T, H, W, 3)."""
    return render_objects([(scene, reverse)], num_frames)


def _motion(class_name: str) -> str:
    return next(motion for motion, pair in PAIRS.items() if class_name in pair)


def _split_id(split: str) -> int:
    return SPLIT_SEEDS.get(split, sum(split.encode()))


def render_video(cfg: SynthConfig, class_name: str, split: str, index: int) -> np.ndarray:
    """Video `index` of a class in a split, uint8 (T, H, W, 3); both classes of a pair share scenes."""
    motion = _motion(class_name)
    rng = np.random.default_rng([cfg.seed, _split_id(split), list(PAIRS).index(motion), index])
    return render(sample_scene(motion, rng, cfg.size), cfg.num_frames, reverse=class_name == PAIRS[motion][1])


def _multi_object_rng(cfg: SynthConfig, split: str, index: int, purpose: int) -> np.random.Generator:
    """A generator of video `index` of a split with several objects, for its labels (`purpose` 0) or
    its scene (1): streams that no single-object video uses."""
    seeds = [cfg.seed, _split_id(split), len(PAIRS), cfg.objects_per_video, index, purpose]
    return np.random.default_rng(seeds)


def video_labels(cfg: SynthConfig, classes: Sequence[str], split: str, index: int) -> tuple[str, ...]:
    """The `cfg.objects_per_video` classes of video `index` of a split, one per motion axis, in the
    order of `CLASSES`: class `index` mod len(classes) and others of `classes` drawn on other axes."""
    rng = _multi_object_rng(cfg, split, index, 0)
    chosen = [classes[index % len(classes)]]
    while len(chosen) < cfg.objects_per_video:
        used = {_motion(name) for name in chosen}
        chosen.append(str(rng.choice([name for name in classes if _motion(name) not in used])))
    return tuple(sorted(chosen, key=CLASSES.index))


def render_multi_object_video(cfg: SynthConfig, labels: Sequence[str], split: str, index: int) -> np.ndarray:
    """Video `index` of a split showing one object per class of `labels` (`video_labels`) over one
    background, uint8 (T, H, W, 3). An object's motion is drawn again while it would touch (and so
    hide) one already placed, `PLACEMENT_TRIES` times at most: every label stays visible."""
    rng = _multi_object_rng(cfg, split, index, 1)
    background = background_of(rng, cfg.size)
    scenes: list[Scene] = []
    for name in labels:
        for _ in range(PLACEMENT_TRIES):
            scene = sample_object(_motion(name), rng, cfg.size, background)
            if apart(scene, scenes, cfg.num_frames):
                break
        scenes.append(scene)
    objects = [(scene, name == PAIRS[_motion(name)][1]) for scene, name in zip(scenes, labels, strict=True)]
    return render_objects(objects, cfg.num_frames)


def order_blind_ceiling(classes: list[str]) -> float:
    """The best top-1 a model blind to frame order can expect on balanced classes: 1/2 on a class
    whose time-reversed partner is among `classes` (it must guess between the two), 1 on the others."""
    paired = sum(PARTNER[name] in classes for name in classes)
    return (paired / 2 + len(classes) - paired) / len(classes)


def frame_order_verdict(top1: float, classes: list[str]) -> str:
    """One line: does this top-1 show that the model reads frame order?"""
    ceiling = order_blind_ceiling(classes)
    shown = "reads frame order" if top1 > ceiling + 0.1 else "does not show that it reads frame order"
    return (
        f"top-1 {top1:.3f} vs {ceiling:.2f}, the most a model blind to frame order can reach here "
        f"(the classes come in time-reversed pairs): the model {shown}"
    )


def _videos(cfg: SynthConfig, classes: list[str]) -> list[tuple[Path, tuple[str, ...], str, int]]:
    """(path relative to the output, labels, split, index) of every video the config asks for."""
    if cfg.objects_per_video == 1:
        return [
            (Path(split, name, f"{index:05d}.mp4"), (name,), split, index)
            for split, count in cfg.videos_per_class.items()
            for name in classes
            for index in range(count)
        ]
    if len(axes := {_motion(name) for name in classes}) < cfg.objects_per_video:
        raise ValueError(
            f"objects_per_video {cfg.objects_per_video} needs classes of as many motion axes; "
            f"{classes} have {len(axes)}"
        )
    return [
        (Path(split, f"{index:05d}.mp4"), video_labels(cfg, classes, split, index), split, index)
        for split, count in cfg.videos_per_class.items()
        for index in range(count * len(classes))
    ]


def generate_dataset(cfg: SynthConfig) -> Path:
    """Write the videos and `annotations.csv` under `cfg.output`; returns the annotations path."""
    classes = cfg.classes or list(CLASSES)
    unknown = set(classes) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown synthetic classes {sorted(unknown)}; choose from {list(CLASSES)}")
    rows = []
    for relative, labels, split, index in track(_videos(cfg, classes), "synth"):
        path = cfg.output / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if len(labels) == 1:
            frames = render_video(cfg, labels[0], split, index)
        else:
            frames = render_multi_object_video(cfg, labels, split, index)
        path.write_bytes(encode_mp4(frames, cfg.fps))
        rows.append((relative.as_posix(), LABEL_SEPARATOR.join(labels), split))
    annotations = cfg.output / "annotations.csv"
    with annotations.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["path", "label", "split"])
        writer.writerows(rows)
    log.info("wrote %d videos of %d classes to %s", len(rows), len(classes), cfg.output)
    if cfg.objects_per_video > 1:
        separator = f"--set 'shard.label_separator=\"{LABEL_SEPARATOR}\"'"
        log.info("labels joined with %r in %s: shard it with %s", LABEL_SEPARATOR, annotations, separator)
    return annotations
