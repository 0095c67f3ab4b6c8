"""The explorer is a server: one bad request cannot stall it, exhaust it or publish it. Each kind of hostile request
goes to a real Gradio server on loopback through Gradio's own client (and plain HTTP, for what a browser can send
that the client cannot), and is answered by one readable sentence; the next request, from another client, answers.
The limits themselves are checked in the fast tier."""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch
from conftest import text_model, tiny_model

pytest.importorskip("gradio")
from gradio_client import Client

from hf_tinygpt import gpt2_tokenizer
from hf_tinygpt.explore.app import build_app, launch
from hf_tinygpt.explore.limits import (
    MAX_PROMPT_TOKENS,
    MAX_TEXT_TOKENS,
    checked_text,
    long_text_ids,
    whole_number,
)
from hf_tinygpt.explore.views import load_models
from scripts.explorer_screenshots import free_port

PROMPT = "The cat sat on the mat by the door"
LONG_TEXT = " ".join(f"Line {i}: to be, or not to be, that is the question." for i in range(60))
ANSWER_WITHIN = 120  # seconds: a request that has not answered by then has hung

# (endpoint, inputs, what the one-sentence answer says) for a learned model of 64 positions beside an ALiBi one.
REFUSED = [
    ("/generate", ["x" * 1_000_000, 5], "the prompt is 1,000,000 characters long; the explorer takes at most 4,000"),
    (
        "/generate",
        [("the " * 300).strip(), 5],
        f"the prompt is 300 tokens long; the explorer takes at most {MAX_PROMPT_TOKENS}",
    ),
    # (Gradio's slider said "Value 1000 is greater than maximum value 200", naming no slider, with a traceback.)
    ("/generate", [PROMPT, 1000], "the number of new tokens must be a whole number from 1 to 200, got 1000"),
    ("/generate", [PROMPT, 4.5], "the number of new tokens must be a whole number from 1 to 200, got 4.5"),
    ("/token_position", ["the " * 20_000], "the prompt is 80,000 characters long"),
    ("/token_position", [""], "the prompt is empty: type a few words"),
    ("/attention", [PROMPT, 0.5, 0], "the layer must be a whole number from 0 to 1, got 0.5"),
    ("/attention", [PROMPT, 0, 0.5], "the head must be a whole number from 0 to 1, got 0.5"),
    ("/position_scheme", [PROMPT, 2.5, 64, 0], "the number of dimensions traced must be a whole number from 1 to 16"),
    ("/position_scheme", [PROMPT, 4, 10**6, 0], "the number of positions plotted must be a whole number from 2 to 256"),
    ("/position_scheme", [PROMPT, 4, 64, -1], "the seed must be a whole number from 0 to 2,147,483,647, got -1"),
    ("/position_scheme", [PROMPT, 4, 64, 0.25], "the seed must be a whole number from 0 to 2,147,483,647, got 0.25"),
    ("/past_length", [LONG_TEXT, 4096], "the window must be a whole number from 8 to 2,048, got 4096"),
    ("/attention", [PROMPT, 2, 0], "the layer must be a whole number from 0 to 1, got 2"),
    ("/past_length", [LONG_TEXT, 64.5], "the window must be a whole number from 8 to 2,048, got 64.5"),
    (
        "/past_length",
        [("the " * (MAX_TEXT_TOKENS + 1)).strip(), 64],
        f"the long text is {MAX_TEXT_TOKENS + 1:,} tokens long; the explorer scores at most {MAX_TEXT_TOKENS:,}",
    ),
]


def serve(models, **kwargs):
    demo = build_app(models, **kwargs)
    port = free_port()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return demo, f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def explorer(tmp_path_factory):
    folders, root = [], tmp_path_factory.mktemp("explorer-server")
    for scheme in ("learned", "alibi"):
        folder = root / scheme
        text_model(scheme, seed=1).save_pretrained(folder)
        folders.append(str(folder))
    models = load_models(folders)
    demo, url = serve(models, long_text=LONG_TEXT)
    try:
        yield models, url
    finally:
        demo.close()


