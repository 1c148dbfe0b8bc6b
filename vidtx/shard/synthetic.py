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
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vidtx.config import SynthConfig
from vidtx.log import track
from vidtx.media.encode import encode_mp4

log = logging.getLogger(__name__)

State = np.ndarray  # (3,) float: centre x, centre y, radius, in pixels
SHAPES = ("disc", "square", "triangle", "diamond", "ring", "cross")
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


@dataclass(frozen=True)
class Scene:
    shape: str
    angle: float
    color: np.ndarray  # (3,) uint8-valued floats
    background: np.ndarray  # (H, W, 3) float
    start: State
    end: State


def _horizontal(rng: np.random.Generator, size: int) -> tuple[State, State]:
    radius = rng.uniform(0.09, 0.15) * size
    distance = rng.uniform(0.35, 0.6) * size
    low = rng.uniform(radius, size - radius - distance)
    y = rng.uniform(radius, size - radius)
    return np.array([low, y, radius]), np.array([low + distance, y, radius])


def _vertical(rng: np.random.Generator, size: int) -> tuple[State, State]:
    start, end = _horizontal(rng, size)
    return start[[1, 0, 2]], end[[1, 0, 2]]


def _scale(rng: np.random.Generator, size: int) -> tuple[State, State]:
    small = rng.uniform(0.06, 0.09) * size
    big = small * rng.uniform(2.0, 2.6)
    centre = rng.uniform(big, size - big, 2)
    return np.array([*centre, small]), np.array([*centre, big])


def _depth(rng: np.random.Generator, size: int) -> tuple[State, State]:
    """Far and near states of an object at a fixed offset from the optical axis: its image offset
    from the frame centre and its radius both scale with 1 / depth."""
    near_radius = rng.uniform(0.13, 0.18) * size
    angle = rng.uniform(0, 2 * np.pi)
    reach = size / 2 - near_radius  # keeps the near object inside the frame
    offset = rng.uniform(0.6, 1.0) * reach * np.array([np.cos(angle), np.sin(angle)])
    offset *= reach / max(reach, np.abs(offset).max())
    far = rng.uniform(0.35, 0.5)
    centre = np.full(2, size / 2)
    return np.array([*(centre + far * offset), far * near_radius]), np.array(
        [*(centre + offset), near_radius]
    )


TRAJECTORIES: dict[str, Callable[[np.random.Generator, int], tuple[State, State]]] = {
    "horizontal": _horizontal,
    "vertical": _vertical,
    "scale": _scale,
    "depth": _depth,
}


LUMA = np.array([0.299, 0.587, 0.114])


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A random gradient between two darkish colours with static noise texture, (H, W, 3) float."""
    first, second = rng.uniform(0, 140, (2, 3))
    angle = rng.uniform(0, 2 * np.pi)
    y, x = np.mgrid[0:size, 0:size] / size
    ramp = ((x - 0.5) * np.cos(angle) + (y - 0.5) * np.sin(angle) + 0.71) / 1.42  # in [0, 1]
    texture = rng.normal(0, 8, (size, size, 1))
    return first + ramp[..., None] * (second - first) + texture


def _object_color(rng: np.random.Generator, background: np.ndarray) -> np.ndarray:
    """Any hue, but clearly brighter than the background: small models learn motion in minutes
    when the object always stands out the same way (with free contrast polarity they need far
    longer)."""
    floor = background.reshape(-1, 3).max(axis=0) @ LUMA + 70
    while True:
        color = rng.uniform(0, 255, 3)
        if color @ LUMA >= min(floor, 200):
            return color


def sample_scene(motion: str, rng: np.random.Generator, size: int) -> Scene:
    background = _background(rng, size)
    color = _object_color(rng, background)
    start, end = TRAJECTORIES[motion](rng, size)
    return Scene(str(rng.choice(SHAPES)), rng.uniform(0, 2 * np.pi), color, background, start, end)


def _signed_distance(shape: str, x: np.ndarray, y: np.ndarray, radius: float) -> np.ndarray:
    """Signed distance in pixels (negative inside) to a shape centred at the origin, roughly."""
    ax, ay = np.abs(x), np.abs(y)
    if shape == "disc":
        return np.hypot(x, y) - radius
    if shape == "square":
        return np.maximum(ax, ay) - 0.8 * radius
    if shape == "diamond":
        return (ax + ay - radius) / np.sqrt(2)
    if shape == "ring":
        return np.abs(np.hypot(x, y) - 0.7 * radius) - 0.3 * radius
    if shape == "cross":
        bar = 0.35 * radius
        return np.minimum(np.maximum(ax - radius, ay - bar), np.maximum(ay - radius, ax - bar))
    normals = [
        (np.cos(a), np.sin(a)) for a in (np.pi / 2, np.pi / 2 + 2 * np.pi / 3, np.pi / 2 + 4 * np.pi / 3)
    ]
    return np.max([nx * x + ny * y - radius / 2 for nx, ny in normals], axis=0)  # triangle


def render(scene: Scene, num_frames: int, reverse: bool = False) -> np.ndarray:
    """Frames moving from `scene.start` to `scene.end` (or back), uint8 (T, H, W, 3)."""
    size = scene.background.shape[0]
    y, x = np.mgrid[0:size, 0:size] + 0.5
    cos, sin = np.cos(scene.angle), np.sin(scene.angle)
    frames = np.empty((num_frames, size, size, 3), np.uint8)
    for t, u in enumerate(np.linspace(0.0, 1.0, num_frames)):
        cx, cy, radius = scene.start + (1 - u if reverse else u) * (scene.end - scene.start)
        dx, dy = x - cx, y - cy
        distance = _signed_distance(scene.shape, cos * dx + sin * dy, -sin * dx + cos * dy, radius)
        coverage = np.clip(0.5 - distance, 0.0, 1.0)[..., None]  # anti-aliased edge
        frames[t] = np.clip(scene.background + coverage * (scene.color - scene.background), 0, 255)
    return frames


def render_video(cfg: SynthConfig, class_name: str, split: str, index: int) -> np.ndarray:
    """Video `index` of a class in a split, uint8 (T, H, W, 3); both classes of a pair share scenes."""
    motion = next(m for m, pair in PAIRS.items() if class_name in pair)
    split_id = SPLIT_SEEDS.get(split, sum(split.encode()))
    rng = np.random.default_rng([cfg.seed, split_id, list(PAIRS).index(motion), index])
    return render(sample_scene(motion, rng, cfg.size), cfg.num_frames, reverse=class_name == PAIRS[motion][1])


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


def generate_dataset(cfg: SynthConfig) -> Path:
    """Write the videos and `annotations.csv` under `cfg.output`; returns the annotations path."""
    classes = cfg.classes or list(CLASSES)
    unknown = set(classes) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown synthetic classes {sorted(unknown)}; choose from {list(CLASSES)}")
    jobs = [
        (split, name, index)
        for split, count in cfg.videos_per_class.items()
        for name in classes
        for index in range(count)
    ]
    rows = []
    for split, name, index in track(jobs, "synth", total=len(jobs)):
        relative = Path(split, name, f"{index:05d}.mp4")
        path = cfg.output / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_mp4(render_video(cfg, name, split, index), cfg.fps))
        rows.append((relative.as_posix(), name, split))
    annotations = cfg.output / "annotations.csv"
    with annotations.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["path", "label", "split"])
        writer.writerows(rows)
    log.info("wrote %d videos of %d classes to %s", len(rows), len(classes), cfg.output)
    return annotations
