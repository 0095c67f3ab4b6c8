"""The `kerple` scheme: a learned kernel of the distance (KERPLE).
One file of the positions chapter (positions.py); part of the model bundle."""

import torch
from torch import nn
from transformers import initialization as init

from .positions_interface import AttentionBias


def at_least(value: torch.Tensor, floor: float, ceiling: float | None = None) -> torch.Tensor:
    """`value` clamped to [floor, ceiling], with the gradient of `value` itself (a straight-through clamp)."""
    return value + (value.clamp(min=floor, max=ceiling) - value).detach()


class KerpleBias(AttentionBias):
    """`kerple` (Chi et al. 2022): a conditionally positive definite kernel of the distance, per head h,
        log   (`kerple_kernel="log"`):   b_h(i, j) = −r1_h · log(1 + r2_h · (i − j))
        power (`kerple_kernel="power"`): b_h(i, j) = −r1_h · (i − j)^r2_h,  r2_h ≤ 2
    with r1, r2 learned and kept ≥ 0.01, as the authors' code keeps them; drawn at the start as theirs are (log:
    r1 ~ U(0, 2), r2 ~ U(0, 1); power: r1 ~ U(0, 1), r2 ~ U(0, 2)).

    The authors clamp the stored parameters in place at every forward; here the clamp is applied to the value used,
    with the gradient passed straight through, so the forward is theirs and no forward writes to a parameter
    (which torch.compile, torch.export and FSDP need). A parameter pushed past a bound stays there, bounded.
    """

    name = "kerple"
    known_as = "KERPLE"
    config_fields = {"kerple_kernel": "log"}
    KERNELS = ("log", "power")
    bias_title = "KERPLE ({kernel}): per-head kernel of distance"
    where_it_acts = "kerple adds nothing to the embeddings: it biases the attention scores by a kernel of distance"
    pictures = ("kerple_bias", "token_vs_position")
    no_gpt2_twin = (
        "KERPLE biases the attention scores by a learned kernel of distance, which GPT-2's attention does not"
    )
    exact_twin = None
    no_exact_twin = (
        "none has KERPLE's kernel bias. KERPLE TinyGPTs run as they are: transformers (eager or sdpa attention) or ONNX"
        " Runtime"
    )

    @classmethod
    def check_config(cls, config):
        if config.kerple_kernel not in cls.KERNELS:
            raise ValueError(f"kerple_kernel={config.kerple_kernel!r} is not one of {cls.KERNELS}")

    def __init__(self, config):
        super().__init__(config)
        self.kernel = config.kerple_kernel
        self.r1 = nn.Parameter(torch.empty(config.n_head))
        self.r2 = nn.Parameter(torch.empty(config.n_head))

    def init_parameters(self):
        init.uniform_(self.r1, 0.0, 2.0 if self.kernel == "log" else 1.0)
        init.uniform_(self.r2, 0.0, 1.0 if self.kernel == "log" else 2.0)

    def bias_of_distance(self, distance, query_positions):
        r1 = at_least(self.r1, 0.01)[:, None, None]
        if self.kernel == "log":
            return -r1 * torch.log1p(at_least(self.r2, 0.01)[:, None, None] * distance)
        return -r1 * distance.pow(at_least(self.r2, 0.01, 2.0)[:, None, None])