def refusal(client: Client, api_name: str, inputs: list) -> str:
    """What the app answers a request it refuses: Gradio's client raises it as an AppError."""
    job = client.submit(*inputs, api_name=api_name)
    with pytest.raises(Exception) as raised:
        job.result(timeout=ANSWER_WITHIN)
    assert type(raised.value).__name__ == "AppError", repr(raised.value)
    return str(raised.value)


def greedy(model, prompt: str, new_tokens: int) -> str:
    tokenizer = gpt2_tokenizer()
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False)
    return tokenizer.decode(out[0, ids.shape[1] :])


def browser_request(url: str, api_name: str, body: str) -> tuple[str, dict]:
    """A request as a browser's page sends it, its JSON written by hand (the client cannot send a lone surrogate):
    (the event that ended it, its data)."""
    posted = httpx.post(f"{url}gradio_api/call/{api_name}", content=body, headers={"content-type": "application/json"})
    event = posted.json()["event_id"]
    with httpx.stream("GET", f"{url}gradio_api/call/{api_name}/{event}", timeout=ANSWER_WITHIN) as stream:
        lines = "".join(stream.iter_text()).strip().splitlines()
    return lines[-2].removeprefix("event: "), json.loads(lines[-1].removeprefix("data: "))


def test_the_limits_are_checked_before_any_work():
    assert whole_number(3.0, "layer", 0, 3) == 3 and isinstance(whole_number(3.0, "layer", 0, 3), int)
    for value, shown in ((1.5, "1.5"), (4, "4"), (-1, "-1"), (True, "True"), ("2", "str"), (None, "NoneType")):
        with pytest.raises(ValueError, match=rf"^the layer must be a whole number from 0 to 3, got {shown}$"):
            whole_number(value, "layer", 0, 3)
    with pytest.raises(ValueError, match="the window must be a whole number"):
        whole_number(float("nan"), "window", 8, 2048)
    assert checked_text(None, "prompt", 10) == ""
    with pytest.raises(ValueError, match="^the prompt is 11 characters long; the explorer takes at most 10$"):
        checked_text("x" * 11, "prompt", 10)
    with pytest.raises(ValueError, match=r"a lone surrogate, character 3\): paste it again$"):
        checked_text("ab\ud800", "prompt", 10)
    with pytest.raises(ValueError, match="must be text, got list"):
        checked_text(["a"], "prompt", 10)

    class Counting:  # the characters are counted before any tokenizer runs
        calls = 0

        def __call__(self, text):
            self.calls += 1
            return {"input_ids": text.split()}

    tokenizer = Counting()
    with pytest.raises(ValueError, match="characters long"):
        long_text_ids("x " * 200_001, tokenizer)
    assert tokenizer.calls == 0
    with pytest.raises(ValueError, match="^the long text is 65,537 tokens long; the explorer scores at most 65,536$"):
        long_text_ids("x " * 65_537, tokenizer)


@pytest.mark.slow
def test_a_request_that_fails_never_blocks_the_next(explorer, capfd):
    """Every refused kind answers one sentence naming its limit, and writes no traceback into the server's log; then
    another client's /generate answers."""
    models, url = explorer
    hostile = Client(url, verbose=False)
    for api_name, inputs, says in REFUSED:
        answer = refusal(hostile, api_name, inputs)
        assert says in answer and "\n" not in answer, (api_name, answer)
    assert "Traceback" not in "".join(capfd.readouterr())
    upload = httpx.post(f"{url}gradio_api/upload", files={"files": ("big.bin", b"x" * 2_000_000)})
    assert upload.status_code == 413  # the app reads text, never files: Gradio's upload route takes none
    event, data = browser_request(url, "generate", '{"data": ["a \\ud800 b", 3]}')
    assert event == "error" and "holds a character that is not text (a lone surrogate, character 3)" in data["error"]
    texts = Client(url, verbose=False).submit(PROMPT, 5, api_name="/generate").result(timeout=ANSWER_WITHIN)
    assert list(texts) == [greedy(model, PROMPT, 5) for _, model, *_ in models]


