"""`hf-tinygpt`: the package's command line. Each verb is a thin layer over a library function.

Conventions shared by every verb: a folder it writes is `--out DIR` (written atomically, replaced only with
`--force`, see hf_tinygpt/folders/outputs.py); a model that may be a Hub id comes with `--revision` and
`--token`; a comparison with GPT2LMHeadModel accepts `--tolerance` (max |Δlogits| per unit of the logits' scale,
max(1, max |logit|); default 1e-5).
"""

import argparse
import ast
import contextlib
import importlib.metadata
import os
import re
import shlex
import signal
import sys
import warnings

from huggingface_hub.errors import HfHubHTTPError

from ..folders.errors import hub_error_line
from ..folders.outputs import refuse_inputs
from ..folders.reading import describe, read_json_object, read_tinygpt_config
from ..model.params import parameter_breakdown
from ..model.positions import POSITION_SCHEME_CLASSES
from ..settings import hub_kwargs, hub_revision, hub_token
from .flags import add_settings_arguments, finite_at_least, input_path, settings_values
from .start_up import exiting_the_command, interrupted_while_starting

# ---- shared by the verbs -----------------------------------------------------------------------------------------


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows each flag's default (where it has one) and keeps the examples' line breaks."""

    def _get_help_string(self, action):  # argparse's hook for this: no "(default: None)" on optional flags
        return action.help if action.default is None or action.default is False else super()._get_help_string(action)


def add_hub_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--revision", help=hub_revision().metadata["help"])
    parser.add_argument("--token", help=hub_token().metadata["help"])


def add_tokenizer_argument(parser, what: str = "the tokenizer to bundle (default: SRC's)"):
    parser.add_argument(
        "--tokenizer",
        metavar="gpt2|PATH",
        type=input_path,
        help=f"{what}: 'gpt2' (the GPT-2 BPE shipped here), or a folder or Hub id",
    )


def add_tolerance_argument(parser: argparse.ArgumentParser, what: str):
    parser.add_argument(
        "--tolerance",
        type=finite_at_least(0),
        default=1e-5,
        help=f"largest max |Δlogits| against GPT2LMHeadModel {what}, per unit of the logits' scale, "
        f"max(1, max |logit|) (for fp32; bf16 needs ~0.05)",
    )


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


def add_generate_arguments(parser: argparse.ArgumentParser):
    from ..generate.text import GenerationSettings

    add_settings_arguments(parser, GenerationSettings)


def run_generate(args) -> int:
    from ..generate.text import GenerationSettings, generate_from

    settings = GenerationSettings(**settings_values(args, GenerationSettings))
    with no_progress_bars():  # the continuation is the output: no "Loading weights" bar around it
        generate_from(settings)
    return 0


# ---- params ------------------------------------------------------------------------------------------------------


def add_params_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("model", type=input_path, help="model folder, Hub id, or config.json (tinygpt or GPT-2)")
    add_hub_arguments(parser)


def run_params(args) -> int:
    config = read_tinygpt_config(args.model, **hub_kwargs(args))
    parts = parameter_breakdown(config)
    width = max(map(len, parts))
    print(
        f"{args.model}: {config.position_embedding_type} positions, {config.n_layer} layers, "
        f"n_embd {config.n_embd}, {config.n_head} heads, vocab {config.vocab_size}"
    )
    for name, count in parts.items():
        note = " (tied to token_embedding)" if name == "lm_head" and config.tie_word_embeddings else ""
        print(f"  {name:<{width}}  {count:>14,}{note}")
    return 0


# ---- plot-positions ----------------------------------------------------------------------------------------------


def add_plot_arguments(parser: argparse.ArgumentParser):
    from ..plots.settings import PlotSettings

    add_settings_arguments(parser, PlotSettings)


def run_plot_positions(args) -> int:
    from ..plots.positions import draw_positions
    from ..plots.settings import PlotSettings

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


def add_explore_arguments(parser: argparse.ArgumentParser):
    from ..explore.settings import ExploreSettings

    add_settings_arguments(parser, ExploreSettings)


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
    from ..explore.settings import ExploreSettings, read_long_text
    from ..folders.bundled import gpt2_tokenizer

    settings = ExploreSettings(**settings_values(args, ExploreSettings))
    long_text = read_long_text(settings.long_text, gpt2_tokenizer())
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
        print(f"publish it: hf-tinygpt push {settings.out} OWNER/NAME")
        return 0
    from ..explore.app import build_app, launch
    from ..explore.views import load_models

    with no_progress_bars():
        models = load_models(settings.models, hub_kwargs=hub_kwargs(settings))
    demo = build_app(models, long_text=long_text)
    print(", ".join(f"{label} ({model.config.position_embedding_type})" for label, model in models))
    launch(demo, server_name="127.0.0.1", server_port=settings.port or None)  # loopback only: nothing is shared
    return 0


# ---- verify-gpt2 -------------------------------------------------------------------------------------------------


def add_verify_arguments(parser: argparse.ArgumentParser):
    from ..convert.verify import VerificationSettings

    add_settings_arguments(parser, VerificationSettings)


def run_verify_gpt2(args) -> int:
    from ..convert.verify import VerificationSettings, verify_gpt2_checkpoint

    settings = VerificationSettings(**settings_values(args, VerificationSettings))
    source = settings.model or "a GPT-2 small with random weights (seed 0), made here by transformers"
    print(f"Loading {source} into transformers' GPT2LMHeadModel and into TinyGPT ...")
    result = verify_gpt2_checkpoint(settings.model, settings.text, tolerance=settings.tolerance, **hub_kwargs(settings))
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


def add_convert_arguments(parser: argparse.ArgumentParser):
    from ..convert.conversions import ConversionSettings

    add_settings_arguments(parser, ConversionSettings)


def run_convert(args) -> int:
    from ..convert.conversions import ConversionSettings, convert

    converted = convert(ConversionSettings(**settings_values(args, ConversionSettings)))
    if converted.delta is not None:
        print(
            f"verify: max |Δlogits| = {converted.delta:.3g} (tolerance {converted.tolerance:g} per unit of the "
            "logits' scale)"
        )
    print(f"wrote {converted.folder} ({converted.form})")
    return 0


# ---- train -------------------------------------------------------------------------------------------------------


def add_train_arguments(parser: argparse.ArgumentParser):
    from ..train.settings import SMALL_MODEL, TrainingSettings

    groups = add_settings_arguments(parser, TrainingSettings, groups=("data", "model", "optimisation", "output"))
    groups["model"].description = (
        "Default: a small model that trains on a CPU in minutes "
        f"({SMALL_MODEL['n_layer']} layers, n_embd {SMALL_MODEL['n_embd']}, {SMALL_MODEL['n_head']} heads, "
        "learned positions). --config and these flags change it; flags win."
    )
    model = groups["model"]
    model.add_argument("--token", help=hub_token().metadata["help"])
    model.add_argument(
        "--config", type=input_path, help="JSON file of TinyGPTConfig fields (default: the small model below)"
    )
    model.add_argument("--position", choices=list(POSITION_SCHEME_CLASSES), help="position scheme (default: learned)")
    model.add_argument("--n-layer", type=int, help=f"blocks (default: {SMALL_MODEL['n_layer']})")
    model.add_argument("--n-embd", type=int, help=f"width (default: {SMALL_MODEL['n_embd']})")
    model.add_argument("--n-head", type=int, help=f"attention heads (default: {SMALL_MODEL['n_head']})")
    model.add_argument("--n-positions", type=int, help="context the model allows (default: --block-size)")
    model.add_argument("--dropout", type=float, help="resid/embd/attn dropout (default: 0.1)")


def run_train(args) -> int:
    from ..train.loop import TrainingInterrupted, keep_freed_memory, train
    from ..train.settings import TrainingSettings

    keep_freed_memory()  # this process only trains: freed step tensors are reused instead of faulted in again

    config = read_json_object(args.config) if args.config else {}
    shape = {
        "position_embedding_type": args.position,
        "n_layer": args.n_layer,
        "n_embd": args.n_embd,
        "n_head": args.n_head,
        "n_positions": args.n_positions,
        "resid_pdrop": args.dropout,
        "embd_pdrop": args.dropout,
        "attn_pdrop": args.dropout,
    }
    config |= {key: value for key, value in shape.items() if value is not None}  # flags override the JSON
    settings = TrainingSettings(**settings_values(args, TrainingSettings), config=config, command=args.command)
    try:
        _, summary = train(settings, token=args.token)
    except TrainingInterrupted as stopped:  # a checkpoint was saved; the main process says which and how to go on
        if str(stopped):
            print(f"hf-tinygpt train: interrupted: {in_flags(str(stopped), args.flags)}", file=sys.stderr)
        return 130
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


def add_push_arguments(parser: argparse.ArgumentParser):
    parser.add_argument(
        "src",
        type=input_path,
        help="tinygpt folder or Hub id, or any GPT-2 source (converted and verified first); or a Space folder "
        "(`explore --space-out`), published as a Gradio Space",
    )
    parser.add_argument("repo_id", help="owner/name on the Hub")
    parser.add_argument("--private", action="store_true", help="create the repo private (if it does not exist)")
    parser.add_argument(
        "--revision", "--branch", dest="revision", help="branch to commit to, created if needed (default: main)"
    )
    parser.add_argument("--commit-message", help="commit message (default: says what was uploaded)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument(
        "--token",
        help="Hub token, also for reading a private SRC (default: the one huggingface_hub "
        "already knows; never printed)",
    )
    parser.add_argument(
        "--timeout",
        type=finite_at_least(0.001),
        default=60.0,
        help="seconds a network request may make no progress before the push fails",
    )
    parser.add_argument(
        "--collection",
        metavar="TITLE",
        help="then add the model to the repo owner's collection of that title, made if needed (with --private, "
        "a new collection is private too; default: no collection)",
    )
    parser.add_argument("--dry-run", action="store_true", help="only stage the files into --out and list them")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="with --dry-run: the folder to stage into, written atomically (default: none; required with --dry-run)",
    )
    parser.add_argument("--force", action="store_true", help="with --dry-run: replace an earlier output at --out")
    add_tokenizer_argument(parser)
    add_tolerance_argument(parser, "when a GPT-2 SRC is converted first")
    parser.add_argument("--base-model", help="Hub id of a GPT-2 SRC, for the model card (default: SRC if a Hub id)")
    parser.add_argument("--license", help="licence for the model card (default: mit)")
    parser.add_argument(
        "--keep-local-paths",
        action="store_true",
        help="publish the card's training data paths and command line as they are (default: cut to file names)",
    )


def run_push(args) -> int:
    from ..hub.publish import add_to_collection, check_collection, is_space_folder, push_to_hub, stage_for_hub

    def show(files):
        width = max(map(len, files))
        for name, size in files.items():
            print(f"  {name:<{width}}  {size:>14,} bytes")
        print(f"  {len(files)} files, {sum(files.values()):,} bytes")

    if is_space_folder(args.src):
        return push_space_folder(args, show)

    if args.out is not None and not args.dry_run:
        raise ValueError(
            "--out is where --dry-run stages the files; without --dry-run the push stages in a temporary folder"
        )
    if args.collection is not None:
        check_collection(args.collection)  # before the push, not after it
    options = dict(
        tokenizer=args.tokenizer,
        base_model=args.base_model,
        license=args.license or "mit",
        verify_tolerance=args.tolerance,
        keep_local_paths=args.keep_local_paths,
    )
    if args.dry_run:
        if args.out is None:
            raise ValueError("--dry-run needs --out DIR: the folder to stage the files in")
        files = stage_for_hub(args.src, args.out, args.repo_id, force=args.force, **options)
        print(f"dry run: staged in {args.out} what would be uploaded to {args.repo_id}:")
        show(files)
        if args.collection:
            print(f"and {args.repo_id} would be added to the collection {args.collection!r}")
        return 0

    def staged(files):
        print(f"uploading to {args.repo_id}:")
        show(files)

    info = push_to_hub(args.src, args.repo_id, on_staged=staged, **push_arguments(args), **options)
    print(f"pull request: {info.pr_url}" if info.pr_url else f"commit: {info.commit_url}")
    if args.collection:
        url = add_to_collection(
            args.repo_id, args.collection, private=args.private, token=args.token, timeout=args.timeout
        )
        print(f"collection: {url}")
    return 0


def push_arguments(args) -> dict:
    """What a push of a model and of a Space take alike: where it commits, and how it talks to the Hub."""
    names = ("private", "revision", "commit_message", "create_pr", "token", "timeout")
    return {name: getattr(args, name) for name in names}


def push_space_folder(args, show) -> int:
    """`push` of a Space folder (`explore --space-out` wrote it): published as a Gradio Space repo as it is."""
    from ..hub.publish import push_space, space_files

    model_only = ("out", "force", "collection", "tokenizer", "base_model", "license", "keep_local_paths")
    if given := [f"--{dest.replace('_', '-')}" for dest in model_only if getattr(args, dest) not in (None, False)]:
        raise ValueError(f"{args.src} is a Space folder, pushed as it is: {', '.join(given)} apply to models only")
    if args.dry_run:
        files = space_files(args.src, args.repo_id)  # what `push_space` uploads, checked the same way
        print(f"dry run: what would be uploaded from {args.src} to the Space {args.repo_id}:")
        show(files)
        return 0

    def staged(files):
        print(f"uploading to the Space {args.repo_id}:")
        show(files)

    info = push_space(args.src, args.repo_id, on_staged=staged, **push_arguments(args))
    print(f"pull request: {info.pr_url}" if info.pr_url else f"commit: {info.commit_url}")
    return 0


# ---- library errors, in flags ------------------------------------------------------------------------------------

# The library's errors name what a Python caller passed, in backticks (`max_new_tokens`, `force=True`,
# `TrainingSettings.steps`); a user of the command line passed flags, so each such name becomes the flag that sets
# it. Backticks make the match exact: no word in running text (nor `enforce`) is ever taken for a name.
_PYTHON_NAME = re.compile(r"`(?:\w+Settings\.)?(\w+)(?:=([^`]*))?`")


def in_flags(message: str, flags: dict[str, str]) -> str:
    """`message` with each backticked Python name that the verb has a flag for (`flags`: {dest: --flag}) written
    as that flag: `max_new_tokens` → --max-new-tokens, `force=True` → --force, `tokenizer='gpt2'` → --tokenizer
    gpt2. Any other backticked text is left as it is."""

    def flag(match: re.Match) -> str:
        name, value = match.groups()
        option = flags.get(name)
        if option is None:
            return match[0]
        if value is None or value == "True":  # the argument itself, or a switch turned on
            return option
        with contextlib.suppress(ValueError, SyntaxError):  # a Python literal, as a shell word
            literal = ast.literal_eval(value)
            value = shlex.quote(literal) if isinstance(literal, str) else value
        return f"{option} {value}"

    return _PYTHON_NAME.sub(flag, message)


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
    "  hf-tinygpt push tinygpt-model me/tinygpt --private\n"
    "  hf-tinygpt push explorer-space me/tinygpt-explorer",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-tinygpt", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {importlib.metadata.version('hf-tinygpt')}")
    verbs = parser.add_subparsers(dest="verb", required=True)

    def verb(name, help, add_arguments, run):
        sub = verbs.add_parser(
            name, help=help, description=help, epilog=f"example:\n  {EXAMPLES[name]}", formatter_class=HelpFormatter
        )
        add_arguments(sub)
        # The verb's own flags, {dest: --flag}, for `in_flags` (argparse lists a parser's actions only in _actions).
        flags = {action.dest: max(action.option_strings, key=len) for action in sub._actions if action.option_strings}
        # The fields' help names other fields as Python does (`glob`, `src`): here they are flags and ARGUMENTS.
        arguments = {action.dest: action.dest.upper() for action in sub._actions if not action.option_strings}
        for action in sub._actions:
            if action.help:
                action.help = in_flags(action.help, flags | arguments)
        inputs = [action.dest for action in sub._actions if action.type is input_path]
        sub.set_defaults(run=run, flags=flags, inputs=inputs)

    verb("generate", "continue a prompt, streaming tokens (the main job)", add_generate_arguments, run_generate)
    verb("params", "parameter breakdown of a model folder, Hub id or config.json", add_params_arguments, run_params)
    verb(
        "plot-positions",
        "pictures of a model's position scheme (PNG, SVG on request)",
        add_plot_arguments,
        run_plot_positions,
    )
    verb(
        "explore",
        "the position explorer: a local web app over models side by side ([explore] extra)",
        add_explore_arguments,
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
        add_verify_arguments,
        run_verify_gpt2,
    )
    verb(
        "convert",
        "GPT-2 / nanoGPT checkpoint → tinygpt folder (or out with --to gpt2 | gpt_neox)",
        add_convert_arguments,
        run_convert,
    )
    verb(
        "train",
        "train a TinyGPT, from random weights or --init-from, on text files or a --dataset ([train] extra)",
        add_train_arguments,
        run_train,
    )
    verb("push", "publish a tinygpt (or converted GPT-2) model to the Hub, with its card", add_push_arguments, run_push)
    return parser


# How torch says an allocation failed (CPU: "can't allocate memory: you tried to allocate N bytes"; CUDA: "out of
# memory. Tried to allocate 2.00 GiB").
_OUT_OF_MEMORY = re.compile(r"can't allocate memory|not enough memory|out of memory", re.IGNORECASE)
# What to lower, per verb, when memory runs out.
LOWER = {
    "train": "lower --batch-size or --block-size (raise --grad-accum to keep the batch), or train a smaller model",
    "generate": "ask for fewer --max-new-tokens, or load the model with --int8",
}


def out_of_memory(error: BaseException, verb: str) -> str:
    """One line for an allocation that failed: how much it asked for (where torch says) and what to lower."""
    found = re.search(r"tried to allocate (\d+) bytes", str(error)) or re.search(
        r"tried to allocate ([\d.]+ [KMGT]iB)", str(error), re.IGNORECASE
    )
    asked = ""
    if found and found[1].isdigit():
        asked = f": an allocation of {int(found[1]) / 2**30:.1f} GiB failed"
    elif found:
        asked = f": an allocation of {found[1]} failed"
    return f"out of memory{asked}; {LOWER.get(verb, 'use a smaller model or free memory')}"


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
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command = recorded_command(argv, getattr(args, "token", None))  # for the card of a trained model

    def failed(message: str) -> int:
        print(f"hf-tinygpt {args.verb}: error: {in_flags(message, args.flags)}", file=sys.stderr)
        return 2

    package, python_shows = os.path.dirname(os.path.abspath(__file__)) + os.sep, warnings.showwarning

    def show(message, category, filename, lineno, *where):  # `warnings.showwarning`'s, then its file and line
        """The library's own warnings as one line in flags, like its errors; any other as Python shows it."""
        if os.path.abspath(filename).startswith(package):
            print(f"hf-tinygpt {args.verb}: warning: {in_flags(str(message), args.flags)}", file=sys.stderr)
        else:
            python_shows(message, category, filename, lineno, *where)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show
            if getattr(args, "out", None) is not None:  # before the verb reads anything
                refuse_inputs(args.out, {f"`{dest}`": getattr(args, dest) for dest in args.inputs})
            return args.run(args)
    except (ValueError, OSError, ImportError, HfHubHTTPError) as error:
        return failed(hub_error_line(error, [getattr(args, "token", None)]))
    except (TypeError, KeyError, IndexError, AttributeError) as error:  # a value of the wrong type in some file
        if os.environ.get("HF_TINYGPT_TRACEBACK"):
            raise
        return failed(
            f"{describe(error)} (a file of the model or tokenizer may hold a value of the wrong type; "
            "HF_TINYGPT_TRACEBACK=1 shows where)"
        )
    except (MemoryError, RuntimeError) as error:
        if not (isinstance(error, MemoryError) or _OUT_OF_MEMORY.search(str(error))):
            raise
        return failed(out_of_memory(error, args.verb))
    except KeyboardInterrupt as interrupt:  # every output is written whole or not at all (folders/outputs.py)
        # An interrupt that says more says what is true beyond local files (a push: whether the commit may land).
        said = str(interrupt) or "interrupted; nothing was left half-written"
        print(f"\nhf-tinygpt {args.verb}: {said}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
