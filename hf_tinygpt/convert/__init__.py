"""Conversions between GPT-2-family checkpoints and tinygpt folders (GPT-2, nanoGPT, GPT-NeoX), and verification
against transformers' GPT2LMHeadModel."""
