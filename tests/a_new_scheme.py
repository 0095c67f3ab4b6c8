"""A scheme added the way a contributor adds one: one class and `register_position_scheme`, nothing else in the
package touched.

conftest registers it when HF_TINYGPT_NEW_SCHEME is set (test_a_new_scheme.py sets it for a run of the generic
checks), so every check that walks the registry takes this scheme without being told its name."""

import torch
from torch import nn
from transformers import initialization as init

from hf_tinygpt.model.checks import is_positive_number, require
from hf_tinygpt.model.positions import AttentionBias


class LogDistanceBias(AttentionBias):
    """`log_distance`: b_h(i, j) = −s_h · log(1 + (i − j)), a learned steepness s_h per head, starting at
    `log_distance_steepness` (a bias of this shape is KERPLE's log kernel with r2 = 1; it is here as a worked example
    of adding a scheme, not as a scheme of the literature)."""

    name = "log_distance"
    known_as = "log-distance bias"
    config_fields = {"log_distance_steepness": 0.5}
    pictures = ("log_distance_bias", "token_vs_position")
    bias_title = "log-distance: −s_h · log(1 + distance), per head"

    @classmethod
    def check_config(cls, config):
        steepness = config.log_distance_steepness
        require(config, "log_distance_steepness", is_positive_number(steepness), "a finite number > 0")

    def __init__(self, config):
        super().__init__(config)
        self.initial_steepness = config.log_distance_steepness
        self.steepness = nn.Parameter(torch.empty(config.n_head))

    def init_parameters(self):
        init.constant_(self.steepness, self.initial_steepness)

    def bias_of_distance(self, distance, query_positions):
        return -self.steepness[:, None, None] * torch.log1p(distance)
