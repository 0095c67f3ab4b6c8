"""What differs between the transformers versions TinyGPT supports (5.16 to 5.24), in one place.

transformers 5.24 renamed the cache argument and output field from `past_key_values` to `cache`. The forwards take
both names; `renamed_cache_argument` gives the old one transformers' own deprecation warning where the new one
exists (as on its in-tree models), and outputs fill `CACHE_FIELD`, whichever field this version's classes have.
Before 5.24, `generate` passes the old name, so it is plainly accepted. `PromptsCheckedManager` refuses what
transformers' continuous batching takes and cannot run. Part of the model bundle.
"""

import transformers
from transformers import ContinuousBatchingManager
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils.deprecation import deprecate_kwarg

CACHE_FIELD = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"


# From 5.24 a model updates continuous batching's paged cache itself (`cache.update(..., kwargs=kwargs)`, as
# LlamaAttention does); before, transformers' paged kernels did, which the schemes' own attentions never call.
MODELS_UPDATE_THE_PAGED_CACHE = tuple(int(part) for part in transformers.__version__.split(".")[:2]) >= (5, 24)


def renamed_cache_argument(forward):
    if CACHE_FIELD == "cache":
        return deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")(forward)
    return forward


try:  # 5.24 resolves a revision to its commit once per load, and every later read reuses that commit
    from transformers.utils.hub import resolve_revision
except ImportError:

    def resolve_revision(path_or_repo_id, revision=None, **hub_kwargs):
        return revision


class PromptsCheckedManager(ContinuousBatchingManager):
    """transformers' continuous batching manager, refusing a request of no tokens by name before it joins the batch:
    transformers (5.24, 5.25) takes one, and then its generation loop fails on a batch of no tokens (which stops
    `transformers serve`'s model process) or, beside other requests, answers it from another request's last logits."""

    def add_request(self, input_ids, request_id=None, *args, **kwargs):
        if len(input_ids) == 0:
            raise ValueError(
                f"request {request_id}'s `input_ids` are empty: a request needs at least one token to go on from "
                "(for a prompt of no text, the tokenizer's BOS token)"
            )
        return super().add_request(input_ids, request_id, *args, **kwargs)
