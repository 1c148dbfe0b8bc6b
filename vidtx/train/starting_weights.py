"""`model.init_from`: a training that starts from the weights of an earlier one.

The source is whatever `vidtx.train.checkpoint.trained_model` reads: a Ray checkpoint of a vidtx run,
a vidtx `.pt` file, or a registered model (`models:/<name>@<alias>`), with the class names it was
trained on. Classes are compared by name: the same classes, in any order, keep the source's
classifier (its rows put in this run's order); other classes get this model's new classifier, as
initialised, and every other tensor is loaded. A source that does not record its class names (a
`.pt` file) is compared by count. The report says which tensors came from the source and which kept
their initialisation, and is logged with the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from vidtx.models import VideoTransformer
from vidtx.train.checkpoint import TrainedModel


@dataclass
class StartReport:
    """What `start_from` did."""

    source: str
    loaded: list[str]
    initialised: list[str]  # the tensors of this model that kept their initialisation
    classes: str  # how the class sets compared
    ignored: list[str] = field(default_factory=list)  # tensors of the source this model has no place for

    def text(self) -> str:
        lines = [f"initialised from {self.source}: {self.classes}", f"loaded ({len(self.loaded)}):"]
        lines += [f"  {name}" for name in self.loaded]
        lines += [
            f"kept as initialised ({len(self.initialised)}):",
            *(f"  {name}" for name in self.initialised),
        ]
        if self.ignored:
            lines += [f"not used ({len(self.ignored)}):", *(f"  {name}" for name in self.ignored)]
        return "\n".join(lines) + "\n"


def classifier_names(model: nn.Module, num_classes: int) -> list[str]:
    """The names of the classifier's tensors: those of the last linear layer under `head` with one
    output per class (`head.fc` of the classifier heads, `head.fc2` of the temporal-attention head)."""
    (name, _), *_ = [
        (name, module)
        for name, module in reversed(list(model.named_modules()))
        if name.startswith("head") and isinstance(module, nn.Linear) and module.out_features == num_classes
    ]
    return [f"{name}.{tensor}" for tensor, _ in model.get_submodule(name).named_parameters()]


def start_from(
    model: VideoTransformer, source: TrainedModel, class_names: list[str], where: str
) -> StartReport:
    """Load `source`'s weights into `model`, which is to learn `class_names`; what was done."""
    weights = source.module.state_dict()
    target = model.state_dict()
    classifier = classifier_names(model, len(class_names))
    if source.class_names is None:
        same = len(class_names) == next((len(weights[n]) for n in classifier if n in weights), 0)
        order = list(range(len(class_names))) if same else None
        classes = f"{'the same number of' if same else 'other'} classes (the source records no class names)"
    elif sorted(source.class_names) == sorted(class_names):
        order = [source.class_names.index(name) for name in class_names]
        classes = "the same classes: its classifier continues"
    else:
        order = None
        new = sorted(set(class_names) - set(source.class_names))
        classes = f"other classes (new: {', '.join(new) or 'none'}): a new classifier"
    loaded, initialised = [], []
    with torch.no_grad():
        for name, tensor in target.items():
            incoming = weights.get(name)
            if name in classifier and incoming is not None and order is not None:
                incoming = incoming[order]  # (classes, ...) rows in this run's class order
            if incoming is None or incoming.shape != tensor.shape or (name in classifier and order is None):
                initialised.append(name)
                continue
            tensor.copy_(incoming)
            loaded.append(name)
    ignored = sorted(set(weights) - set(target))
    return StartReport(where, loaded, initialised, classes, ignored)