@pytest.mark.slow
def test_a_generation_that_fails_part_way_frees_the_app(explorer, monkeypatch):
    """An exception inside generate (the worker thread) ends that request with a readable error; the worker, the
    lock and the streamer are ready for the next one."""
    models, url = explorer
    alibi = models[1][1]
    forward, calls = alibi.forward, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the third step failed")
        return forward(*args, **kwargs)

    monkeypatch.setattr(alibi, "forward", failing)
    answer = refusal(Client(url, verbose=False), "/generate", [PROMPT, 8])
    assert answer == "this request failed (RuntimeError: the third step failed)"
    monkeypatch.undo()
    texts = Client(url, verbose=False).submit(PROMPT, 5, api_name="/generate").result(timeout=ANSWER_WITHIN)
    assert list(texts) == [greedy(model, PROMPT, 5) for _, model, *_ in models]


@pytest.mark.slow
def test_a_client_that_leaves_mid_stream_stops_its_generation(explorer, monkeypatch):
    models, url = explorer
    alibi = models[1][1]
    forward, steps = alibi.forward, []

    def slow(*args, **kwargs):
        steps.append(time.monotonic())
        time.sleep(0.05)
        return forward(*args, **kwargs)

    monkeypatch.setattr(alibi, "forward", slow)
    job = Client(url, verbose=False).submit(PROMPT, 50, api_name="/generate")  # the learned model first, then ALiBi
    deadline = time.monotonic() + ANSWER_WITHIN
    while len(steps) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    job.cancel()
    left_at = len(steps)
    time.sleep(3)
    assert 5 <= left_at and len(steps) <= left_at + 2, (left_at, len(steps))  # not the 50 it asked for
    monkeypatch.undo()
    texts = Client(url, verbose=False).submit(PROMPT, 5, api_name="/generate").result(timeout=ANSWER_WITHIN)
    assert list(texts) == [greedy(model, PROMPT, 5) for _, model, *_ in models]


@pytest.mark.slow
def test_the_others_are_answered_while_one_client_is_hostile(explorer):
    models, url = explorer
    stop, refused = threading.Event(), []

    def hostile():
        client = Client(url, verbose=False)
        while not stop.is_set():
            for api_name, inputs, _ in REFUSED[:4]:
                refused.append(refusal(client, api_name, inputs))

    attacker = threading.Thread(target=hostile, daemon=True)
    attacker.start()
    try:
        clients = [Client(url, verbose=False) for _ in range(3)]
        jobs = [client.submit(PROMPT, 4 + i, api_name="/generate") for i, client in enumerate(clients)]
        jobs.append(clients[0].submit(PROMPT, 1, 1, api_name="/attention"))
        answers = [job.result(timeout=ANSWER_WITHIN) for job in jobs]
    finally:
        stop.set()
        attacker.join(timeout=ANSWER_WITHIN)
    for i, texts in enumerate(answers[:3]):
        assert list(texts) == [greedy(model, PROMPT, 4 + i) for _, model, *_ in models]
    assert len(answers[3][1]["data"]) == 9 and refused  # the alibi table: one row per prompt token


