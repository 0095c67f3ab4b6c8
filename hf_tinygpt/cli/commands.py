"""`hf-tinygpt`: the package's command line. Each verb is a thin layer over a library function.

Conventions shared by every verb: a folder it writes is `--out DIR` (written atomically, replaced only with
`--force`, see hf_tinygpt/folders/outputs.py); a model that may be a Hub id comes with `--revision` and
`--token`; a comparison with GPT2LMHeadModel accepts `--tolerance` (max |Δlogits| per unit of the logits' scale,
max(1, max |logit|); default 1e-5).
"""

import argparse
import contextlib
import gc
import importlib.metadata
import os
import shlex
import signal
import sys

from ..convert.conversions import ConversionSettings
from ..convert.verify import VerificationSettings
from ..explore.settings import ExploreSettings
from ..folders.outputs import refuse_inputs
from ..folders.reading import read_tinygpt_config
from ..generate.text import GenerationSettings
from ..hub.settings import PushSettings, SpacePushSettings
from ..model.params import parameter_breakdown
from ..plots.settings import PlotSettings, is_scheme_name
from ..settings import hub_kwargs, hub_revision, hub_token
from ..train.settings import SMALL_MODEL, ModelShape, TrainingSettings
from .errors import in_flags, presented
from .flags import HelpFormatter, add_settings_arguments, add_verb, input_path, settings_values
from .start_up import exiting_the_command, interrupted_while_starting

# ---- shared by the verbs -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def no_progress_bars():
    """transformers' progress bars off for a while (the setting is process-wide: put back as it was)."""
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            logging.enable_progress_bar()


# ---- generate ----------------------------------------------------------------------------------------------------


def run_generate(args) -> int:
    from ..generate.text import generate_from

    settings = GenerationSettings(**settings_values(args, GenerationSettings))
    with no_progress_bars():  # the continuation is the output: no "Loading weights" bar around it
        generate_from(settings)
    return 0


# ---- params ------------------------------------------------------------------------------------------------------


def add_params_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("model", type=input_path, help="model folder, Hub id, or config.json (tinygpt or GPT-2)")
    parser.add_argument("--revision", help=hub_revision().metadata["help"])
    parser.add_argument("--token", help=hub_token().metadata["help"])


def run_params(args) -> int:
    if is_scheme_name(args.model):  # else asked of the Hub, as an id
        raise ValueError(
            f"{args.model} is a position scheme's name, not a model: params counts a model folder's, a config.json's "
            f"or a Hub repo's parameters (`hf-tinygpt plot-positions {args.model}` draws an untrained one)"
        )
    config = read_tinygpt_config(args.model, **hub_kwargs(args))
    parts = parameter_breakdown(config)
    width = max(map(len, parts))
    print(
        f"{args.model}: {config.position_embedding_type} positions, {config.n_layer} "
        f"layer{'s' * (config.n_layer != 1)}, n_embd {config.n_embd}, {config.n_head} head{'s' * (config.n_head != 1)}, "
        f"vocab {config.vocab_size}"
    )
    for name, count in parts.items():
        note = " (tied to token_embedding)" if name == "lm_head" and config.tie_word_embeddings else ""
        print(f"  {name:<{width}}  {count:>14,}{note}")
    return 0


# ---- plot-positions ----------------------------------------------------------------------------------------------


def run_plot_positions(args) -> int:
    from ..plots.positions import draw_positions

    with no_progress_bars():
        model, label, arrays, files = draw_positions(PlotSettings(**settings_values(args, PlotSettings)))
    count = f"{len(files)} file" + "s" * (len(files) != 1)
    print(f"{label}: {model.config.position_embedding_type} positions; wrote {count}:")
    for path in files:
        print(f"  {path}")
    tokens = arrays["token_vs_position"]
    if tokens["pair"]:
        first, second = tokens["pair"]
        repeated = f"repeated token {tokens['tokens'][first]!r} at positions {first} and {second}"
        if where := model.config.position_scheme().where_it_acts:  # nothing added: the two rows stay one row
            print(f"{repeated}: the same row before and after positions ({where})")
        else:
            print(f"{repeated}: cosine similarity {tokens['before']:.4f} before positions, {tokens['after']:.4f} after")
    return 0


