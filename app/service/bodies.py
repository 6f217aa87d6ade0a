"""The JSON bodies the service takes, as pydantic models: FastAPI validates them and writes their OpenAPI schema
from these types (no schema patching), and the form and the CLI validate through the same models.

`model` is one of four shapes, a tagged union: a preset name, `{"preset": name, ...ModelSpec overrides}`,
`{"hf_config": {...config.json...}, "seq_length": N, ...overrides}` or every ModelSpec field. `cluster` is a saved
cluster (`{"saved": name, ...ClusterSpec overrides}`) or a description whose `gpu` is a catalogue name,
`{"preset": name, ...GPUSpec overrides}` or every GPUSpec field. The tags (`as:...`) never reach the user: error
fields are the request's own paths (app/service/errors.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
)

from app.planner import catalog, strict
from app.planner.gpu import GPUSpec
from app.planner.hf_import import longest_context, model_type
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.render import RenderOptions

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def _known_preset(name: str) -> str:
    catalog.model_fields(name)  # ValueError naming the known presets
    return name


def _known_gpu(name: str) -> str:
    catalog.gpu(name)
    return name


PresetName = Annotated[
    str,
    AfterValidator(_known_preset),
    Field(
        description="A model preset (GET /catalog/models), e.g. llama-2-70b.",
        json_schema_extra={"enum": [row["name"] for row in catalog.model_presets()]},
    ),
]
GPUName = Annotated[
    str,
    AfterValidator(_known_gpu),
    Field(
        description="A catalogue GPU (GET /catalog/gpus), e.g. H100-SXM.",
        json_schema_extra={"enum": [gpu.name for gpu in catalog.gpus()]},
    ),
]
ClusterName = Annotated[
    str,
    Field(pattern=NAME_PATTERN, description="A saved cluster's name (GET /clusters): letters, digits, '.', '_', '-'."),
]


class PresetModel(BaseModel):
    """A preset with some of its fields changed: `{"preset": name, ...ModelSpec fields}`."""

    model_config = ConfigDict(frozen=True, extra="allow")
    preset: PresetName


class HFConfigModel(BaseModel):
    """A Hugging Face config.json and the training sequence length (config.json has only the longest context the
    model supports, `max_position_embeddings`, which is rarely the length one trains at); other keys override
    ModelSpec fields (e.g. `name`)."""

    model_config = ConfigDict(
        frozen=True,
        extra="allow",
        json_schema_extra=lambda schema: schema.setdefault("required", []).append("seq_length"),  # type: ignore[union-attr]
    )
    hf_config: dict[str, Any] = Field(description="The contents of the model's config.json.")
    seq_length: int | None = Field(
        None,
        ge=1,
        le=4_194_304,
        validate_default=True,
        description="Training sequence length in tokens (required: a config.json gives only max_position_embeddings).",
    )

    @field_validator("hf_config")
    @classmethod
    def _known_type(cls, config: dict[str, Any]) -> dict[str, Any]:
        model_type(config)  # a model type the import refuses is the first thing to say, before the sequence length
        return config

    @field_validator("seq_length", mode="before")
    @classmethod
    def _asked_for(cls, value: object, info: ValidationInfo) -> object:
        if value is None and "hf_config" in info.data:  # (a refused config.json is the one error)
            config = info.data["hf_config"]
            raise ValueError(
                "give the sequence length to train at: config.json says only how long a context the model "
                f"supports ({longest_context(config)}), and planning at that length is rarely meant"
            )
        # true was 1 token a sample and "8192" 8192, where a preset's length refuses both (QA 2026-12-07)
        return strict.check(cls, value, info)


def _model_kind(value: object) -> str:
    if isinstance(value, str):
        return "as:name"
    if isinstance(value, PresetModel) or (isinstance(value, dict) and "preset" in value):
        return "as:preset"
    if isinstance(value, HFConfigModel) or (isinstance(value, dict) and "hf_config" in value):
        return "as:hf_config"
    return "as:spec"


ModelInput = Annotated[
    Annotated[PresetName, Tag("as:name")]
    | Annotated[PresetModel, Tag("as:preset")]
    | Annotated[HFConfigModel, Tag("as:hf_config")]
    | Annotated[ModelSpec, Tag("as:spec")],
    Discriminator(_model_kind),
    Field(description="A preset name, a preset with overrides, a config.json, or every ModelSpec field."),
]


class GPUPreset(BaseModel):
    """A catalogue GPU with some numbers changed: `{"preset": name, ...GPUSpec fields}`."""

    model_config = ConfigDict(frozen=True, extra="allow")
    preset: GPUName


def _gpu_kind(value: object) -> str:
    if isinstance(value, str):
        return "as:name"
    if isinstance(value, GPUPreset) or (isinstance(value, dict) and "preset" in value):
        return "as:preset"
    return "as:spec"


GPUInput = Annotated[
    Annotated[GPUName, Tag("as:name")] | Annotated[GPUPreset, Tag("as:preset")] | Annotated[GPUSpec, Tag("as:spec")],
    Discriminator(_gpu_kind),
]


class ClusterDescription(ClusterSpec):
    """ClusterSpec as a request writes it: `gpu` may be a catalogue name or a catalogue GPU with overrides.
    (ClusterSpec's own validator resolves those shorthands into a GPUSpec first; the union is the accepted
    shapes as the schema shows them.)"""

    model_config = ConfigDict(title="ClusterDescription")
    gpu: GPUInput = Field(description="GPU type: a catalogue name, a catalogue GPU with overrides, or custom numbers.")  # type: ignore[assignment]

    @field_validator("profile", mode="before")
    @classmethod
    def _no_booleans(cls, profile: object) -> object:
        """A profile holds no yes/no values: a JSON true/false is a mistake, not the number 1/0 that pydantic's lax
        floats would read (ClusterProfile itself accepts it; reported for app/planner)."""
        stack: list[tuple[object, str]] = [(profile, "profile")]
        while stack:
            node, where = stack.pop()
            if isinstance(node, bool):
                raise ValueError(f"{where}: {node!r} is not a number (send the measured value)")
            if isinstance(node, dict):
                stack += [(v, f"{where}.{k}") for k, v in node.items()]
            elif isinstance(node, list):
                stack += [(v, f"{where}.{i}") for i, v in enumerate(node)]
        return profile

    def spec(self) -> ClusterSpec:
        """The planner's ClusterSpec of it (the fields are validated already)."""
        return ClusterSpec.model_validate(dict(self))


