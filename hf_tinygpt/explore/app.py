"""`hf-tinygpt explore`: a Gradio app over one or more models, the same prompt for all of them, side by side.

    demo = build_app(load_models(["hf_tinygpt/default_model", "runs/alibi/model"]))
    launch(demo, server_name="127.0.0.1")

Tabs: token + position (what the first block sees), the scheme's pictures, inside attention (a layer's head on the
prompt, its weights as a table too), past the training length (per-position loss of a long text, computed live) and
generate (streamed, greedy). Every event has an `api_name`, so gradio_client drives the same functions the browser
does.

The app is a server: every endpoint checks its inputs against the limits in `limits.py` before any work, answers a
failure in one sentence, and leaves the app ready for the next request. Gradio keeps the files it serves in a folder
the app made for itself.
"""

import atexit
import functools
import inspect
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

import pandas as pd
import torch

from ..folders.bundled import gpt2_tokenizer
from ..folders.errors import describe, printable
from ..model.positions import positions_reach
from ..plots.positions import DEFAULT_PROMPT, MAX_PLOTTED_POSITIONS, prompt_tokens
from .limits import (
    MAX_DIMENSIONS,
    MAX_NEW_TOKENS,
    MAX_PROMPT_CHARACTERS,
    MAX_PROMPT_TOKENS,
    MAX_SEED,
    MAX_TEXT_CHARACTERS,
    MAX_WINDOW,
    MIN_WINDOW,
    QUEUE_SIZE,
    checked_text,
    long_text_ids,
    whole_number,
)
from .views import (
    ExploredModel,
    attention_pattern,
    greedy_continuation,
    per_position_loss,
    picture_names,
    plot_attention_pattern,
    plot_message,
    plot_per_position_loss,
    position_pictures,
    reads_the_prompt,
    training_context,
)


def private_folder() -> Path:
    """A new folder that only this user can read (`tempfile.mkdtemp`), removed at exit, made Gradio's file cache
    for this process: Gradio serves the files the app writes from here, never what a shared `$TMPDIR/gradio` (or a
    link planted there) holds."""
    folder = Path(tempfile.mkdtemp(prefix="hf-tinygpt-explore-"))
    os.environ["GRADIO_TEMP_DIR"] = str(folder / "gradio")  # read by each component as it is made, and at launch
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


# Gradio reads GRADIO_TEMP_DIR once, as it is imported (its routes make folders there at launch): a private folder is
# its cache from the start, never a shared $TMPDIR/gradio or what a link planted there points to.
if "gradio" not in sys.modules:
    private_folder()

try:
    import gradio as gr
except ImportError as error:
    from ..folders.errors import needs_extra

    raise needs_extra("explore", error) from error

logger = logging.getLogger(__name__)

# The learner's notebooks (scripts/notebooks of the hf_tinygpt repository, by file name and title): the story these
# tabs draw, told step by step with the same functions.
NOTEBOOKS = {
    "where_a_token_stands.ipynb": "Where a token stands",
    "three_schemes_past_their_length.ipynb": "Train three schemes and watch them past their length",
}


def answered_in_one_sentence(function):
    """`function` as an endpoint: a ValueError is shown as its message, any other failure as one sentence that
    names it (its traceback goes to the server's log), never Python's repr or Gradio's bare "Error"."""

    def failure(error: Exception) -> "gr.Error":
        if isinstance(error, gr.Error):
            return error
        if isinstance(error, ValueError):
            return gr.Error(printable(str(error)), print_exception=False)
        logger.exception("the explorer's %s failed", function.__name__)
        return gr.Error(f"this request failed ({printable(describe(error))})", print_exception=False)

    if inspect.isgeneratorfunction(function):

        @functools.wraps(function)
        def stream(*args, **kwargs):
            try:
                yield from function(*args, **kwargs)
            except Exception as error:
                raise failure(error) from error

        return stream

    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except Exception as error:
            raise failure(error) from error

    return call


