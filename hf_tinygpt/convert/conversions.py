"""Conversions between GPT-2-family checkpoints and tinygpt folders, built on the one mapping in `gpt2_layout`.

Sources: a GPT-2 folder or Hub id (`model_type: gpt2`), a single GPT-2 weights file (`.safetensors` / `.bin`),
or a nanoGPT `ckpt.pt`. Output folders are written to a temporary sibling and renamed into place only when
complete; an existing output is replaced only with `force=True`.
"""

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM
from transformers.initialization import no_init_weights

from ..folders.bundled import load_tokenizer
from ..folders.model_folder import DTYPES, save_model_folder
from ..folders.outputs import output_folder
from ..folders.reading import (
    at_one_revision,
    check_finite,
    check_state_dict,
    describe,
    has_tokenizer,
    load_strictly,
    read_config_dict,
    read_json_object,
    read_state_dict,
    reading_checkpoint,
    refuse_revision_of_a_local_path,
)
from ..model.configuration_tinygpt import TinyGPTConfig
from ..model.gpt2_layout import (
    HEAD,
    PREFIX,
    gpt2_fields_of_tinygpt,
    gpt2_state_dict_to_tinygpt,
    tinygpt_state_dict_to_gpt2,
)
from ..model.gpt_neox_layout import gpt_neox_fields_of_tinygpt, gpt_neox_legacy_fields, tinygpt_state_dict_to_gpt_neox
from ..model.modeling_tinygpt import TinyGPTForCausalLM
from ..model.positions import POSITION_SCHEME_CLASSES, PositionScheme
from ..settings import hub_kwargs, hub_revision, hub_token, setting
from .verify import check_tolerance, max_logit_delta, within_tolerance


@dataclass
class Source:
    """A checkpoint read into TinyGPT's form, and where its tokenizer (if any) can be loaded from."""

    config: TinyGPTConfig
    state_dict: dict[str, torch.Tensor]
    kind: str  # "gpt2" | "gpt2-weights-file" | "nanogpt"
    tokenizer_from: str | None


# ---- reading -------------------------------------------------------------------------------------------------


def read_source(src: str, *, n_head: int | None = None, trim_vocab: int | None = None, **hub_kwargs) -> Source:
    """Read any supported GPT-2-family source into a TinyGPT config and state dict: every tensor present, shaped
    as the config says, floating-point and finite, or a ValueError naming what is not."""
    refuse_revision_of_a_local_path(src, hub_kwargs)
    path = Path(src)
    with reading_checkpoint(src):
        hub_kwargs = at_one_revision(src, hub_kwargs)
        weights_file = path.is_file() and path.suffix in (".safetensors", ".bin") and not _is_nanogpt_file(path)
        nanogpt = not weights_file and path.is_file() and path.suffix in (".pt", ".pth", ".ckpt", ".bin")
        if n_head is not None and not (weights_file and _gpt2_config_beside(path) is None):
            raise ValueError(
                f"{src}: `n_head` applies to a lone GPT-2 weights file, whose shapes do not tell its heads; this "
                "source's config says them: leave `n_head` out"
            )
        if trim_vocab is not None and not nanogpt:
            raise ValueError(
                f"{src}: `trim_vocab` applies to a nanoGPT checkpoint (ckpt.pt), whose vocabulary is often padded; "
                "this source is none: leave `trim_vocab` out"
            )
        if weights_file:
            source = _read_gpt2_weights_file(path, n_head=n_head)
        elif nanogpt:
            source = _read_nanogpt(path, trim_vocab=trim_vocab)
        elif path.is_file():
            raise ValueError(f"{src}: unknown checkpoint format {path.suffix!r} (expected .safetensors, .bin or .pt)")
        else:
            config_dict = read_config_dict(src, **hub_kwargs)  # the one read of config.json: the model is built from it
            if config_dict.get("model_type") != "gpt2":
                raise ValueError(f"{src}: model_type is {config_dict.get('model_type')!r}, not 'gpt2'")
            model = load_strictly(src, config=config_dict, **hub_kwargs)  # the weights, read once; each tensor checked
            tokenizer_from = src if has_tokenizer(src, **hub_kwargs) else None
            source = Source(model.config, dict(model.state_dict()), "gpt2", tokenizer_from)
    if weights_file or nanogpt:  # a folder's weights were checked as they loaded (load_strictly)
        check_finite(source.state_dict, str(src))
    return source