# ---- explore -----------------------------------------------------------------------------------------------------


def add_serve_arguments(parser: argparse.ArgumentParser):
    parser.add_argument(
        "model",
        type=input_path,
        help="a tinygpt model folder or Hub id to serve (or one of transformers' own architectures)",
    )
    parser.add_argument(
        "serve_options",
        nargs=argparse.REMAINDER,
        metavar="...",
        help="transformers serve's own options, as `transformers serve --help` lists them: --host (default "
        "localhost), --port (8000), --continuous-batching, --cb-num-blocks, ...",
    )


def run_serve(args) -> int:
    from ..generate.serving import serve

    return serve(args.model, args.serve_options)


def run_explore(args) -> int:
    from ..explore.settings import read_long_text

    settings = ExploreSettings(**settings_values(args, ExploreSettings))
    long_text = read_long_text(settings.long_text)
    if settings.out:
        from ..explore.space import write_space

        with no_progress_bars():
            files = write_space(
                settings.out,
                settings.models,
                long_text=long_text,
                force=settings.force,
                hub_kwargs=hub_kwargs(settings),
            )
        shown = {name: size for name, size in files.items() if not name.startswith("hf_tinygpt/")}
        package = sum(size for name, size in files.items() if name.startswith("hf_tinygpt/"))
        print(f"wrote the Space folder {settings.out}:")
        for name, size in {**shown, "hf_tinygpt/ (the package)": package}.items():
            print(f"  {name:<28}  {size:>12,} bytes")
        print(f"publish it: hf-tinygpt push-space {settings.out} OWNER/NAME")
        return 0
    from ..explore.app import build_app, launch
    from ..explore.views import load_models

    with no_progress_bars():
        models = load_models(settings.models, hub_kwargs=hub_kwargs(settings))
    demo = build_app(models, long_text=long_text)
    print(", ".join(f"{shown.label} ({shown.model.config.position_embedding_type})" for shown in models))
    launch(demo, server_name="127.0.0.1", server_port=settings.port or None)  # loopback only: nothing is shared
    return 0


# ---- verify-gpt2 -------------------------------------------------------------------------------------------------


def run_verify_gpt2(args) -> int:
    from ..convert.verify import verify_gpt2_checkpoint

    settings = VerificationSettings(**settings_values(args, VerificationSettings))
    source = settings.model or "a GPT-2 small with random weights (seed 0), made here by transformers"
    result = verify_gpt2_checkpoint(
        settings.model,
        settings.text,
        tolerance=settings.tolerance,
        loading=lambda: print(
            f"Loading {source} into transformers' GPT2LMHeadModel and into TinyGPT, both in float32 ..."
        ),
        **hub_kwargs(settings),
    )
    print(f"parameters: {result['parameters']:,}")
    print(
        f"max |Δlogits| on {args.text!r}: {result['max_abs_logit_delta']:.3g} (tolerance {result['tolerance']:g} × "
        f"the logits' scale {result['logit_scale']:.3g})"
    )
    print(f"greedy continuation, GPT2LMHeadModel: {result['gpt2_text']!r}")
    print(f"greedy continuation, TinyGPT:         {result['tinygpt_text']!r}")
    print("OK: identical" if result["ok"] else "MISMATCH")
    return 0 if result["ok"] else 1


# ---- convert -----------------------------------------------------------------------------------------------------


def run_convert(args) -> int:
    from ..convert.conversions import convert

    converted = convert(ConversionSettings(**settings_values(args, ConversionSettings)))
    if converted.delta is not None:
        print(
            f"verify: max |Δlogits| = {converted.delta:.3g}, within the tolerance {converted.tolerance:g} × the "
            "logits' scale, max(1, max |logit|)"
        )
    print(f"wrote {converted.folder} ({converted.form})")
    return 0


# ---- train -------------------------------------------------------------------------------------------------------


def add_train_arguments(parser: argparse.ArgumentParser):
    groups = add_settings_arguments(parser, TrainingSettings, groups=("data", "model", "optimisation", "output"))
    groups["model"].description = (
        "Default: a small model that trains on a CPU in minutes "
        f"({SMALL_MODEL['n_layer']} layers, n_embd {SMALL_MODEL['n_embd']}, {SMALL_MODEL['n_head']} heads, "
        "learned positions). --config and these flags change it; flags win."
    )
    groups["model"].add_argument("--token", help=hub_token().metadata["help"])
    add_settings_arguments(parser, ModelShape, groups=groups)