@pytest.mark.slow
def test_one_model_alone_the_shipped_one_is_explored_whole():
    """With the shipped model alone (the default), each tab answers with that model's own value: a picture, a
    gallery, a text (not a list of one)."""
    models = load_models([])
    demo, url = serve(models)
    try:
        client = Client(url, verbose=False)
        assert Path(client.predict(PROMPT, api_name="/token_position")).read_bytes()[:4] == b"\x89PNG"
        gallery = client.predict(PROMPT, 4, 64, 0, api_name="/position_scheme")
        assert gallery and all(item["caption"].startswith("default_model: ") for item in gallery)
        assert client.predict(PROMPT, 5, api_name="/generate") == greedy(models[0][1], PROMPT, 5)
        _, table = client.predict(PROMPT, 11, 1, api_name="/attention")
        assert len(table["data"]) == 9
    finally:
        demo.close()


@pytest.mark.slow
def test_a_model_of_one_layer_and_one_head_is_explored(tmp_path):
    folder = tmp_path / "one"
    tiny_model("rope", seed=2, n_layer=1, n_head=1, vocab_size=50257, n_embd=16).save_pretrained(folder)
    demo, url = serve(load_models([str(folder)]))
    try:
        client = Client(url, verbose=False)
        _, table = client.predict(PROMPT, 0, 0, api_name="/attention")
        assert len(table["data"]) == 9
        assert "the layer must be a whole number from 0 to 0, got 1" in refusal(client, "/attention", [PROMPT, 1, 0])
    finally:
        demo.close()


@pytest.mark.slow
def test_gradio_serves_only_the_files_the_app_wrote(tmp_path, monkeypatch):
    """A link planted at the shared `$TMPDIR/gradio` is never Gradio's folder here: the app's files are served from
    a folder the app made (only its user can read it), and a file beside the link's target is not served."""
    shared, elsewhere = tmp_path / "shared-tmp", tmp_path / "someone-elses"
    shared.mkdir()
    elsewhere.mkdir()
    (elsewhere / "secret.env").write_text("HF_TOKEN=hf_not_to_be_served\n", encoding="utf-8")
    (shared / "gradio").symlink_to(elsewhere)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    monkeypatch.delenv("GRADIO_TEMP_DIR", raising=False)
    monkeypatch.setenv("GRADIO_ALLOWED_PATHS", str(elsewhere))  # nor does the environment widen what is served
    demo, url = serve(load_models(["rope", "alibi"]))
    try:
        event, data = browser_request(url, "token_position", json.dumps({"data": [PROMPT]}))
        assert event == "complete" and httpx.get(data[0]["url"]).content[:4] == b"\x89PNG"
        leaked = httpx.get(f"{url}gradio_api/file={elsewhere / 'secret.env'}")
        assert leaked.status_code >= 400 and b"hf_not_to_be_served" not in leaked.content
        picture = Path(data[0]["path"])
        private = next(folder for folder in picture.parents if folder.name.startswith("hf-tinygpt-explore-"))
        assert private.parent == shared and private.stat().st_mode & 0o077 == 0
        assert sorted(p.name for p in elsewhere.iterdir()) == ["secret.env"]  # nothing of the app's went there
    finally:
        demo.close()


@pytest.mark.slow
def test_gradio_caches_nothing_in_the_shared_temp_folder(tmp_path):
    """Gradio reads GRADIO_TEMP_DIR once, as it is imported, and its routes make folders there at launch: set after
    the import, a shared $TMPDIR/gradio (and a link planted there) was written into. A fresh interpreter, as the
    command line starts."""
    victim, shared = tmp_path / "victim", tmp_path / "tmp"
    victim.mkdir()
    shared.mkdir()
    (shared / "gradio").symlink_to(victim)
    code = "import hf_tinygpt.explore.app, gradio.routes; print(gradio.routes.DEFAULT_TEMP_DIR)"
    env = {**os.environ, "TMPDIR": str(shared), "GRADIO_TEMP_DIR": ""}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    cache = Path(run.stdout.strip().splitlines()[-1])
    assert cache.parent.parent == shared and cache.parent.name.startswith("hf-tinygpt-explore-"), cache
    assert [path.name for path in shared.iterdir()] == ["gradio"] and not any(victim.iterdir())  # removed at exit
