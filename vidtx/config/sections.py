"""A config of the sections one command reads: the parameters of a flow that reads only those.

The Prefect UI draws a flow's run form from its parameters' JSON schema. A flow that took the whole
`PipelineConfig` showed every section, those it never reads included (train-model's form had Synth,
Shard and Predict, and described "the whole pipeline"). `sections_config(command)` builds a model of
exactly the sections `COMMAND_SECTIONS[command]` names, with PipelineConfig's own fields (types,
defaults, descriptions), so nothing is declared twice; `.pipeline()` makes it a whole config again
for the stages, every other section at its default.
"""

from __future__ import annotations

from pydantic import ConfigDict, create_model

from vidtx.config.base import StrictModel
from vidtx.config.fields import COMMAND_SECTIONS, ROOT, SECTIONS
from vidtx.config.schema import PipelineConfig


class SectionsConfig(StrictModel):
    """Some sections of a PipelineConfig. Validating a PipelineConfig (or any object with these
    attributes) takes just these sections, so a flow that reads them accepts the whole config too."""

    model_config = ConfigDict(from_attributes=True)

    def pipeline(self) -> PipelineConfig:
        """The whole config: these sections, every other at its default."""
        return PipelineConfig(**dict(self))


def sections_config(command: str, name: str, summary: str) -> type[SectionsConfig]:
    """The model `name` of the sections `command` reads, described as `summary` (the form's text)."""
    sections = COMMAND_SECTIONS[command]
    fields = {
        field_name: (field.annotation, field)
        for field_name, field in PipelineConfig.model_fields.items()
        if (field_name if field_name in SECTIONS else ROOT) in sections
    }
    doc = f"{summary}\n\nWhat it reads: {', '.join(fields)}; every other section keeps its default."
    return create_model(name, __base__=SectionsConfig, __doc__=doc, __module__=__name__, **fields)