def launch(demo: "gr.Blocks", *, server_name: str | None = None, server_port: int | None = None, **options):
    """Serve `demo` where it is told (`server_name`; a Space says where through GRADIO_SERVER_NAME) and nowhere
    else, whatever Gradio's environment variables say: no share link, no server-side rendering proxy, no MCP
    server, no folder served beyond the app's own. It takes no uploads (Gradio's upload route would otherwise
    store files of any size from anyone): the app reads text, never files. It says where it listens, and not
    Gradio's hint to set `share=True`, which it never does."""
    quiet, blocking = options.pop("quiet", False), not options.pop("prevent_thread_lock", False)
    launched = demo.launch(
        server_name=server_name,
        server_port=server_port,
        share=False,
        ssr_mode=False,
        mcp_server=False,
        allowed_paths=[os.environ["GRADIO_TEMP_DIR"]],  # given, so GRADIO_ALLOWED_PATHS adds nothing
        max_file_size=1,  # bytes
        quiet=True,
        prevent_thread_lock=True,
        **options,
    )
    if not quiet:
        print(f"* Running on local URL:  {demo.local_url.rstrip('/')}", flush=True)
    if blocking and not getattr(sys, "ps1", sys.flags.interactive):  # as Gradio: a script waits, a console goes on
        if threading.current_thread() is threading.main_thread():  # `kill`, a stopping container: exit as Ctrl-C,
            signal.signal(signal.SIGTERM, lambda number, _: sys.exit(128 + number))  # private_folder's atexit runs
        demo.block_thread()
    return launched


