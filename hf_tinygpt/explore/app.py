"""`hf-tinygpt explore`: a Gradio app over one or more models, the same prompt for all of them, side by side.

    demo = build_app(load_models(["hf_tinygpt/default_model", "runs/alibi/model"]))
    demo.launch(server_name="127.0.0.1")

Tabs: token + position (what the first block sees), the scheme's pictures, inside attention (a layer's head on the
prompt, its weights as a table too), past the training length (per-position loss of a long text, computed live) and
generate (streamed, greedy). Every event has an `api_name`, so gradio_client drives the same functions the browser
does.
"""

import functools
import tempfile
import threading
from pathlib import Path

import pandas as pd
import torch

from ..folders.bundled import gpt2_tokenizer
from ..plots.positions import DEFAULT_PROMPT, MAX_PLOTTED_POSITIONS, prompt_tokens
from .views import (
    attention_pattern,
    per_position_loss,
    plot_attention_pattern,
    plot_message,
    plot_per_position_loss,
    position_pictures,
    training_context,
)

try:
    import gradio as gr
except ImportError as error:
    from ..folders.errors import needs_extra

    raise needs_extra("explore", error) from error


def shown_as_gradio_errors(function):
    """`function`, its ValueErrors (an empty prompt, say) shown to the user as Gradio errors with their message."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ValueError as error:
            raise gr.Error(str(error)) from error

    return call


def build_app(models: list[tuple[str, object]], *, long_text: str | None = None) -> "gr.Blocks":
    """The explorer's Blocks over `models` ([(label, model)], e.g. from `load_models`)."""
    tokenizer = gpt2_tokenizer()
    labels = [label for label, _ in models]
    pictures_dir = Path(tempfile.mkdtemp(prefix="hf-tinygpt-explore-"))
    lock = threading.Lock()  # one model call at a time: the models are shared by every browser tab
    max_layer = max(model.config.n_layer for _, model in models) - 1  # a model without that layer or head says so
    max_head = max(model.config.n_head for _, model in models) - 1
    most_positions = min(max(model.config.n_positions for _, model in models), MAX_PLOTTED_POSITIONS)
    trained_at = [training_context(model) for _, model in models]  # read from each card once, not per request

    def pictures(prompt, token_vs_position, n_dims=8, positions=None, seed=0):
        shown = []
        with lock:
            for index, (label, model) in enumerate(models):
                count = None if positions is None else int(positions)
                if count and model.config.position_embedding_type == "learned":
                    count = min(count, model.config.n_positions)  # a learned table has no rows past n_positions
                made = position_pictures(
                    model,
                    label,
                    pictures_dir / str(index),
                    prompt,
                    token_vs_position=token_vs_position,
                    n_dims=int(n_dims),
                    seed=int(seed),
                    max_positions=count,
                )
                shown.append([(str(path), f"{label}: {path.stem}") for path in made])
        return shown

    def attention(prompt, layer, head):
        with lock:
            outputs = []
            for label, model in models:
                if int(layer) >= model.config.n_layer or int(head) >= model.config.n_head:
                    shape = f"{model.config.n_layer} layers of {model.config.n_head} heads"
                    outputs += [plot_message(f"{label} has {shape}: no layer {int(layer)}, head {int(head)}"), None]
                    continue
                pattern = attention_pattern(model, prompt, int(layer), int(head), tokenizer)
                title = f"{label} ({model.config.position_embedding_type}): layer {int(layer)}, head {int(head)}"
                outputs.append(plot_attention_pattern(pattern, title))
                headers = [f"{i}: {text}" for i, text in enumerate(pattern["tokens"])]
                outputs.append({"headers": headers, "data": pattern["weights"].round(6).tolist()})
        return outputs

    def past_training_length(text, context, progress=gr.Progress()):  # noqa: B008 (how Gradio asks for a bar)
        ids = torch.tensor(tokenizer(text or "")["input_ids"], dtype=torch.long)
        if len(ids) < int(context):
            raise gr.Error(f"the long text has {len(ids)} tokens: paste at least one window ({int(context)} tokens)")
        curves, unscored = [], []
        with lock:
            for (label, model), trained in progress.tqdm(list(zip(models, trained_at, strict=True)), desc="scoring"):
                if int(ids.max()) >= model.config.vocab_size:  # its loss would be of other tokens than the text's
                    unscored.append(f"{label} (a vocabulary of {model.config.vocab_size})")
                    continue
                curves.append((label, per_position_loss(model, ids, int(context)), trained))
        if not curves:
            raise gr.Error(f"the text's GPT-2 tokens lie outside every model's vocabulary: {', '.join(unscored)}")
        windows = len(ids) // int(context)
        title = f"per-position loss over {windows} windows of {int(context)} tokens"
        if unscored:
            title += f"\nnot scored, the text's tokens lie outside their vocabulary: {', '.join(unscored)}"
        table = {
            "headers": ["position", *(label for label, _, _ in curves)],
            "data": [[i + 1, *(round(float(c[1][i]), 5) for c in curves)] for i in range(int(context) - 1)],
        }
        hover = pd.DataFrame(
            [(i + 1, label, float(loss)) for label, losses, _ in curves for i, loss in enumerate(losses)],
            columns=["position", "model", "loss (nats)"],
        ).dropna()
        return plot_per_position_loss(curves, title), hover, table

    def generate(prompt, max_new_tokens):
        from transformers import TextIteratorStreamer

        texts = [""] * len(models)
        for index, (_, model) in enumerate(models):
            ids = torch.tensor([shown_as_gradio_errors(prompt_tokens)(model, prompt, tokenizer)[0]])
            streamer = TextIteratorStreamer(tokenizer, skip_prompt=True)
            settings = dict(max_new_tokens=int(max_new_tokens), do_sample=False, pad_token_id=tokenizer.eos_token_id)

            def run(model=model, ids=ids, streamer=streamer, settings=settings):
                with lock:  # held by the worker, not across this generator's yields: a closed page frees it
                    model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), streamer=streamer, **settings)

            worker = threading.Thread(target=run, daemon=True)
            worker.start()
            for piece in streamer:
                texts[index] += piece
                yield list(texts)
            worker.join()
        yield list(texts)

    with gr.Blocks(title="hf-tinygpt explore") as demo:
        gr.Markdown(
            "# How these GPTs put tokens in order\n"
            + ", ".join(f"**{label}** ({model.config.position_embedding_type})" for label, model in models)
        )
        prompt = gr.Textbox(DEFAULT_PROMPT, label="prompt (repeat a word to see its two positions)")
        with gr.Tab("Token + position"):
            token_button = gr.Button("Draw")
            with gr.Row():
                token_pictures = [gr.Image(type="filepath", label=label) for label in labels]
        with gr.Tab("The position scheme"):
            with gr.Row():
                n_dims = gr.Slider(1, 16, value=8, step=1, label="dimensions traced")
                # up to 4× the longest table: how a scheme looks past the positions it was trained on
                most = min(4 * most_positions, MAX_PLOTTED_POSITIONS)
                positions = gr.Slider(2, most, value=most_positions, step=1, label="positions plotted")
                seed = gr.Number(0, precision=0, label="seed (which dimensions)")
            scheme_button = gr.Button("Draw")
            with gr.Row():
                galleries = [
                    gr.Gallery(label=label, columns=1, object_fit="contain", height="auto") for label in labels
                ]
        with gr.Tab("Inside attention"):
            with gr.Row():
                layer = gr.Slider(0, max_layer, value=0, step=1, label="layer")
                head = gr.Slider(0, max_head, value=0, step=1, label="head")
            attention_button = gr.Button("Show")
            attention_outputs = []
            with gr.Row():
                for label in labels:
                    with gr.Column():
                        attention_outputs.append(gr.Plot(label=label))
                        attention_outputs.append(gr.Dataframe(label=f"{label}: weights (query rows)"))
        with gr.Tab("Past the training length"):
            long = gr.Textbox(
                long_text,
                label="long text",
                placeholder="paste a long text: a few thousand tokens",
                lines=4,
                max_lines=6,
            )
            context = gr.Slider(8, 2048, value=512, step=8, label="window (tokens)")
            length_button = gr.Button("Score")
            length_plot = gr.Plot(label="per-position loss")
            length_hover = gr.LinePlot(
                x="position", y="loss (nats)", color="model", tooltip="all", label="each position's loss (hover)"
            )
            length_table = gr.Dataframe(label="per-position loss (nats)")
        with gr.Tab("Generate"):
            new_tokens = gr.Slider(1, 200, value=40, step=1, label="new tokens (greedy)")
            generate_button = gr.Button("Generate")
            with gr.Row():
                continuations = [gr.Textbox(label=label, lines=6) for label in labels]

        def token_images(prompt):
            return [shown[0][0] for shown in pictures(prompt, token_vs_position=True)]

        def scheme_galleries(prompt, n_dims, positions, seed):
            return pictures(prompt, False, n_dims, positions, seed)

        token_button.click(shown_as_gradio_errors(token_images), prompt, token_pictures, api_name="token_position")
        scheme_button.click(
            shown_as_gradio_errors(scheme_galleries),
            [prompt, n_dims, positions, seed],
            galleries,
            api_name="position_scheme",
        )
        attention_button.click(
            shown_as_gradio_errors(attention), [prompt, layer, head], attention_outputs, api_name="attention"
        )
        length_button.click(
            past_training_length, [long, context], [length_plot, length_hover, length_table], api_name="past_length"
        )
        generate_button.click(generate, [prompt, new_tokens], continuations, api_name="generate")
    return demo