def run_train(args) -> int:
    from ..train.loop import TrainingInterrupted, keep_freed_memory, train

    keep_freed_memory()  # this process only trains: freed step tensors are reused instead of faulted in again
    config = ModelShape(**settings_values(args, ModelShape)).config_fields()
    settings = TrainingSettings(**settings_values(args, TrainingSettings), config=config, command=args.command)
    try:
        _, summary = train(settings, token=args.token)
    except TrainingInterrupted as stopped:  # a checkpoint was saved; the main process says which and how to go on
        if str(stopped):
            print(f"hf-tinygpt train: interrupted: {in_flags(str(stopped), args.flags)}", file=sys.stderr)
        return 128 + (stopped.signal_number or signal.SIGINT)  # as the shell reports a process the signal ended
    ppl, loss, wall = (summary.get(key) for key in ("validation_perplexity", "final_train_loss", "wall_s"))
    print(
        f"trained {summary.get('steps')} steps"
        + (f" in {wall / 60:.1f} min" if isinstance(wall, float) else "")
        + (f"; final train loss {loss:.4f}" if isinstance(loss, float) else "")
        + (f"; validation perplexity {ppl:.2f}" if isinstance(ppl, float) else "")
    )
    print(f"model: {os.path.join(args.out, 'model')}")
    return 0


# ---- push --------------------------------------------------------------------------------------------------------


def run_push(args) -> int:
    from ..hub.publish import push

    settings = PushSettings(**settings_values(args, PushSettings))
    published = push(
        settings,
        on_staged=lambda files: show_files(f"uploading to {settings.repo_id}:", files),
        on_committed=lambda commit: show_commit(commit, settings),
    )
    if settings.dry_run:
        show_files(f"dry run: staged in {settings.out} what would be {committed(settings)}:", published.files)
        if settings.collection:
            print(f"and {settings.repo_id} would be added to the collection {settings.collection!r}")
    elif published.collection_url:
        print(f"collection: {published.collection_url}")
    return 0


def run_push_space(args) -> int:
    from ..hub.publish import push_space

    settings = SpacePushSettings(**settings_values(args, SpacePushSettings))
    published = push_space(
        settings, on_staged=lambda files: show_files(f"uploading to the Space {settings.repo_id}:", files)
    )
    if settings.dry_run:
        what = f"dry run: what would be {committed(settings, 'the Space ')} from {settings.src}:"
        show_files(what, published.files)
    else:
        show_commit(published.commit, settings)
    return 0


def committed(settings, kind: str = "") -> str:
    """Where and how a push would commit, as a dry run says it: every setting of the commit that was given."""
    how = [f"to the branch {settings.revision}"] if settings.revision else []
    how += ["as a pull request"] * settings.create_pr + ["private if the repo is made"] * settings.private
    how += [f"with the message {settings.commit_message!r}"] if settings.commit_message else []
    return f"uploaded to {kind}{settings.repo_id}" + (f" ({', '.join(how)})" if how else "")


def show_files(heading: str, files: dict[str, int]):
    print(heading)
    width = max(map(len, files))
    for name, size in files.items():
        print(f"  {name:<{width}}  {size:>14,} bytes")
    print(f"  {len(files)} files, {sum(files.values()):,} bytes")


def show_commit(info, settings):
    if info is None:
        made = "no pull request opened" if settings.create_pr else "no commit made"
        print(f"nothing changed: {settings.repo_id} already holds these files; {made}")
    else:
        print(f"pull request: {info.pr_url}" if info.pr_url else f"commit: {info.commit_url}")


# ---- the command -------------------------------------------------------------------------------------------------