def _is_nanogpt_file(path: Path) -> bool:
    if path.suffix == ".safetensors":
        return False
    try:
        checkpoint = torch.load(path, map_location="meta", weights_only=True)
    except Exception:
        return False
    return isinstance(checkpoint, dict) and "model_args" in checkpoint


def _gpt2_config_beside(path: Path) -> dict | None:
    """The GPT-2 config.json beside a weights file, which says what its shapes do not; None where there is none."""
    beside = read_json_object(path.parent / "config.json") if (path.parent / "config.json").is_file() else {}
    return beside if beside.get("model_type") == "gpt2" else None


def _read_gpt2_weights_file(path: Path, n_head: int | None) -> Source:
    """A lone GPT-2 weights file: a config.json beside it wins; otherwise the shapes give everything but the
    number of heads, which is n_embd / 64 for every released GPT-2 unless `n_head` says otherwise (and must say,
    where 64 does not divide n_embd), and a head other than wte is an untied one."""
    state_dict = gpt2_state_dict_to_tinygpt(read_state_dict(str(path)))
    if (beside := _gpt2_config_beside(path)) is not None:
        config = TinyGPTConfig.from_dict(beside)
    else:
        wte, wpe = state_dict.get(PREFIX + "wte.weight"), state_dict.get(PREFIX + "wpe.weight")
        fc = state_dict.get(PREFIX + "h.0.mlp.c_fc.weight")
        if wte is None or wpe is None or fc is None or not wte.dim() == wpe.dim() == fc.dim() == 2:
            raise ValueError(
                f"{path}: no 2-D wte.weight, wpe.weight and h.0.mlp.c_fc.weight: not a GPT-2 checkpoint "
                "(a config.json beside it would say what it is)"
            )
        n_layer = 1 + max(int(key.split(".")[2]) for key in state_dict if key.startswith(PREFIX + "h."))
        n_inner = state_dict[PREFIX + "h.0.mlp.c_fc.weight"].shape[0]
        n_embd = wte.shape[1]
        if n_head is None and n_embd % 64:
            raise ValueError(
                f"{path}: n_embd {n_embd} is not a multiple of 64, the head size of every released GPT-2, so the "
                "shapes do not tell its number of heads: put its config.json beside it, or convert it with `n_head` "
                "(hf-tinygpt convert SRC --n-head N)"
            )
        config = TinyGPTConfig(
            vocab_size=wte.shape[0],
            n_positions=wpe.shape[0],
            n_embd=n_embd,
            n_layer=n_layer,
            n_head=n_head or n_embd // 64,
            n_inner=None if n_inner == 4 * n_embd else n_inner,
            tie_word_embeddings=HEAD not in state_dict or torch.equal(state_dict[HEAD], wte),
        )
    check_state_dict(config, state_dict, source=str(path))
    return Source(config, state_dict, "gpt2-weights-file", None)


