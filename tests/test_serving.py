"""`hf-tinygpt serve`: transformers' own OpenAI-compatible server on loopback, asked by the `openai` client, answers
what `generate` answers: completions and streamed chat completions, concurrent, with continuous batching and
without, for a RoPE, a learned and a bias-scheme folder."""

import contextlib
import re
import shlex
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from conftest import random_gpt2, readme_blocks, text_model, word_tokenizer
from transformers import AutoTokenizer

from hf_tinygpt import DEFAULT_MODEL_DIR, TinyGPTForCausalLM, gpt2_tokenizer
from hf_tinygpt.folders.bundled import tokenizer_sha256

openai = pytest.importorskip("openai", reason="the [serve] extra's openai client")
pytest.importorskip("transformers.cli.serving.model_manager", reason="transformers' server (5.25)")

PROMPTS = ["To be, or not to be", "Hello,", "The king is dead; long live", "O Romeo, Romeo!"]
NEW_TOKENS = 8
# A chat template of the folder's own (GPT-2's tokenizer has none): the chat endpoint needs one.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
SMALL_PAGED_CACHE = ["--cb-num-blocks", "16", "--cb-block-size", "32", "--cb-max-batch-tokens", "64"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def serving(model: str, options: list[str], folder: Path):
    """`hf-tinygpt serve MODEL OPTIONS` started in `folder` on a free port of 127.0.0.1, until the block ends: an
    OpenAI client of it, once it answers."""
    port = free_port()
    command = [sys.executable, "-m", "hf_tinygpt", "serve", model, *options, "--host", "127.0.0.1", "--port", str(port)]
    log_path = folder / "server.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    client.models.list()
                    break
                except openai.APIConnectionError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(f"the server did not start:\n{log_path.read_text()[-3000:]}")
                    time.sleep(0.5)
            yield client
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()


@pytest.fixture
def served(tmp_path, request):
    """(client, folder, model): a folder of the parameter's scheme served with the parameter's options."""
    scheme, options = request.param
    model = text_model(scheme, initializer_range=0.2)
    tokenizer = gpt2_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    folder = tmp_path / scheme
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with serving(str(folder), options, tmp_path) as client:
        yield client, str(folder), model


def greedy_text(model, ids: list[int]) -> str:
    ids = torch.tensor([ids])  # all real: "!" is token 0, which generate would take for padding without the mask
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False)
    return gpt2_tokenizer().decode(out[0, ids.shape[1] :])


SERVERS = [
    ("rope", ["--continuous-batching", *SMALL_PAGED_CACHE]),
    ("learned", []),
    ("alibi", ["--continuous-batching", *SMALL_PAGED_CACHE]),
]


@pytest.mark.slow  # a server process each
@pytest.mark.parametrize("served", SERVERS, indirect=True, ids=["rope-paged", "learned-plain", "alibi-paged"])
def test_the_openai_client_gets_what_generate_gives(served):
    client, folder, model = served
    tokenizer = AutoTokenizer.from_pretrained(folder)  # GPT-2's, with the folder's chat template

    def completion(prompt):
        answer = client.completions.create(model=folder, prompt=prompt, max_tokens=NEW_TOKENS, temperature=0)
        return answer.choices[0].text

    with ThreadPoolExecutor(len(PROMPTS)) as pool:  # at once: continuous batching runs them side by side
        answers = list(pool.map(completion, PROMPTS))
    assert answers == [greedy_text(model, tokenizer(p).input_ids) for p in PROMPTS]

    messages = [{"role": "user", "content": "Who is there?"}]
    stream = client.chat.completions.create(
        model=folder, messages=messages, max_tokens=NEW_TOKENS, temperature=0, stream=True
    )
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    chat_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    chat_ids = chat_ids["input_ids"] if hasattr(chat_ids, "keys") else chat_ids
    assert streamed == greedy_text(model, list(chat_ids))

    # A prompt of no tokens is the request's fault, a 400 that names it; then the server goes on (with continuous
    # batching transformers' own GPT-2 stops it: transformers 5.25's engine fails on a batch of no tokens).
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=folder, prompt="", max_tokens=NEW_TOKENS, temperature=0)
    assert re.search("are empty|has no tokens", refused.value.response.json()["detail"])
    assert completion(PROMPTS[0]) == answers[0]


def test_a_model_it_cannot_serve_is_one_error_before_the_server_starts(tmp_path, capsys):
    from hf_tinygpt.cli.commands import main

    assert main(["serve", str(tmp_path / "missing"), "--port", "1"]) == 2
    assert capsys.readouterr().err.strip().endswith("missing: no such model folder (nor a Hub id)")
    (tmp_path / "config.json").write_text('{"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "m.M"}}')
    assert main(["serve", str(tmp_path), "--trust-remote-code"]) == 2
    assert "names code that came with the model; hf-tinygpt never runs a folder's code" in capsys.readouterr().err


