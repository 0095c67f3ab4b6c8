"""The position explorer: what it shows is what the models compute. The fast tier checks the views; the slow tier
starts a real Gradio server on loopback over two models of different schemes and drives it with Gradio's own client
and with a real headless Chromium."""

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import HUB_TOKEN, text_model, tiny_model, word_tokenizer

gr = pytest.importorskip("gradio")
from gradio_client import Client  # noqa: E402

from hf_tinygpt import gpt2_tokenizer  # noqa: E402
from hf_tinygpt.explore.app import build_app, launch  # noqa: E402
from hf_tinygpt.explore.views import attention_pattern, load_models, per_position_loss  # noqa: E402
from scripts.explorer_screenshots import Page, chromium, free_port  # noqa: E402

PROMPT = "The cat sat on the mat by the door"
LONG_TEXT = " ".join(f"Line {i}: to be, or not to be, that is the question." for i in range(60))


@pytest.fixture(scope="module")
def explorer(tmp_path_factory):
    folders = []
    for scheme in ("learned", "alibi"):
        folder = tmp_path_factory.mktemp(scheme)
        text_model(scheme, seed=1).save_pretrained(folder)
        folders.append(str(folder))
    models = load_models(folders)
    demo = build_app(models, long_text=LONG_TEXT)
    port = free_port()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield models, Client(f"http://127.0.0.1:{port}/", verbose=False), f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@pytest.mark.slow
def test_every_tab_shows_both_models_and_follows_the_prompt(explorer):
    models, client, _ = explorer
    first = client.predict(PROMPT, api_name="/token_position")
    again = client.predict(PROMPT + " the cat", api_name="/token_position")
    assert len(first) == len(again) == 2
    for before, after in zip(first, again, strict=True):
        assert Path(before).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert Path(before).read_bytes() != Path(after).read_bytes()  # a changed prompt, a changed picture
    learned, alibi = client.predict(PROMPT, api_name="/position_scheme")
    assert [item["caption"].split(": ")[1] for item in learned] == [
        "position_matrix",
        "dimension_traces",
        "cosine_similarity",
    ]
    assert [item["caption"].split(": ")[1] for item in alibi] == ["alibi_bias"]
    texts = client.predict(PROMPT, 5, api_name="/generate")
    tokenizer = gpt2_tokenizer()
    for (_, model, *_), text in zip(models, texts, strict=True):
        ids = torch.tensor([tokenizer(PROMPT)["input_ids"]])
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False)
        assert text == tokenizer.decode(expected[0, ids.shape[1] :])


@pytest.mark.slow
def test_attention_shown_is_the_models_output_attentions(explorer):
    models, client, _ = explorer
    shown = client.predict(PROMPT, 1, 1, api_name="/attention")
    tables = shown[1::2]
    ids = torch.tensor([gpt2_tokenizer()(PROMPT)["input_ids"]])
    for (_, model, *_), table in zip(models, tables, strict=True):
        with torch.no_grad():
            expected = model(ids, output_attentions=True).attentions[1][0, 1]
        assert np.allclose(np.array(table["data"], dtype=float), expected.numpy(), atol=1e-6)
        assert table["headers"][2] == "2:  sat"
    alibi = models[1][1]
    weights = attention_pattern(alibi, PROMPT, 0, 0)["weights"]
    assert np.allclose(np.triu(weights, 1), 0) and np.allclose(weights.sum(1), 1)  # causal rows of probabilities


