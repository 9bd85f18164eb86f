"""Architecture name (config.json "architectures") -> our model class."""

from __future__ import annotations

from torch import nn

from strixlm.models.llama import LlamaForCausalLM, Qwen2ForCausalLM
from strixlm.models.nemotron_h import NemotronHForCausalLM
from strixlm.models.qwen3 import Qwen3ForCausalLM
from strixlm.models.qwen3_moe import Qwen3MoeForCausalLM

MODEL_REGISTRY: dict[str, type[nn.Module]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
    "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM,
    "NemotronHForCausalLM": NemotronHForCausalLM,
}


def get_model_class(hf_config) -> type[nn.Module]:
    archs = getattr(hf_config, "architectures", None) or []
    for arch in archs:
        if arch in MODEL_REGISTRY:
            return MODEL_REGISTRY[arch]
    raise ValueError(
        f"model architecture {archs or '(none given)'} is not supported; "
        f"supported: {', '.join(sorted(MODEL_REGISTRY))}"
    )