def _read_nanogpt(path: Path, trim_vocab: int | None) -> Source:
    """nanoGPT's `ckpt.pt`: {'model': state_dict, 'model_args': {...}, ...}, nn.Linear layout already.

    nanoGPT uses the exact (erf) GELU, optional `bias=False` (no LayerNorm/Linear biases: zero biases here are the
    same function), `_orig_mod.` key prefixes after torch.compile, and often a vocabulary padded to 50304.
    """
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # corrupt, or a pickle that would run code: weights_only refuses it
        raise ValueError(f"{path}: cannot read it as a checkpoint ({describe(error)})") from error
    if not isinstance(checkpoint, dict) or "model" not in checkpoint or "model_args" not in checkpoint:
        raise ValueError(f"{path}: not a nanoGPT checkpoint (expected a dict with 'model' and 'model_args')")
    args = checkpoint["model_args"]
    if not isinstance(args, dict) or not isinstance(checkpoint["model"], dict):
        raise ValueError(f"{path}: 'model' and 'model_args' must be dicts (a nanoGPT checkpoint)")
    if missing := sorted({"vocab_size", "block_size", "n_embd", "n_layer", "n_head"} - args.keys()):
        raise ValueError(f"{path}: model_args lacks {', '.join(missing)}")
    if not isinstance(args["vocab_size"], int):
        raise ValueError(f"{path}: model_args['vocab_size'] is {args['vocab_size']!r}, not an integer")
    if bad := [repr(k) for k, v in checkpoint["model"].items() if not (isinstance(k, str) and torch.is_tensor(v))]:
        raise ValueError(f"{path}: 'model' must map tensor names to tensors; not so for {', '.join(bad[:5])}")
    vocab_size = trim_vocab or args["vocab_size"]
    if vocab_size > args["vocab_size"]:
        raise ValueError(f"`trim_vocab` {vocab_size} is larger than the checkpoint's vocab_size {args['vocab_size']}")
    end_of_text = 50256 if vocab_size > 50256 else None  # GPT-2's; a character-level model has none
    dropout = args.get("dropout", 0.0)  # nanoGPT's one rate, 0.0 unless trained with another
    config = TinyGPTConfig(
        vocab_size=vocab_size,
        n_positions=args["block_size"],
        n_embd=args["n_embd"],
        n_layer=args["n_layer"],
        n_head=args["n_head"],
        activation_function="gelu",
        bos_token_id=end_of_text,
        eos_token_id=end_of_text,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )
    state_dict = {}
    for key, tensor in checkpoint["model"].items():
        key = key.removeprefix("_orig_mod.")
        if key.endswith(".attn.bias"):  # nanoGPT's causal-mask buffer (non-flash path)
            continue
        if key in (PREFIX + "wte.weight", HEAD):
            tensor = tensor[:vocab_size]
        state_dict[key] = tensor
    if not args.get("bias", True):
        with torch.device("meta"):
            expected = TinyGPTForCausalLM(config).state_dict()
        for key, tensor in expected.items():
            if key.endswith(".bias") and key not in state_dict:
                state_dict[key] = torch.zeros(tensor.shape, dtype=state_dict[PREFIX + "wte.weight"].dtype)
    check_state_dict(config, state_dict, source=str(path))
    return Source(config, state_dict, "nanogpt", None)


# ---- writing -------------------------------------------------------------------------------------------------


def model_from_state_dict(config: TinyGPTConfig, state_dict: dict, dtype: torch.dtype | None = None):
    """A TinyGPTForCausalLM holding exactly `state_dict` (built on the meta device: no random init, no copy)."""
    with torch.device("meta"):
        model = TinyGPTForCausalLM(config)
    if config.tie_word_embeddings:
        state_dict = {key: value for key, value in state_dict.items() if key != HEAD}
    model.load_state_dict(state_dict, strict=False, assign=True)
    model.tie_weights()
    for module in model.modules():  # computed buffers (rope/sinusoidal/alibi) were created on meta too
        if isinstance(module, PositionScheme):
            module.register_fixed_buffers()
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()


SAMPLE_TEXT = "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer"


def sample_ids(folder, vocab_size: int, n_positions: int | None = None) -> torch.Tensor:
    """SAMPLE_TEXT through the folder's own tokenizer, or the bundled GPT-2 one where it has none (ids folded into
    a tiny test vocabulary if need be), cut to the model's context (`n_positions`) where it is shorter."""
    tokenizer = load_tokenizer(folder if has_tokenizer(folder) else "gpt2")
    return tokenizer(SAMPLE_TEXT, return_tensors="pt").input_ids[:, :n_positions] % vocab_size


def _checked_delta(model_a, model_b, folder, tolerance: float, saved: torch.dtype) -> float:
    """max |Δlogits| of the two models on SAMPLE_TEXT, or a ValueError past `tolerance`; `saved`: the dtype the
    folder holds its weights in, read back in float32."""
    contexts = [getattr(m.config, "n_positions", None) or m.config.max_position_embeddings for m in (model_a, model_b)]
    ids = sample_ids(folder, model_a.config.vocab_size, min(contexts))
    delta, scale = max_logit_delta(model_a, model_b, ids)
    if not within_tolerance(delta, scale, tolerance):
        bf16 = " (bfloat16 needs ~0.05)" if saved == torch.bfloat16 else ""
        name = str(saved).removeprefix("torch.")
        why = "" if saved == torch.float32 else f"; weights saved in {name} move the logits: raise the tolerance{bf16}"
        raise ValueError(
            f"verification failed: max |Δlogits| {delta:.3g} > {tolerance:g} × {scale:.3g} (the logits' "
            f"scale){why}; nothing written"
        )
    return delta


