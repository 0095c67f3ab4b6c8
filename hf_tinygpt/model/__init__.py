"""The model: the configuration, the modeling code and the GPT-2 mapping are the bundle copied next to saved weights
(they import torch, transformers' public API and each other only); `params` counts where the parameters live."""