@pytest.mark.slow
def test_past_the_training_length_is_the_models_loss_at_each_position(explorer):
    models, client, _ = explorer
    figure, hover, table = client.predict(LONG_TEXT, 96, api_name="/past_length")
    ids = torch.tensor(gpt2_tokenizer()(LONG_TEXT)["input_ids"])
    learned, alibi = (shown.model for shown in models)
    assert learned.config.n_positions == 64  # so the learned model has no loss past position 63
    rows = np.array([[np.nan if v in (None, "NaN", "nan") else float(v) for v in row] for row in table["data"]])
    assert rows.shape == (95, 3) and list(rows[:, 0]) == list(range(1, 96))
    windows = ids[: len(ids) // 96 * 96].view(-1, 96)
    with torch.no_grad():
        logits = alibi(windows).logits[:, :-1]
    expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none").mean(0)
    assert np.allclose(rows[:, 2], expected.numpy(), atol=1e-4)
    assert np.isnan(rows[63:, 1]).all() and not np.isnan(rows[:63, 1]).any()
    points = {(label, position): loss for position, label, loss in hover["data"]}  # the hover plot's own data
    assert len(points) == 63 + 95  # the learned model's known positions, then ALiBi's
    assert all(abs(points[models[1][0], i + 1] - rows[i, 2]) < 1e-4 for i in range(95))


@pytest.mark.slow
def test_models_of_different_shapes_each_show_what_they_have(tmp_path):
    """Sliders reach the largest model's layers and heads; a model without them says so. The long text is scored
    only by models whose vocabulary holds its tokens. The scheme's pictures follow the dimension and position
    sliders, a learned table clamped to its rows."""
    from conftest import tiny_model

    small, large = tmp_path / "small-vocabulary", tmp_path / "learned"
    tiny_model("rope", seed=1, n_layer=3, n_head=4).save_pretrained(small)  # 3 layers of 4 heads, 211 tokens
    text_model("learned", seed=1).save_pretrained(large)  # 2 layers of 2 heads, GPT-2's vocabulary
    models = load_models([str(large), str(small)])
    demo = build_app(models)
    port = free_port()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        _, learned_table, _, rope_table = client.predict(PROMPT, 2, 3, api_name="/attention")
        assert learned_table["data"] == [["learned has 2 layers of 2 heads: no layer 2, head 3"]]
        ids = torch.tensor([gpt2_tokenizer()(PROMPT)["input_ids"]]) % 211  # the remapping of these distinct ids
        rope = models[1][1]
        with torch.no_grad():
            expected = rope(ids, output_attentions=True).attentions[2][0, 3]
        assert np.allclose(np.array(rope_table["data"], dtype=float), expected.numpy(), atol=1e-6)

        _, _, table = client.predict(LONG_TEXT, 64, api_name="/past_length")
        assert table["headers"] == ["position", "learned"]  # GPT-2's ids do not fit the 211-token model

        few, many = (client.predict(PROMPT, n, 256, 0, api_name="/position_scheme")[0] for n in (2, 8))
        traces = [
            next(item["image"] for item in shown if item["caption"].endswith("dimension_traces"))
            for shown in (few, many)
        ]
        assert Path(traces[0]).read_bytes() != Path(traces[1]).read_bytes()  # 256 > 64 rows: clamped, not refused
    finally:
        demo.close()


@pytest.fixture
def browser():
    pytest.importorskip("selenium")
    try:
        driver = chromium()
    except RuntimeError as missing:
        pytest.skip(str(missing))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.slow
def test_every_tab_renders_in_a_real_browser(explorer, browser):
    models, _, url = explorer
    page = Page(browser, url, timeout=60)

    page.open_tab("Token + position")
    page.press("Draw")
    first = page.wait(lambda _: len(page.pictures()) == 2 and page.pictures())
    prompt = page.visible("textarea")[0]
    prompt.clear()
    prompt.send_keys("A dog, a dog, a dog")
    page.press("Draw")
    assert page.wait(lambda _: len(page.pictures()) == 2 and page.pictures() != first)  # a changed prompt, new pictures

    page.open_tab("The position scheme")
    page.press("Draw")
    page.wait(lambda _: len(page.pictures()) >= 4)  # learned's three pictures, alibi's bias

    page.open_tab("Inside attention")
    page.press("Show")  # layer 0, head 0
    ids = torch.tensor([gpt2_tokenizer()("A dog, a dog, a dog")["input_ids"]])
    with torch.no_grad():
        expected = models[1][1](ids, output_attentions=True).attentions[0][0, 0]
    shown = page.wait(lambda _: len(rows := page.table_row(2)) == 2 and rows)[1]  # the third query, alibi's table
    assert np.allclose([float(value) for value in shown], expected[2].numpy(), atol=1e-5)

    page.open_tab("Past the training length")
    page.press("Score")  # the long text the app was given, windows of 512 tokens
    first_position = page.wait(lambda _: page.table_row(0))
    assert first_position[0][0] == "1" and len(first_position[0]) == 3  # position 1, then each model's loss
    assert page.wait(lambda _: page.visible("[data-testid=matplotlib] img, .matplotlib img"))
    assert page.wait(lambda _: page.visible(".vega-embed canvas, .vega-embed svg"))  # the hover plot drew itself

    page.open_tab("Generate")
    page.press("Generate")
    continuations = page.wait(lambda _: all(b.get_attribute("value") for b in page.visible("textarea")[1:]) and 1)
    assert continuations and len(page.visible("textarea")[1:]) == 2


def test_views_are_the_models_own_numbers(monkeypatch):
    tokenizer = gpt2_tokenizer()
    model = text_model("alibi", seed=2)
    model.set_attn_implementation("eager")
    ids = torch.tensor(tokenizer(PROMPT)["input_ids"])
    with torch.no_grad():
        expected = model(ids[None], output_attentions=True).attentions[1][0, 1]
    pattern = attention_pattern(model, PROMPT, 1, 1, tokenizer)
    assert np.array_equal(pattern["weights"], expected.numpy()) and pattern["tokens"][1] == " cat"
    for layer, head in ((2, 0), (0, 2), (-1, 0)):
        with pytest.raises(ValueError, match="`layer` must be in|`head` must be in"):
            attention_pattern(model, PROMPT, layer, head, tokenizer)
    long = torch.tensor(tokenizer(LONG_TEXT)["input_ids"])
    monkeypatch.setattr("hf_tinygpt.explore.views.LOGIT_ROWS", 16)  # a window's logits in three pieces
    losses = per_position_loss(model, long, 40)
    windows = long[: len(long) // 40 * 40].view(-1, 40)
    with torch.no_grad():
        logits = model(windows).logits[:, :-1]
    each = torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
    assert np.allclose(losses, each.mean(0).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="fewer than one window of `context` = 40"):
        per_position_loss(model, long[:30], 40)


def test_the_app_writes_nothing_into_the_package():
    """(A Gradio component subclass, as a672e1c defined for its sliders, makes Gradio write a .pyi stub beside the
    module that defines it, into the installed package, as that module is imported.)"""
    import hf_tinygpt

    build_app([("alibi", text_model("alibi"))])
    assert not list(Path(hf_tinygpt.__file__).parent.rglob("*.pyi"))


def test_a_model_the_prompt_runs_past_says_so_in_its_own_pane_and_the_others_answer():
    """(One model of 16 positions among others refused every request that ran past its end, the app's defaults
    too, and no model answered.) Its pane says why; the request is refused only where no model can take it."""
    from hf_tinygpt.explore.app import Explorer

    short, alibi = text_model("learned", seed=1, n_positions=16), text_model("alibi", seed=1)
    alibi.set_attn_implementation("eager")  # as `load_models` loads them: attention weights to show
    explorer = Explorer([("short", short), ("alibi", alibi)])
    ids = torch.tensor([gpt2_tokenizer()(PROMPT)["input_ids"]])
    expected = alibi.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
    said = "the prompt's 9 tokens and 10 new ones run past the 16 positions short reaches: ask for fewer"
    assert list(explorer.generate(PROMPT, 10))[-1] == [f"({said})", gpt2_tokenizer().decode(expected[0, 9:])]
    long_prompt = " ".join(["the"] * 20)
    message, drawn = explorer.token_images(long_prompt)
    assert Path(message).name == "message.png" and Path(drawn).name == "token_vs_position.png"
    gallery, _ = explorer.scheme_galleries(long_prompt, 4, 16, 0)  # learned's rows do not read the prompt: drawn
    assert [Path(path).stem for path, _ in gallery] == list(short.config.position_scheme().pictures[:-1])
    refused, why, figure, table = explorer.attention(long_prompt, 0, 0)
    assert table["data"] and refused.axes[0].texts[0].get_text().startswith("the prompt's 20 tokens")
    assert why == {"headers": ["short"], "data": [[refused.axes[0].texts[0].get_text().replace("\n", " ")]]}  # wrapped
    with pytest.raises(ValueError, match=f"^{said}$"):
        list(Explorer([("short", short)]).generate(PROMPT, 10))
    shorter = text_model("learned", seed=2, n_positions=12)  # where no model takes it, each one's reach is said
    with pytest.raises(ValueError, match="^no model takes it: .* the 16 positions short reaches; .* the 12 positions"):
        list(Explorer([("short", short), ("shorter", shorter)]).generate(PROMPT, 10))


def test_each_model_reads_the_prompt_with_its_own_tokenizer(tmp_path):
    """A model folder that holds its own tokenizer is shown on its tokens (GPT-2's would give ids the explorer maps
    into its vocabulary: other tokens' rows, a garbled continuation), beside a model that reads GPT-2's."""
    from hf_tinygpt.explore.app import Explorer

    words = tmp_path / "words"
    model = tiny_model("rope", seed=5)
    tokenizer = word_tokenizer(["The", "the", "cat", "sat", "on", "mat", "by", "door"])
    model.save_pretrained(words)
    tokenizer.save_pretrained(words)
    text_model("learned", seed=1).save_pretrained(tmp_path / "gpt2-vocabulary")
    explorer = Explorer(load_models([str(words), str(tmp_path / "gpt2-vocabulary")]))
    _, own, _, gpt2 = explorer.attention(PROMPT, 1, 1)
    assert own["headers"] == [f"{i}: {word}" for i, word in enumerate(PROMPT.split())]
    assert gpt2["headers"][1] == "1:  cat"
    ids = torch.tensor([tokenizer(PROMPT)["input_ids"]])
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)
    *_, (text, _) = explorer.generate(PROMPT, 4)
    assert text == tokenizer.decode(expected[0, ids.shape[1] :])
    with pytest.raises(ValueError, match=r"^the long text has 3 tokens: paste at least one window \(8 tokens\)$"):
        explorer.past_training_length("the cat sat", 8)  # GPT-2 reads 3 tokens too: whose count is not said
    with pytest.raises(ValueError, match=r"has 6 tokens: paste at least one window \(8 tokens\) \(as words reads"):
        explorer.past_training_length("the cat sat on the doormat", 8)  # 7 of GPT-2's: the count is the word model's


def test_labels_are_unique_whatever_the_folders_are_called(tmp_path):
    """Two models labelled alike were drawn as one curve of the long-text plot, one series of its hover plot."""
    for folder in ("a/model", "b/model (2)", "c/model"):
        tiny_model("alibi").save_pretrained(tmp_path / folder)
    labels = [shown.label for shown in load_models([str(tmp_path / f) for f in ("a/model", "b/model (2)", "c/model")])]
    assert labels == ["model", "model (2)", "model (3)"]


def test_a_model_whose_ids_are_mapped_into_its_vocabulary_says_so(tmp_path):
    """A small vocabulary and no tokenizer: GPT-2's ids are mapped into it, so its continuation decoded with GPT-2's
    tokenizer was nonsense ('WWWWW') and its attention rows were labelled with tokens it never read."""
    from hf_tinygpt.explore.app import Explorer

    tiny_model("alibi").save_pretrained(tmp_path / "small")  # 211 tokens, no tokenizer
    explorer = Explorer(load_models([str(tmp_path / "small")]))
    *_, text = explorer.generate(PROMPT, 3)
    assert text == "(no tokenizer of its own: GPT-2's ids mapped into its 211-token vocabulary: it has no text to show)"
    figure, _ = explorer.attention(PROMPT, 0, 0)
    assert "these are not the tokens it read" in figure.axes[0].get_title()


def test_a_hub_models_training_length_is_read_from_its_card(hub, tmp_path, monkeypatch):
    """A model loaded by Hub id is marked where it was trained, as a local folder is: from the card in its repo."""
    from huggingface_hub import HfApi, constants

    from hf_tinygpt.explore.views import training_context

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    api = HfApi(endpoint=hub.url, token=HUB_TOKEN)
    for repo in ("me/carded", "me/plain"):
        api.create_repo(repo)
        api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id=repo)
    card = "---\ntinygpt:\n  training:\n    block_size: 48\n---\n# a model\n"
    api.upload_file(path_or_fileobj=card.encode(), path_in_repo="README.md", repo_id="me/carded")
    model = text_model("rope")
    for repo, trained_at in (("me/carded", 48), ("me/plain", None)):
        model.config.name_or_path = repo
        assert training_context(model, {"token": HUB_TOKEN}) == trained_at
    model.config.name_or_path = ""  # built here, untrained
    assert training_context(model) is None
    model.config.name_or_path = str(tmp_path / "gone")  # a folder moved since the model loaded: no Hub id either
    assert training_context(model) is None