def _source_description(src: str, source: Source) -> str:
    if source.kind == "nanogpt":
        return f"the nanoGPT checkpoint `{Path(src).name}`"
    if source.kind == "gpt2-weights-file":
        return f"the GPT-2 weights file `{Path(src).name}`"
    return f"the GPT-2 checkpoint `{src}`" if not Path(src).exists() else f"the GPT-2 folder `{Path(src).name}`"


def gpt2_to_tinygpt(
    src: str,
    out: str,
    *,
    tokenizer: str | None = None,
    dtype: str | None = None,
    force: bool = False,
    n_head: int | None = None,
    trim_vocab: int | None = None,
    verify_tolerance: float | None = None,
    base_model: str | None = None,
    license: str = "mit",
    **hub_kwargs,
) -> tuple[Path, Source, float | None]:
    """Convert any GPT-2-family source into a complete tinygpt folder with a model card; `tokenizer="gpt2"` uses
    the bundled BPE. With `verify_tolerance`, the written folder is read back and compared with transformers'
    `GPT2LMHeadModel` on the source's tensors before it is renamed into place. Returns (folder, source, Δ)."""
    from ..folders.model_card import render_model_card

    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"`dtype` must be one of {sorted(DTYPES)}, got {dtype!r}")
    with output_folder(
        out, force=force, protect={"`src`": src, "`tokenizer`": tokenizer}
    ) as staging:  # checks OUT before any expensive work
        source = read_source(src, n_head=n_head, trim_vocab=trim_vocab, **hub_kwargs)
        tokenizer_from = tokenizer or source.tokenizer_from
        if tokenizer_from is None:
            raise ValueError(f"{src} has no tokenizer files; pass `tokenizer='gpt2'` to bundle the GPT-2 BPE tokenizer")
        if base_model is None and source.kind == "gpt2" and not Path(src).exists():
            base_model = src  # a Hub id
        description = _source_description(src, source)
        model = model_from_state_dict(source.config, dict(source.state_dict), DTYPES.get(dtype))
        save_model_folder(model, staging, tokenizer=tokenizer_from)
        delta = None
        if verify_tolerance is not None:
            reference = reference_gpt2(source)
            converted = load_strictly(staging, dtype=torch.float32).eval()
            delta = _checked_delta(converted, reference, staging, verify_tolerance, saved=model.dtype)
        provenance = {"made_by": "conversion", "source_description": description, "max_abs_logit_delta": delta}
        card = render_model_card(
            model.config, model_id=str(out), provenance=provenance, license=license, base_model=base_model
        )
        card.save(staging / "README.md")
    return Path(out), source, delta


def reference_gpt2(source: Source) -> GPT2LMHeadModel:
    """transformers' GPT2LMHeadModel on the source's own tensors, in fp32: the reference a verified conversion is
    compared with (built from the source, not from the converted model)."""
    state_dict = tinygpt_state_dict_to_gpt2(source.state_dict, source.config)  # learned positions: no rows needed
    config = GPT2Config(**gpt2_fields_of_tinygpt(source.config))
    return _filled(GPT2LMHeadModel, config, lambda head: state_dict).float()


def export_gpt2(model) -> GPT2LMHeadModel:
    """transformers' GPT2LMHeadModel with the same math as `model` (learned, sinusoidal or no positions; scaled or
    untied embeddings; see `gpt2_layout`), or a ValueError naming why there is none."""
    config = GPT2Config(**gpt2_fields_of_tinygpt(model.config))
    rows = model.transformer.positions.added_rows(model.config.n_positions, model.config.n_embd)  # GPT-2's wpe
    state_dict = tinygpt_state_dict_to_gpt2(model.state_dict(), model.config, rows)
    return _filled(GPT2LMHeadModel, config, lambda head: state_dict)  # GPT-2's head is `lm_head` in every version


def export_gpt_neox(model) -> GPTNeoXForCausalLM:
    """transformers' GPTNeoXForCausalLM with the same math as a rope `model` (see `gpt_neox_layout`)."""
    config = GPTNeoXConfig(**gpt_neox_fields_of_tinygpt(model.config))
    for name, value in gpt_neox_legacy_fields(model.config).items():
        setattr(config, name, value)
    return _filled(
        GPTNeoXForCausalLM, config, lambda head: tinygpt_state_dict_to_gpt_neox(model.state_dict(), model.config, head)
    )


