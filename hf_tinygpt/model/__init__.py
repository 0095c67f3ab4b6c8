"""The model: the configuration, the modeling code, the position schemes and the modules they import are the bundle
copied next to saved weights (they import torch, transformers' public API and each other only). Beside the bundle:
`gpt_neox_layout` (the GPT-NeoX mapping, for export) and `params` (where the parameters live)."""

# The bundle: what `save_pretrained` copies beside the weights (transformers follows the modeling file's imports).
BUNDLE = (
    "configuration_tinygpt.py",
    "checks.py",
    "modeling_tinygpt.py",
    "positions.py",
    "positions_interface.py",
    "positions_learned.py",
    "positions_sinusoidal.py",
    "positions_rope.py",
    "positions_xpos.py",
    "positions_alibi.py",
    "positions_t5.py",
    "positions_kerple.py",
    "positions_fire.py",
    "positions_cope.py",
    "positions_stick_breaking.py",
    "positions_none.py",
    "compat.py",
    "gpt2_layout.py",
    "int8.py",
    "pretrained.py",
    "tensor_parallel.py",
)
