"""`hf-tinygpt serve`: transformers' own OpenAI-compatible server (`transformers serve`: /v1/completions,
/v1/chat/completions, streaming, continuous batching with `--continuous-batching`) for TinyGPT folders and Hub ids.

transformers' server loads a model by looking its config's `architectures[0]` up on the transformers module, which
holds transformers' own classes only, so it cannot load a TinyGPT, installed or remote code. Here its loader is
transformers' with that one step done through the class this package registers; everything else (options, HTTP,
generation, the paged cache) is transformers' own.
"""

import sys

import torch
import typer

from ..folders.bundled import check_trained_with, holds_no_tokens
from ..folders.reading import load_strictly, read_config_dict
from ..model.configuration_tinygpt import TinyGPTConfig
from ..model.modeling_tinygpt import TinyGPTForCausalLM

try:
    from transformers.cli.serve import Serve
    from transformers.cli.serving.model_manager import ModelLoader
    from transformers.cli.serving.utils import parse_model_id
except ImportError as error:  # transformers before the server's model manager (5.25)
    raise ImportError(
        f"hf-tinygpt serve runs transformers' server as transformers 5.25 ships it ({error}): "
        'pip install "transformers[serving]>=5.25"'
    ) from error


class TinyGPTModelLoader(ModelLoader):
    """transformers serve's loader, which also loads TinyGPTs: with this package's class, never a folder's code (a
    folder whose config asks for code of its own is refused, as everywhere in this package). The server pickles it
    into the model's process by reference, so that process imports this package first."""

    def _load_model(self, model_id, tqdm_class=None, progress_callback=None):
        repo, revision, gguf_file = parse_model_id(model_id)
        config = {} if gguf_file else read_config_dict(repo, **({"revision": revision} if revision else {}))
        if config.get("model_type") != TinyGPTConfig.model_type:
            return super()._load_model(model_id, tqdm_class, progress_callback)
        quantization = self.get_quantization_config()
        return load_strictly(  # a checkpoint that does not fit the model is refused, never filled at random
            repo,
            config=config,  # as read above, not again
            revision=revision,
            attn_implementation=self.attn_implementation,
            dtype=self.dtype,
            device_map=self.device,
            tqdm_class=tqdm_class,
            **({"quantization_config": quantization} if quantization is not None else {}),
        )

    def check(self, model_id: str, generation_state):
        """What serving the TinyGPT `model_id` raises, raised now rather than as the model's process's traceback:
        its attention kernel (transformers' check, the scheme's of a kernel that takes no mask: built on the meta
        device, which allocates nothing), its weights (loaded strictly, on the CPU, then let go) and, where the server
        batches continuously (`generation_state`, as it decides with the model's processor), whether it can; and its
        tokenizer, where its card records which one its weights were trained with. Any model's tokenizer must be
        made of files: transformers makes a GPT-2 folder without them a tokenizer of one token."""
        repo, revision, gguf_file = parse_model_id(model_id)
        if gguf_file:
            return
        hub = {"revision": revision} if revision else {}
        config = read_config_dict(repo, **hub)
        processor = self.load_processor(model_id)
        if hasattr(processor, "get_vocab") and holds_no_tokens(processor):  # transformers' GPT-2 of no files
            raise ValueError(
                f"{model_id} holds no tokenizer files, and transformers made it a tokenizer of "
                f"{len(processor.get_vocab())} token, which reads every prompt as no tokens (each request would fail): "
                "save the tokenizer its weights were trained with beside them (`tokenizer.save_pretrained`)"
            )
        if config.get("model_type") != TinyGPTConfig.model_type:
            return
        if self.attn_implementation:  # the default kernel (sdpa) runs every scheme
            with torch.device("meta"):
                TinyGPTForCausalLM(TinyGPTConfig.from_dict(config, attn_implementation=self.attn_implementation))
        model = load_strictly(repo, config=config, dtype=self.dtype, **hub)
        if hasattr(processor, "get_vocab"):  # a tokenizer: the one the card says the weights were trained with
            check_trained_with(processor, repo, **hub)
        if generation_state.use_continuous_batching(model.config, processor):
            model.check_continuous_batching()


class TinyGPTServe(Serve):
    """transformers' `Serve` (its options are its `__init__`'s, which ends by serving), with the loader above."""

    def run(self, socket=None, engine_connection=None):
        self._load_tinygpts(check=engine_connection is None)  # an API server's process: its parent checked
        super().run(socket, engine_connection)

    def run_api_servers(self, count):
        self._load_tinygpts()
        super().run_api_servers(count)

    def _load_tinygpts(self, check: bool = True):
        """The loader above (`Serve.__init__` built transformers' with the same settings: only loads differ), and the
        command line's model checked before any process starts."""
        self.loader.__class__ = TinyGPTModelLoader
        if check and self.force_model is not None:
            self.loader.check(self.force_model, self.generation_state)


def serve(model: str, options: list[str]) -> int:
    """Serve `model` (a folder or Hub id, `repo@revision` too) as `transformers serve MODEL OPTIONS` does, until
    stopped; its exit code. Its config is read first, so that a wrong model is one error before the server starts."""
    repo, revision, gguf_file = parse_model_id(model)
    if not gguf_file:
        read_config_dict(repo, **({"revision": revision} if revision else {}))
    app = typer.Typer(add_completion=False)
    app.command(help="transformers' OpenAI-compatible server (transformers serve), for TinyGPT models too")(
        TinyGPTServe
    )
    try:
        app(args=[model, *options], prog_name="hf-tinygpt serve")
    except SystemExit as stop:  # how typer ends: None or 0 when it served, an exit code or a message when not
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        return stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    return 0