def test_the_verb_refuses_a_long_text_it_cannot_read(tmp_path, capsys):
    from hf_tinygpt.cli.commands import main

    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    (tmp_path / "long.txt").write_text(("the " * 65_537).strip())
    for name, error in (
        ("missing.txt", f"--long-text {tmp_path / 'missing.txt'}: no such file"),
        ("latin1.txt", f"--long-text {tmp_path / 'latin1.txt'}: not UTF-8 text"),
        ("long.txt", "--long-text: the long text is 65,537 tokens long; the explorer scores at most 65,536"),
    ):
        assert main(["explore", "rope", "--long-text", str(tmp_path / name)]) == 2
        assert error in capsys.readouterr().err


@pytest.mark.slow
def test_the_verb_serves_the_app_on_loopback(tmp_path):
    """On loopback only, whatever Gradio's environment asks for: no share link is even tried."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    port = free_port()
    command = [sys.executable, "-m", "hf_tinygpt", "explore", "rope", "alibi", "--port", str(port)]
    env = os.environ | {"GRADIO_SHARE": "True", "GRADIO_SSR_MODE": "True", "GRADIO_MCP_SERVER": "True"}
    env["TMPDIR"] = str(tmp_path)  # where its private folder is made
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    assert page.status == 200 and "hf-tinygpt explore" in page.read().decode()
                    break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                time.sleep(0.5)
        else:
            raise AssertionError("the app did not answer on loopback")
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        assert len(client.predict(PROMPT, api_name="/token_position")) == 2
        assert any(tmp_path.glob("hf-tinygpt-explore-*"))
    finally:
        server.terminate()
        server.wait(timeout=30)
    printed = server.stdout.read()
    # Stopped by SIGTERM (`kill`), it exits as the shell reports it and removes the files it served (it left them).
    assert server.returncode == 128 + signal.SIGTERM and not any(tmp_path.glob("hf-tinygpt-explore-*")), printed
    assert f"Running on local URL:  http://127.0.0.1:{port}" in printed
    assert "untrained rope TinyGPT" in printed and "(2)" not in printed  # (two bare schemes had one name, and "(2)")
    assert not any(word in printed for word in ("share", "public URL", "public link", "SSR", "MCP")), printed


def test_the_pictures_are_plot_positions_own(tmp_path):
    from hf_tinygpt.explore.views import position_pictures
    from hf_tinygpt.plots.positions import plot_positions

    model = text_model("learned", seed=3)
    scheme = position_pictures(model, "m", tmp_path / "scheme", PROMPT)
    assert [path.name for path in scheme] == ["position_matrix.png", "dimension_traces.png", "cosine_similarity.png"]
    assert sorted(path.name for path in (tmp_path / "scheme").iterdir()) == sorted(path.name for path in scheme)
    token = position_pictures(model, "m", tmp_path / "token", PROMPT, token_vs_position=True)
    assert [path.name for path in token] == ["token_vs_position.png"] and token[0].read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match=r"`names` \['alibi_bias'\] are not pictures of learned positions"):
        plot_positions(model, tmp_path / "nothing", names=["alibi_bias"])
    assert not (tmp_path / "nothing").exists()


def test_the_attention_plots_titles_are_not_covered_and_fit_their_pane():
    """(Seen in Chromium, three models side by side: Gradio's label badge covered the start of each attention plot's
    title, and the line that says the ids were remapped ran past the pane's right edge.)"""
    import gradio as gr
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from hf_tinygpt.explore.app import Explorer
    from hf_tinygpt.explore.views import TITLE_CHARACTERS

    small = tiny_model("rope")  # a vocabulary smaller than GPT-2's: the prompt's ids are remapped into it
    small.set_attn_implementation("eager")  # as `load_models` loads them: attention weights to show
    figure, _ = Explorer([("small", small)]).attention(PROMPT, 0, 0)
    lines = figure.axes[0].get_title().split("\n")
    assert len(lines) > 2 and all(len(line) <= TITLE_CHARACTERS for line in lines)
    # A scheme name's label is long: its title, and the message of a layer it lacks, ran past both edges of the pane
    label = "untrained rope TinyGPT, random init seed 0 (n_embd 128, 256 positions, 4 heads)"
    deeper = tiny_model("rope", n_layer=3)
    deeper.set_attn_implementation("eager")
    explorer = Explorer([(label, small), ("deeper", deeper)])
    for figure in (explorer.attention(PROMPT, 0, 0)[0], explorer.attention(PROMPT, 2, 0)[0]):
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        [text] = [text for text in (figure.axes[0].title, *figure.axes[0].texts) if text.get_text()]
        extent = text.get_window_extent(canvas.get_renderer())
        assert 0 <= extent.x0 and extent.x1 <= figure.bbox.width, (text.get_text(), extent)
    plots = [block for block in build_app([("small", small)]).blocks.values() if isinstance(block, gr.Plot)]
    attention = [plot for plot in plots if plot.label == "small"]
    assert attention and not any(plot.show_label for plot in attention)