class SavedClusterRef(BaseModel):
    """A saved cluster (POST /clusters), optionally with some of its fields changed: `{"saved": name,
    "num_nodes": 16}`. The plan stores the description as it was then, so later edits never change it."""

    model_config = ConfigDict(frozen=True, extra="allow")
    saved: ClusterName


def _cluster_kind(value: object) -> str:
    saved = isinstance(value, SavedClusterRef) or (isinstance(value, dict) and "saved" in value)
    return "as:saved" if saved else "as:spec"


ClusterInput = Annotated[
    Annotated[SavedClusterRef, Tag("as:saved")] | Annotated[ClusterDescription, Tag("as:spec")],
    Discriminator(_cluster_kind),
    Field(description="A cluster description, or a saved cluster by name."),
]


class Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    _plain_types = field_validator("*", mode="before")(strict.check)  # no "10" or true for a number


class PlanBody(Body):
    """POST /plans: what to plan, on what, how, and (optionally) how the files are written."""

    model: ModelInput
    cluster: ClusterInput
    training: TrainingSpec
    render: RenderOptions | None = Field(
        None, description="Optional: how the plan's files are written (job name, paths, data, launch settings)."
    )


class EstimateBody(Body):
    """POST /estimate: one fixed layout (`parallel`) of a model on a cluster."""

    model: ModelInput
    cluster: ClusterInput
    training: TrainingSpec
    parallel: ParallelConfig
