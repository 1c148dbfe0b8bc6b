"""The scenes of the synthetic videos (`vidtx.shard.synthetic`): a darkish textured background and
anti-aliased shapes, each moving along one motion axis (horizontal, vertical, scale, depth) from a
start state to an end state, drawn frame by frame."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

State = np.ndarray  # (3,) float: centre x, centre y, radius, in pixels
SHAPES = ("disc", "square", "triangle", "diamond", "ring", "cross")


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


def background_of(rng: np.random.Generator, size: int) -> np.ndarray:
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


def sample_object(motion: str, rng: np.random.Generator, size: int, background: np.ndarray) -> Scene:
    """An object moving along `motion`'s axis over `background`."""
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


def render_objects(objects: Sequence[tuple[Scene, bool]], num_frames: int) -> np.ndarray:
    """Frames of every (scene, reverse) object over the first one's background, each moving from its
    start to its end (or back), later objects drawn over earlier ones; uint8 (T, H, W, 3)."""
    background = objects[0][0].background  # (H, W, 3) float
    size = background.shape[0]
    y, x = np.mgrid[0:size, 0:size] + 0.5
    frames = np.empty((num_frames, size, size, 3), np.uint8)
    for t, u in enumerate(np.linspace(0.0, 1.0, num_frames)):
        canvas = background
        for scene, reverse in objects:
            cos, sin = np.cos(scene.angle), np.sin(scene.angle)
            cx, cy, radius = scene.start + (1 - u if reverse else u) * (scene.end - scene.start)
            dx, dy = x - cx, y - cy
            distance = _signed_distance(scene.shape, cos * dx + sin * dy, -sin * dx + cos * dy, radius)
            coverage = np.clip(0.5 - distance, 0.0, 1.0)[..., None]  # (H, W, 1) anti-aliased edge
            canvas = canvas + coverage * (scene.color - canvas)
        frames[t] = np.clip(canvas, 0, 255)
    return frames


PLACEMENT_TRIES = 50  # draws of an object's motion that may touch the others before one is kept anyway


def apart(scene: Scene, others: Sequence[Scene], num_frames: int) -> bool:
    """Whether `scene` never touches one of `others` (circles around the shapes, at every frame; the
    same forwards and backwards, as both move along their whole path in the same time)."""
    u = np.linspace(0.0, 1.0, num_frames)[:, None]
    path = scene.start + u * (scene.end - scene.start)  # (T, 3): x, y, radius
    for other in others:
        along = other.start + u * (other.end - other.start)
        gap = np.hypot(*(path[:, :2] - along[:, :2]).T) - 1.2 * (path[:, 2] + along[:, 2])
        if (gap <= 0).any():
            return False
    return True
