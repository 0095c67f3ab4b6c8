"""The model: the configuration, the modeling code, the position schemes and the modules they import are the bundle
copied next to saved weights (they import torch, transformers' public API and each other only). Beside the bundle:
`gpt_neox_layout` (the GPT-NeoX mapping, for export) and `params` (where the parameters live)."""

from pathlib import Path

# The bundle: what `save_pretrained` copies beside the weights (transformers follows the modeling file's imports):
# these, and the positions chapter, every file of which positions.py imports.
BUNDLE = (
    "configuration_tinygpt.py",
    "checks.py",
    "modeling_tinygpt.py",
    "compat.py",
    "gpt2_layout.py",
    "pretrained.py",
    "tensor_parallel.py",
    *sorted(path.name for path in Path(__file__).parent.glob("positions*.py")),
)