def _filled(model_class, config, state_dict_for):
    """`model_class(config)` holding the tensors `state_dict_for(name of its output matrix)` gives (no copy). It is
    built uninitialised rather than on the meta device, so that buffers no state dict holds (RoPE's `inv_freq`) are
    computed by the class itself."""
    with no_init_weights():
        target = model_class(config)
    head = next(name for name, module in target.named_modules() if module is target.get_output_embeddings())
    missing, unexpected = target.load_state_dict(state_dict_for(f"{head}.weight"), strict=False, assign=True)
    if unexpected or set(missing) - ({f"{head}.weight"} if config.tie_word_embeddings else set()):  # tied: wte
        raise ValueError(f"{model_class.__name__} export: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    target.tie_weights()
    return target.eval()


EXPORTS = {"gpt2": (export_gpt2, GPT2LMHeadModel), "gpt_neox": (export_gpt_neox, GPTNeoXForCausalLM)}


def export_tinygpt(
    src: str,
    out: str,
    *,
    to: str = "gpt2",
    tokenizer: str | None = None,
    dtype: str | None = None,
    force: bool = False,
    verify_tolerance: float | None = None,
    **hub_kwargs,
) -> tuple[Path, float | None]:
    """A tinygpt → its exact twin among transformers' own architectures, in a folder that class loads: GPT-2 for
    learned, sinusoidal or no positions, GPT-NeoX for rope (`to`; anything else is refused with the reason). The
    folder is complete for engines: GPT-2's legacy `n_ctx`, and a tokenizer (`tokenizer`, else SRC's, else the
    bundled GPT-2 one when SRC relies on it: no tokenizer of its own and GPT-2's vocabulary). `dtype` stores the
    weights in that dtype. With `verify_tolerance`, the written folder is read back by the target class and compared
    (in fp32, with SRC) before the rename."""
    if to not in EXPORTS:
        raise ValueError(f"`to` must be one of {sorted(EXPORTS)}, got {to!r}")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"`dtype` must be one of {sorted(DTYPES)}, got {dtype!r}")
    export, target_class = EXPORTS[to]
    with output_folder(out, force=force, protect={"`src`": src, "`tokenizer`": tokenizer}) as staging:
        hub_kwargs = at_one_revision(src, hub_kwargs)  # the model and its tokenizer from one commit of a Hub repo
        with reading_checkpoint(src):
            model = load_strictly(src, **hub_kwargs)
        scheme = model.config.position_embedding_type
        if reason := POSITION_SCHEME_CLASSES[scheme].no_exact_twin:
            raise ValueError(
                f"position_embedding_type={scheme!r} has no exact twin among transformers' architectures: {reason}"
            )
        target = export(model)  # a ValueError naming what the target cannot express
        tokenizer_from = tokenizer or (src if has_tokenizer(src, **hub_kwargs) else None)
        if tokenizer_from is None and len(load_tokenizer("gpt2")) <= model.config.vocab_size:
            tokenizer_from = "gpt2"  # what `hf-tinygpt generate` gives a folder without one: the bundled tokenizer
        saved = DTYPES.get(dtype, model.dtype)
        save_model_folder(target.to(saved), staging, tokenizer=tokenizer_from)
        delta = None
        if verify_tolerance is not None:
            exported = load_strictly(staging, target_class, dtype=torch.float32).eval()
            delta = _checked_delta(exported, model.float().eval(), staging, verify_tolerance, saved=saved)
    return Path(out), delta


# ---- the convert verb ----------------------------------------------------------------------------------------


@dataclass
class Converted:
    """What `convert` wrote: the folder, what it read (a conversion to tinygpt; None for an export), and the
    verification's max |Δlogits| and tolerance (per unit of the logits' scale; both None when not verified)."""

    folder: Path
    to: str
    source: Source | None
    delta: float | None
    tolerance: float | None

    @property
    def form(self) -> str:
        """What the folder holds, in a few words: "gpt2 → tinygpt, 12 layers, n_embd 768", "GPT2LMHeadModel format"."""
        if self.source is None:
            return f"{EXPORTS[self.to][1].__name__} format"
        return f"{self.source.kind} → tinygpt, {self.source.config.n_layer} layers, n_embd {self.source.config.n_embd}"