def test_a_kernel_the_scheme_cannot_take_is_one_error_before_the_server_starts(tmp_path, capsys):
    """ALiBi adds a bias to the scores, which flex attention cannot take: refused by the scheme, by name, before the
    model's process and the server start (not as that process's traceback). transformers' own refusal of a kernel
    it does not have here comes the same way."""
    from hf_tinygpt.cli.commands import main

    text_model("alibi").save_pretrained(tmp_path / "alibi")
    gpt2_tokenizer().save_pretrained(tmp_path / "alibi")
    capsys.readouterr()  # transformers' progress bar of the save
    with socket.socket() as taken:  # were the check gone, the server would stop at once: its port is taken
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        where = ["--host", "127.0.0.1", "--port", str(taken.getsockname()[1])]
        for kernel in ("flex_attention", "flash_attention_2"):
            assert main(["serve", str(tmp_path / "alibi"), "--attn-implementation", kernel, *where]) == 2, kernel
            said = capsys.readouterr().err.strip()
            assert len(said.splitlines()) == 1, said
            # flash attention 2: transformers refuses it first where its package is missing (CPU machines)
            if "FlashAttention2 has been toggled on, but it cannot be used" not in said:
                assert said.startswith("hf-tinygpt serve: error: position_embedding_type='alibi' adds a per-head")
                assert f"attn_implementation='{kernel}' cannot take" in said, said


def test_a_model_whose_weights_or_scheme_it_cannot_serve_is_one_error_before_the_server_starts(tmp_path, capsys):
    """Weights that do not fit the model are refused, as by every command, not served with a tensor initialised at
    random; no weights, PaTH under continuous batching, or tokenizer files other than those the card says the weights
    were trained with, are one line too, not the model's process's traceback (or, for the tokenizer, nothing)."""
    from hf_tinygpt.cli.commands import main

    for scheme in ("learned", "rope", "path", "swapped"):
        text_model("learned" if scheme == "swapped" else scheme).save_pretrained(tmp_path / scheme)
        gpt2_tokenizer().save_pretrained(tmp_path / scheme)
    words = tokenizer_sha256(word_tokenizer(["to", "be"]))  # what its card says it was trained with, not GPT-2's BPE
    (tmp_path / "swapped" / "README.md").write_text(f"---\ntinygpt:\n  training:\n    tokenizer_sha256: {words}\n---\n")
    (tmp_path / "learned" / "model.safetensors").write_bytes((tmp_path / "rope" / "model.safetensors").read_bytes())
    (tmp_path / "rope" / "model.safetensors").unlink()
    random_gpt2().save_pretrained(tmp_path / "gpt2")  # transformers' own, no tokenizer files: each request was a 500
    capsys.readouterr()
    with socket.socket() as taken:  # were a check missing, the server would stop at once: its port is taken
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        where = ["--host", "127.0.0.1", "--port", str(taken.getsockname()[1])]
        for folder, options, said in [
            ("learned", [], "the checkpoint does not match the model (learned positions"),
            ("rope", [], "no file named model.safetensors"),
            ("path", ["--continuous-batching"], "position_embedding_type='path' rewrites the keys its cache holds"),
            ("swapped", [], "the tokenizer its files hold is not the tokenizer its weights were trained with"),
            ("gpt2", [], "holds no tokenizer files, and transformers made it a tokenizer of 1 token"),
        ]:
            assert main(["serve", str(tmp_path / folder), *options, *where]) == 2, folder
            err = capsys.readouterr().err.strip()
            assert said in err.splitlines()[-1] and "Traceback" not in err and "LOAD REPORT" not in err, err


@pytest.mark.slow  # a server process
def test_the_readme_serve_blocks_answer_generates_text(tmp_path):
    """The README's ```bash serve command (with a port of its own and a small paged cache) on its `my-tinygpt` (the
    shipped model, saved with its tokenizer as the README says), then its ```python openai block: each answer is
    transformers' greedy text."""
    [command], [block] = readme_blocks("bash serve"), readme_blocks("python openai")
    hf_tinygpt_serve, model, *options = shlex.split(command)[1:]
    assert (hf_tinygpt_serve, model) == ("serve", "my-tinygpt")
    shipped = TinyGPTForCausalLM.from_pretrained(DEFAULT_MODEL_DIR, dtype=torch.float32)
    shipped.save_pretrained(tmp_path / "my-tinygpt")
    gpt2_tokenizer().save_pretrained(tmp_path / "my-tinygpt")
    with serving(model, [*options, *SMALL_PAGED_CACHE], tmp_path) as client:
        block = block.replace("http://localhost:8000/v1", str(client.base_url))
        run = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    log = (tmp_path / "server.log").read_text()  # the model's process too: no start-up noise (cli/start_up.py)
    assert "Failed to load" not in log and "is an Enum subclass" not in log, log[-3000:]
    tokenizer = gpt2_tokenizer()
    expected = []
    for prompt in ("ROMEO:", "JULIET:"):
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        out = shipped.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False)
        expected.append(tokenizer.decode(out[0, ids.shape[1] :]))
    assert run.stdout == "".join(f"{text}\n" for text in expected)


def test_its_options_are_transformers_serves(tmp_path, capsys, monkeypatch):
    from hf_tinygpt.cli.commands import main

    monkeypatch.setenv("COLUMNS", "200")  # the help's table cuts its names to the terminal's width
    text_model("rope").save_pretrained(tmp_path)
    assert main(["serve", str(tmp_path), "--help"]) == 0
    shown = capsys.readouterr().out
    assert "--continuous-batching" in shown and "--cb-num-blocks" in shown and "hf-tinygpt serve" in shown
