"""A synthetic video set for the pretraining science check (`benchmarks.pretraining_gain`): textured
objects over textured backgrounds, all moving coherently, so that what a masked patch holds follows
from what is visible (the texture continues, the motion carries it on): VideoMAE's per-patch
normalised targets are predictable here, unlike the static noise of `vidtx.shard.synthetic`'s
backgrounds, and reconstruction needs the motion.

Each clip: a background of a few random colour gratings (low spatial frequencies), panning at a random
velocity; one object, a shape filled with its own striped texture, crossing it. The class is the
object's shape (disk, square, triangle, ring) and which way it moves (left or right, at a random
speed and a random vertical drift): 8 classes, both shape and motion needed. Clips are made as uint8
arrays (N, T, H, W, 3), `seed` fixing every one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

SHAPES = ("disk", "square", "triangle", "ring")
DIRECTIONS = ("left", "right")
CLASSES = tuple(f"{shape} {direction}" for shape in SHAPES for direction in DIRECTIONS)


@dataclass(frozen=True)
class Grating:
    """A sum of colour gratings: one texture, drawn once, rendered wherever it has moved to."""

    directions: np.ndarray  # (W, 2): each wave's unit vector (y, x) times its angular frequency
    phases: np.ndarray  # (W,)
    colours: np.ndarray  # (W, 3) in [-1, 1]

    @classmethod
    def random(cls, rng: np.random.Generator, waves: int, period: tuple[float, float]) -> Grating:
        angles = rng.uniform(0, np.pi, waves)
        frequencies = 2 * np.pi / rng.uniform(*period, waves)
        directions = np.stack([np.sin(angles), np.cos(angles)], axis=1) * frequencies[:, None]
        return cls(directions, rng.uniform(0, 2 * np.pi, waves), rng.uniform(-1, 1, (waves, 3)))

    def render(self, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
        """The texture at the points (ys, xs), (H, W): (H, W, 3) in [0, 1]."""
        waves = np.sin(
            ys[..., None] * self.directions[:, 0] + xs[..., None] * self.directions[:, 1] + self.phases
        )
        return 0.5 + 0.5 * (waves @ self.colours) / len(self.phases)


def _inside(shape: str, dy: np.ndarray, dx: np.ndarray, radius: float) -> np.ndarray:
    """Whether the offsets (dy, dx) from the object's centre fall inside `shape` of `radius`."""
    distance = np.hypot(dy, dx)
    if shape == "disk":
        return distance <= radius
    if shape == "square":
        return np.maximum(abs(dy), abs(dx)) <= radius * 0.85
    if shape == "ring":
        return (distance <= radius) & (distance >= radius * 0.55)
    return (dy <= radius * 0.7) & (dy >= abs(dx) * 1.7 - radius)  # a triangle, apex up


def make_clip(label: int, size: int, frames: int, rng: np.random.Generator) -> np.ndarray:
    """One clip of class `label`: uint8 (T, size, size, 3)."""
    shape, direction = SHAPES[label // len(DIRECTIONS)], DIRECTIONS[label % len(DIRECTIONS)]
    ys, xs = np.mgrid[0:size, 0:size].astype(float)
    pan = rng.uniform(-1.5, 1.5, 2)  # the background's velocity, px / frame
    speed = rng.uniform(2.5, 4.0) * (1 if direction == "right" else -1)
    drift = rng.uniform(-1.0, 1.0)
    radius = rng.uniform(0.17, 0.24) * size
    start_x = size / 2 - speed * (frames - 1) / 2 + rng.uniform(-0.1, 0.1) * size  # centred path
    start_y = size * rng.uniform(0.35, 0.65)
    background, texture = Grating.random(rng, 3, (24, 64)), Grating.random(rng, 2, (8, 14))
    clip = np.empty((frames, size, size, 3))
    for t in range(frames):
        cy, cx = start_y + drift * t, start_x + speed * t  # the object's centre
        inside = _inside(shape, ys - cy, xs - cx, radius)[..., None]
        moved = texture.render(ys - cy, xs - cx)  # the object's texture moves with it
        clip[t] = np.where(inside, moved, background.render(ys + pan[0] * t, xs + pan[1] * t))
    return (clip * 255).round().clip(0, 255).astype(np.uint8)


def make_split(per_class: int, size: int, frames: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`per_class` clips of every class, in class order: uint8 (N, T, H, W, 3) and labels (N,)."""
    rng = np.random.default_rng(seed)
    labels = [label for label in range(len(CLASSES)) for _ in range(per_class)]
    clips = np.stack([make_clip(label, size, frames, rng) for label in labels])
    return torch.from_numpy(clips), torch.tensor(labels)