@dataclass
class ConversionSettings:
    """What `convert` (`hf-tinygpt convert`) is asked to do."""

    src: str = setting(
        help="GPT-2 folder or Hub id, a .safetensors/.bin weights file, or a nanoGPT ckpt.pt (with `to='gpt2'`: a "
        "tinygpt folder or Hub id)",
        positional=True,
        reads=True,
    )
    out: str = setting(help="the converted model folder (written atomically)", metavar="DIR")
    force: bool = setting(False, "replace an earlier output of hf-tinygpt at `out`")
    to: str = setting(
        "tinygpt",
        "output format: tinygpt, or the exact twin among transformers' architectures (gpt2 for learned, sinusoidal "
        "or no positions; gpt_neox for rope)",
        choices=["tinygpt", *EXPORTS],
    )
    tokenizer: str | None = setting(
        None,
        "the tokenizer to bundle (default: `src`'s): 'gpt2' (the GPT-2 BPE shipped here), or a folder or Hub id",
        metavar="gpt2|PATH",
        reads=True,
    )
    dtype: str | None = setting(
        None,
        "store the weights in this dtype (default: as `src` stores them)",
        choices=["float32", "float16", "bfloat16"],
    )
    verify: bool = setting(False, "compare with GPT2LMHeadModel before writing (always done with `to` gpt2 | gpt_neox)")
    tolerance: float = setting(
        1e-5,
        "largest max |Δlogits| against GPT2LMHeadModel that `verify` accepts, per unit of the logits' scale, "
        "max(1, max |logit|) (for fp32; bf16 needs ~0.05)",
        minimum=0,
    )
    n_head: int | None = setting(
        None,
        "heads, for a lone weights file without config.json (default: n_embd / 64, as every released GPT-2; "
        "needed where n_embd is not a multiple of 64)",
        minimum=1,
    )
    trim_vocab: int | None = setting(
        None, "nanoGPT: keep the first N token rows (e.g. 50257 of 50304; default: keep them all)", minimum=1
    )
    base_model: str | None = setting(None, "Hub id of the source, for the model card (default: `src` if a Hub id)")
    license: str | None = setting(None, "licence for the model card (default: mit, as GPT-2's weights)")
    revision: str | None = hub_revision()
    token: str | None = hub_token()


def convert(settings: ConversionSettings) -> Converted:
    """Any GPT-2-family source → a tinygpt folder (`to="tinygpt"`, `gpt2_to_tinygpt`; verified with `verify`), or a
    tinygpt → its twin among transformers' classes (`to="gpt2" | "gpt_neox"`, `export_tinygpt`), which is always
    verified: an export is for engines that will not check it. `n_head`, `trim_vocab`, `base_model` and `license`
    (default mit) describe a conversion to tinygpt: with an export they are refused, not ignored."""
    s = settings
    hub = hub_kwargs(s)
    if s.to != "tinygpt" and s.to not in EXPORTS:
        raise ValueError(f"`to` must be one of {sorted(['tinygpt', *EXPORTS])}, got {s.to!r}")
    check_tolerance(s.tolerance)
    written = dict(tokenizer=s.tokenizer, dtype=s.dtype, force=s.force, **hub)
    if s.to == "tinygpt":
        verify_tolerance = s.tolerance if s.verify else None
        folder, source, delta = gpt2_to_tinygpt(
            s.src,
            s.out,
            n_head=s.n_head,
            trim_vocab=s.trim_vocab,
            verify_tolerance=verify_tolerance,
            base_model=s.base_model,
            license=s.license or "mit",
            **written,
        )
        return Converted(folder, s.to, source, delta, verify_tolerance)
    for_tinygpt_only = {
        "n_head": s.n_head,
        "trim_vocab": s.trim_vocab,
        "base_model": s.base_model,
        "license": s.license,
    }
    if given := [f"`{name}`" for name, value in for_tinygpt_only.items() if value is not None]:
        raise ValueError(f"{', '.join(given)} only apply to a conversion to tinygpt, not with `to={s.to!r}`")
    folder, delta = export_tinygpt(s.src, s.out, to=s.to, verify_tolerance=s.tolerance, **written)
    return Converted(folder, s.to, None, delta, s.tolerance)