class Explorer:
    """What each tab answers, over `models` shared by every browser tab: one model call at a time, every request
    checked against the limits (`limits.py`) before any work. Each model reads the prompt with its own tokenizer."""

    def __init__(self, models: list):
        self.models = [shown if isinstance(shown, ExploredModel) else _explored(*shown) for shown in models]
        self.labels = [shown.label for shown in self.models]
        self.pictures_dir = private_folder() / "pictures"
        self.lock = threading.Lock()
        configs = [shown.model.config for shown in self.models]
        self.layers = max(config.n_layer for config in configs)  # a model without that layer or head says so
        self.heads = max(config.n_head for config in configs)
        self.most_positions = min(max(config.n_positions for config in configs), MAX_PLOTTED_POSITIONS)
        # How a scheme looks past its trained positions.
        self.most_plotted = min(4 * self.most_positions, MAX_PLOTTED_POSITIONS)

    def text_ids(self, text) -> list[torch.Tensor]:
        """A long text's ids as each model reads it, or a ValueError: past the limits for one of them."""
        texts = []
        for label, _, tokenizer, _ in self.models:
            try:
                texts.append(torch.tensor(long_text_ids(text, tokenizer), dtype=torch.long))
            except ValueError as error:
                raise ValueError(f"{error}" + (f" (as {label} reads it)" if len(self.models) > 1 else "")) from None
        return texts

    def per_model(self, values: list):
        """One value per model, as Gradio takes them: a list for several outputs, the value itself for one."""
        return values if len(values) > 1 else values[0]

    def checked_prompt(self, prompt, new_tokens: int = 0) -> tuple[str, dict[int, str]]:
        """The prompt and, by model index, why a model cannot take it (it runs past where the model's positions
        reach: that model's pane says so, the others answer); or a ValueError: empty, too long, or past every
        model's reach."""
        prompt = checked_text(prompt, "prompt", MAX_PROMPT_CHARACTERS)
        counts = [len(shown.tokenizer(prompt)["input_ids"]) for shown in self.models]
        past = {}
        for index, ((label, model, *_), count) in enumerate(zip(self.models, counts, strict=True)):
            if count == 0:
                raise ValueError("the prompt is empty: type a few words")
            if count > MAX_PROMPT_TOKENS:
                whose = _whose(label, counts)
                raise ValueError(
                    f"the prompt is {count:,} tokens long; the explorer takes at most {MAX_PROMPT_TOKENS}{whose}"
                )
            if (reach := positions_reach(model.config)) is not None and count + new_tokens > reach:
                asked = f"{count} tokens" + (f" and {new_tokens} new ones" if new_tokens else "")
                past[index] = f"the prompt's {asked} run past the {reach} positions {label} reaches"
        if len(past) == len(self.models):
            whose = "no model takes it: " if len(past) > 1 else ""
            raise ValueError(f"{whose}{'; '.join(past.values())}: ask for fewer")
        return prompt, {index: f"{why}: ask for fewer" for index, why in past.items()}

    def message_picture(self, index: int, text: str) -> str:
        """A PNG that says `text`, for the model `index`'s picture pane."""
        path = self.pictures_dir / str(index) / "message.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        plot_message(text).savefig(path)
        return str(path)

    def pictures(self, prompt, token_vs_position, n_dims=8, positions=None, seed=0):
        prompt, past = self.checked_prompt(prompt)
        n_dims = whole_number(n_dims, "number of dimensions traced", 1, MAX_DIMENSIONS)
        positions = self.most_positions if positions is None else positions
        positions = whole_number(positions, "number of positions plotted", 2, self.most_plotted)
        seed = whole_number(seed, "seed", 0, MAX_SEED)
        shown = []
        with self.lock:
            for index, (label, model, tokenizer, _) in enumerate(self.models):
                wanted = picture_names(model, token_vs_position)
                # Where the prompt runs past the model's positions, the pictures it does not feed are still drawn.
                names = tuple(name for name in wanted if index not in past or not reads_the_prompt(name))
                said = (
                    [(self.message_picture(index, past[index]), f"{label}: {past[index]}")] if names != wanted else []
                )
                count = min(positions, positions_reach(model.config) or positions)  # no rows past a table's end
                made = position_pictures(
                    model,
                    label,
                    self.pictures_dir / str(index),
                    prompt,
                    tokenizer=tokenizer,
                    names=names,
                    n_dims=n_dims,
                    seed=seed,
                    max_positions=count,
                )
                shown.append(said + [(str(path), f"{label}: {path.stem}") for path in made])
        return shown

    def token_images(self, prompt):
        return self.per_model([shown[0][0] for shown in self.pictures(prompt, token_vs_position=True)])

    def scheme_galleries(self, prompt, n_dims, positions, seed):
        return self.per_model(self.pictures(prompt, False, n_dims, positions, seed))

    def attention(self, prompt, layer, head):
        prompt, past = self.checked_prompt(prompt)
        layer = whole_number(layer, "layer", 0, self.layers - 1)
        head = whole_number(head, "head", 0, self.heads - 1)
        outputs = []
        with self.lock:
            for index, (label, model, tokenizer, _) in enumerate(self.models):
                if index in past:
                    outputs += [plot_message(past[index]), _said_table(label, past[index])]
                    continue
                if layer >= model.config.n_layer or head >= model.config.n_head:
                    shape = f"{model.config.n_layer} layers of {model.config.n_head} heads"
                    said = f"{label} has {shape}: no layer {layer}, head {head}"
                    outputs += [plot_message(said), _said_table(label, said)]
                    continue
                pattern = attention_pattern(model, prompt, layer, head, tokenizer)
                title = f"{label} ({model.config.position_embedding_type}): layer {layer}, head {head}"
                if pattern["remapped"]:
                    remapped = f"({_REMAPPED.format(model.config.vocab_size)}: these are not the tokens it read)"
                    title += "\n" + remapped
                outputs.append(plot_attention_pattern(pattern, title))
                headers = [f"{i}: {text}" for i, text in enumerate(pattern["tokens"])]
                outputs.append({"headers": headers, "data": pattern["weights"].round(6).tolist()})
        return outputs

    def past_training_length(self, text, context, progress=gr.Progress()):  # noqa: B008 (how Gradio asks for a bar)
        context = whole_number(context, "window", MIN_WINDOW, MAX_WINDOW)
        texts = self.text_ids(text)
        for (label, *_), ids in zip(self.models, texts, strict=True):
            if len(ids) < context:
                whose = _whose(label, [len(ids) for ids in texts])
                raise ValueError(
                    f"the long text has {len(ids)} token{'s' * (len(ids) != 1)}: paste at least one window "
                    f"({context} tokens){whose}"
                )
        curves, unscored, windows = [], [], set()
        with self.lock:
            scored = progress.tqdm(list(zip(self.models, texts, strict=True)), desc="scoring")
            for (label, model, _, trained), ids in scored:
                if int(ids.max()) >= model.config.vocab_size:  # its loss would be of other tokens than the text's
                    unscored.append(f"{label} (a vocabulary of {model.config.vocab_size})")
                    continue
                curves.append((label, per_position_loss(model, ids, context), trained))
                windows.add(len(ids) // context)
        if not curves:
            raise ValueError(f"the text's GPT-2 tokens lie outside every model's vocabulary: {', '.join(unscored)}")
        counted = f"{windows.pop()} windows" if len(windows) == 1 else "windows"  # each model's tokens, its windows
        title = f"per-position loss over {counted} of {context} tokens"
        if unscored:
            title += f"\nnot scored, the text's tokens lie outside their vocabulary: {', '.join(unscored)}"
        table = {
            "headers": ["position", *(label for label, _, _ in curves)],
            "data": [[i + 1, *(round(float(c[1][i]), 5) for c in curves)] for i in range(context - 1)],
        }
        hover = pd.DataFrame(
            [(i + 1, label, float(loss)) for label, losses, _ in curves for i, loss in enumerate(losses)],
            columns=["position", "model", "loss (nats)"],
        ).dropna()
        return plot_per_position_loss(curves, title), hover, table

    def generate(self, prompt, max_new_tokens):
        new_tokens = whole_number(max_new_tokens, "number of new tokens", 1, MAX_NEW_TOKENS)
        prompt, past = self.checked_prompt(prompt, new_tokens)
        texts = [f"({past[index]})" if index in past else "" for index in range(len(self.models))]
        for index, (_, model, tokenizer, _) in enumerate(self.models):
            if index in past:
                continue
            ids, _, remapped = prompt_tokens(model, prompt, tokenizer)
            if remapped:  # its ids are not the tokenizer's: nothing can decode what it writes
                texts[index] = f"({_REMAPPED.format(model.config.vocab_size)}: it has no text to show)"
                yield self.per_model(list(texts))
                continue
            for text in greedy_continuation(model, ids, new_tokens, tokenizer, self.lock):
                texts[index] = text
                yield self.per_model(list(texts))
        yield self.per_model(list(texts))


# A model without a tokenizer of its own, whose vocabulary is smaller than GPT-2's (`prompt_tokens`).
_REMAPPED = "no tokenizer of its own: GPT-2's ids mapped into its {:,}-token vocabulary"


def _said_table(label: str, text: str) -> dict:
    """A weights table of one cell that says why the model has no weights to show (an empty one reads as Gradio's
    default table)."""
    return {"headers": [label], "data": [[text]]}


def _whose(label: str, counts: list[int]) -> str:
    """Which model a count of tokens is of, where the models read the same text into different counts."""
    return f" (as {label} reads it)" if len(set(counts)) > 1 else ""


def _explored(label: str, model) -> ExploredModel:
    """A (label, model) pair as the explorer shows it: prompts read by GPT-2's tokenizer, the training context from
    the card of the folder or Hub repo it was loaded from."""
    return ExploredModel(label, model, gpt2_tokenizer(), training_context(model))


def _on(button, function, inputs, outputs, name: str):
    button.click(answered_in_one_sentence(function), inputs, outputs, api_name=name)


def _checked_as(component, name: str):
    """`component` (a slider or number box), whose value past its range is refused in the endpoint's own words
    (`whole_number`), naming it `name`, without a traceback in the server's log: Gradio's own check says only "Value
    12 is greater than maximum value 11", and logs a traceback for each. (Wrapped on the instance: a subclass of a
    Gradio component writes a .pyi stub beside the module that defines it.)"""
    preprocess = component.preprocess

    def checked(payload):
        try:
            whole_number(payload, name, component.minimum, component.maximum)
        except ValueError as error:
            raise gr.Error(str(error), print_exception=False) from None
        return preprocess(payload)

    component.preprocess = checked
    return component


def _number_slider(most: int, label: str):
    """A slider from 0 to `most`; a fixed number where there is only 0 (Gradio's slider needs two ends)."""
    if most == 0:
        return gr.Number(0, label=label, interactive=False)
    return _checked_as(gr.Slider(0, most, value=0, step=1, label=label), label)


def _token_tab(explorer: Explorer, prompt):
    with gr.Tab("Token + position"):
        button = gr.Button("Draw")
        with gr.Column():  # one under another: each picture is six panels wide, unreadable in a third of the page
            pictures = [gr.Image(type="filepath", label=label) for label in explorer.labels]
    _on(button, explorer.token_images, prompt, pictures, "token_position")


def _scheme_tab(explorer: Explorer, prompt):
    with gr.Tab("The position scheme"):
        with gr.Row():
            n_dims = gr.Slider(1, MAX_DIMENSIONS, value=8, step=1, label="dimensions traced")
            n_dims = _checked_as(n_dims, "number of dimensions traced")
            positions = gr.Slider(
                2, explorer.most_plotted, value=explorer.most_positions, step=1, label="positions plotted"
            )
            positions = _checked_as(positions, "number of positions plotted")
            seed = gr.Number(0, minimum=0, maximum=MAX_SEED, step=1, label="seed (which dimensions)")
            seed = _checked_as(seed, "seed")
        button = gr.Button("Draw")
        with gr.Row():
            galleries = [
                gr.Gallery(label=label, columns=1, object_fit="contain", height="auto") for label in explorer.labels
            ]
    _on(button, explorer.scheme_galleries, [prompt, n_dims, positions, seed], galleries, "position_scheme")


def _attention_tab(explorer: Explorer, prompt):
    with gr.Tab("Inside attention"):
        with gr.Row():
            layer = _number_slider(explorer.layers - 1, "layer")
            head = _number_slider(explorer.heads - 1, "head")
        button = gr.Button("Show")
        outputs = []
        with gr.Row():
            for label in explorer.labels:
                with gr.Column():
                    outputs.append(gr.Plot(label=label, show_label=False))  # its title names it; a badge would cover it
                    outputs.append(gr.Dataframe(label=f"{label}: weights (query rows)"))
    _on(button, explorer.attention, [prompt, layer, head], outputs, "attention")


def _length_tab(explorer: Explorer, long_text: str | None):
    with gr.Tab("Past the training length"):
        long = gr.Textbox(
            long_text,
            label="long text",
            placeholder="paste a long text: a few thousand tokens",
            lines=4,
            max_lines=6,
            max_length=MAX_TEXT_CHARACTERS,
        )
        context = _checked_as(gr.Slider(MIN_WINDOW, MAX_WINDOW, value=512, step=8, label="window (tokens)"), "window")
        button = gr.Button("Score")
        plot = gr.Plot(label="per-position loss")
        hover = gr.LinePlot(
            x="position", y="loss (nats)", color="model", tooltip="all", label="each position's loss (hover)"
        )
        table = gr.Dataframe(label="per-position loss (nats)")
    _on(button, explorer.past_training_length, [long, context], [plot, hover, table], "past_length")


def _generate_tab(explorer: Explorer, prompt):
    with gr.Tab("Generate"):
        new_tokens = gr.Slider(1, MAX_NEW_TOKENS, value=40, step=1, label="new tokens (greedy)")
        new_tokens = _checked_as(new_tokens, "number of new tokens")
        button = gr.Button("Generate")
        with gr.Row():
            continuations = [gr.Textbox(label=label, lines=6) for label in explorer.labels]
    _on(button, explorer.generate, [prompt, new_tokens], continuations, "generate")


def build_app(models: list, *, long_text: str | None = None) -> "gr.Blocks":
    """The explorer's Blocks over `models` (`load_models`' `ExploredModel`s, or (label, model) pairs whose prompts
    GPT-2's tokenizer reads); serve it with `launch`."""
    explorer = Explorer(models)
    if long_text is not None:
        try:  # the tab would refuse it on every request
            explorer.text_ids(long_text)
        except ValueError as error:
            raise ValueError(f"`long_text`: {error}") from None
    with gr.Blocks(title="hf-tinygpt explore") as demo:
        gr.Markdown(
            "# How these GPTs put tokens in order\n"
            + ", ".join(
                f"**{shown.label}** ({shown.model.config.position_embedding_type})" for shown in explorer.models
            )
            + "\n\nNew to position schemes? Two notebooks in `scripts/notebooks` of the hf_tinygpt repository tell "
            + "what these tabs draw, step by step: "
            + " and ".join(f"*{title}* (`{name}`)" for name, title in NOTEBOOKS.items())
            + "."
        )
        prompt = gr.Textbox(
            DEFAULT_PROMPT, label="prompt (repeat a word to see its two positions)", max_length=MAX_PROMPT_CHARACTERS
        )
        _token_tab(explorer, prompt)
        _scheme_tab(explorer, prompt)
        _attention_tab(explorer, prompt)
        _length_tab(explorer, long_text)
        _generate_tab(explorer, prompt)
    return demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)