EXAMPLES = {
    "generate": 'hf-tinygpt generate "ROMEO:" --max-new-tokens 40 --seed 0',
    "params": "hf-tinygpt params hf_tinygpt/default_model",
    "plot-positions": "hf-tinygpt plot-positions rope --out plots/rope",
    "explore": "hf-tinygpt explore hf_tinygpt/default_model runs/alibi/model --long-text held_out.txt\n"
    "  hf-tinygpt explore me/tinygpt-rope me/tinygpt-alibi --space-out explorer-space",
    "serve": "hf-tinygpt serve runs/rope/model --continuous-batching --port 8000",
    "verify-gpt2": "hf-tinygpt verify-gpt2 path/to/gpt2-folder",
    "convert": "hf-tinygpt convert path/to/gpt2-folder --out tinygpt-model --verify\n"
    "  hf-tinygpt convert nanogpt/ckpt.pt --out tinygpt-model --tokenizer gpt2 --trim-vocab 50257\n"
    "  hf-tinygpt convert tinygpt-model --to gpt2 --out gpt2-model --verify",
    "train": "hf-tinygpt train --train texts/ --validation held_out.txt --position rope --out runs/rope",
    "push": "hf-tinygpt push tinygpt-model me/tinygpt --dry-run --out staged\n"
    "  hf-tinygpt push tinygpt-model me/tinygpt --private",
    "push-space": "hf-tinygpt push-space explorer-space me/tinygpt-explorer --dry-run",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-tinygpt", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {importlib.metadata.version('hf-tinygpt')}")
    verbs = parser.add_subparsers(dest="verb", required=True)

    def verb(name, help, arguments, run):
        add_verb(verbs, name, help, arguments, run=run, example=EXAMPLES[name])

    verb("generate", "continue a prompt, streaming tokens (the main job)", GenerationSettings, run_generate)
    verb("params", "parameter breakdown of a model folder, Hub id or config.json", add_params_arguments, run_params)
    verb(
        "plot-positions",
        "pictures of a model's position scheme (PNG, SVG on request)",
        PlotSettings,
        run_plot_positions,
    )
    verb(
        "explore",
        "the position explorer: a local web app over models side by side ([explore] extra)",
        ExploreSettings,
        run_explore,
    )
    verb(
        "serve",
        "an OpenAI-compatible HTTP server on this machine: transformers serve ([serve] extra)",
        add_serve_arguments,
        run_serve,
    )
    verb(
        "verify-gpt2",
        "compare TinyGPT with transformers' GPT-2 on the same weights",
        VerificationSettings,
        run_verify_gpt2,
    )
    verb(
        "convert",
        "GPT-2 / nanoGPT checkpoint → tinygpt folder (or out with --to gpt2 | gpt_neox)",
        ConversionSettings,
        run_convert,
    )
    verb(
        "train",
        "train a TinyGPT, from random weights or --init-from, on text files or a --dataset ([train] extra)",
        add_train_arguments,
        run_train,
    )
    verb("push", "publish a tinygpt (or converted GPT-2) model to the Hub, with its card", PushSettings, run_push)
    verb(
        "push-space",
        "publish a Space folder (`explore --space-out` wrote it) as a Gradio Space",
        SpacePushSettings,
        run_push_space,
    )
    return parser


def recorded_command(argv: list[str], token: str | None) -> str:
    """The command line as a card records it: without the token, and without the flag that gave it (however it was
    spelled: `--token X`, `--token=X`, or a prefix argparse accepts)."""
    words = []
    for word in argv:
        if token and word == token:
            if words and words[-1].startswith("--"):
                words.pop()
        elif not (token and token in word):
            words.append(word)
    return shlex.join(["hf-tinygpt", *words])


def main(argv=None) -> int:
    """`hf-tinygpt ARGV`: its exit code. A Ctrl-C is one line while it starts, runs and exits."""
    try:
        return run_command(argv)
    finally:
        exiting_the_command()


def run_command(argv=None) -> int:
    if signal.getsignal(signal.SIGINT) is interrupted_while_starting:  # started: Ctrl-C is a KeyboardInterrupt again
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # What the imports made (torch, transformers: ~400,000 objects) lives as long as the command: no collection
        # walks it again, nor the one Python makes as it exits (about 1 s of a generate).
        gc.freeze()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command = recorded_command(argv, getattr(args, "token", None))  # for the card of a trained model

    def run() -> int:
        if getattr(args, "out", None) is not None:  # before the verb reads anything
            refuse_inputs(args.out, {f"`{dest}`": getattr(args, dest) for dest in args.inputs})
        return args.run(args)

    return presented(run, verb=args.verb, flags=args.flags, token=getattr(args, "token", None))
