"""Publishing: `hf-tinygpt push` stages exactly a loadable repo (the installed model code, weights loaded strictly,
nothing else of the folder) with its card, publishes only what it verified, and uploads it through huggingface_hub;
a bad input fails before any request, a bad connection ends with a clear error.

The Hub is tests/hub_server.py on loopback: real huggingface_hub and transformers talk HTTP to it (that look-alike's
own tests are in test_hub_server.py)."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import traceback
from pathlib import Path

import pytest
import torch
from conftest import (
    BLOCK_HF_TINYGPT,
    GPT2_VOCAB,
    HUB_TOKEN,
    OTHER_HUB_TOKEN,
    REMOTE_CODE_SCRIPT,
    hub_subprocess_env,
    last_line,
    random_gpt2,
    run_cli,
    save_with_tokenizer,
    text_model,
    tiny_model,
)
from huggingface_hub import ModelCard, hf_hub_download
from huggingface_hub.errors import RepositoryNotFoundError

import hf_tinygpt
from hf_tinygpt.cli.commands import main
from hf_tinygpt.folders.outputs import MANIFEST
from hf_tinygpt.folders.training_history import LOSS_CURVE, TRAINING_HISTORY, loss_curve_png, write_history
from hf_tinygpt.hub.publish import push_to_hub, stage_for_hub
from hf_tinygpt.model import BUNDLE
from hf_tinygpt.model.params import parameter_breakdown

REPO = "tester/tinygpt"


PROMPT = "Now is the winter of our discontent"


REPO_FILES = {
    *BUNDLE,
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "README.md",
}


def tinygpt_folder(tmp_path, scheme="rope"):
    """A saved tinygpt with tokenizer, plus the clutter a training folder has, which must not be published."""
    model = text_model(scheme)
    folder = save_with_tokenizer(model, tmp_path / "model")
    (folder / "optimizer.pt").write_bytes(b"not for the hub")
    (folder / "checkpoint-10").mkdir()
    (folder / "checkpoint-10" / "model.safetensors").write_bytes(b"old")
    return model, folder


def greedy_tokens(model, prompt=PROMPT, new=8):
    ids = hf_tinygpt.gpt2_tokenizer()(prompt, return_tensors="pt").input_ids
    return model.generate(ids, max_new_tokens=new, do_sample=False, pad_token_id=50256)[0].tolist()


def folder_bytes(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# ---- staging and the card --------------------------------------------------------------------------------------------


def test_dry_run_stages_exactly_the_repo_files_and_lists_them(tmp_path, capsys):
    model, folder = tinygpt_folder(tmp_path)
    assert main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "staged")]) == 0
    staged = tmp_path / "staged"
    assert {p.name for p in staged.iterdir()} == {*REPO_FILES, MANIFEST}  # no optimizer state, no old checkpoints
    assert (staged / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    auto_map = json.loads((staged / "config.json").read_text())["auto_map"]
    assert set(auto_map) == {"AutoConfig", "AutoModel", "AutoModelForCausalLM"}
    listing = capsys.readouterr().out
    size = (staged / "model.safetensors").stat().st_size
    assert re.search(rf"model\.safetensors\s+{size:,} bytes", listing)
    assert f"{len(REPO_FILES)} files" in listing

    # an existing staging folder is never replaced without --force
    assert main(["push", str(folder), REPO, "--dry-run", "--out", str(staged)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["push", str(folder), REPO, "--dry-run", "--out", str(staged), "--force"]) == 0

    # and it says where and how it would commit: every setting given (it named the repo alone)
    how = ["--branch", "dev", "--create-pr", "--private", "--commit-message", "first"]
    assert main(["push", str(folder), REPO, "--dry-run", "--out", str(staged), "--force", *how]) == 0
    said = f"uploaded to {REPO} (to the branch dev, as a pull request, private if the repo is made, with the message 'first')"
    assert said in capsys.readouterr().out


def test_the_cards_licence_and_base_model_are_the_ones_given_else_the_folders(tmp_path, capsys):
    """A tinygpt folder's card keeps its own licence and base model, and --license / --base-model replace them (they
    were left out for a tinygpt folder: a model published under a licence its author did not choose)."""
    _, folder = tinygpt_folder(tmp_path)
    staged = {}
    for name, given in [("kept", []), ("given", ["--license", "apache-2.0", "--base-model", "someone/base"])]:
        staged[name] = tmp_path / name
        assert main(["push", str(folder), REPO, "--dry-run", "--out", str(staged[name]), *given]) == 0
    assert ModelCard.load(staged["kept"] / "README.md").data.license == "mit"
    card = ModelCard.load(staged["given"] / "README.md").data
    assert (card.license, card.base_model) == ("apache-2.0", "someone/base")
    capsys.readouterr()
    tolerance = ["--dry-run", "--out", str(tmp_path / "tolerance"), "--tolerance", "0.05"]
    assert main(["push", str(folder), REPO, *tolerance]) == 2  # it bounds a conversion's check: none is made
    assert "--tolerance bounds the check of a GPT-2" in capsys.readouterr().err
    base = ["--dry-run", "--out", str(tmp_path / "base"), "--base-model", "../../etc"]  # the Hub would refuse the card
    assert main(["push", str(folder), REPO, *base]) == 2
    assert "--base-model must be a Hub id such as 'openai-community/gpt2'" in capsys.readouterr().err
    assert main(["push", str(folder), REPO, "--force"]) == 2  # no --dry-run: no --out to replace, nothing sent
    assert (
        "error: --force replaces an earlier --out: where --dry-run stages the files; without --dry-run"
        in capsys.readouterr().err
    )


def test_a_gpt2_sources_licence_is_kept_and_a_cards_local_base_model_refused(tmp_path, capsys):
    """(A GPT-2 fine-tune whose card says cc-by-nc-4.0 was published as mit; a card's base_model that is a local path
    was published as it was.)"""
    from hf_tinygpt import gpt2_tokenizer

    gpt2 = tmp_path / "gpt2"
    random_gpt2(**GPT2_VOCAB).save_pretrained(gpt2)
    gpt2_tokenizer().save_pretrained(gpt2)
    (gpt2 / "README.md").write_text("---\nlicense: cc-by-nc-4.0\n---\nA fine-tune.\n")
    assert main(["push", str(gpt2), REPO, "--dry-run", "--out", str(tmp_path / "staged")]) == 0
    assert ModelCard.load(tmp_path / "staged" / "README.md").data.license == "cc-by-nc-4.0"
    _, folder = tinygpt_folder(tmp_path)
    (folder / "README.md").write_text("---\nbase_model: /home/me/models/base\n---\nMine.\n")
    capsys.readouterr()
    assert main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "local")]) == 2
    said = "base_model '/home/me/models/base' is no Hub id, which the Hub refuses in a card: set --base-model"
    assert said in capsys.readouterr().err and not (tmp_path / "local").exists()
    assert (
        main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "given"), "--base-model", "me/base"]) == 0
    )


def test_a_local_path_in_tokenizer_config_is_refused_not_published(tmp_path, capsys):
    """transformers keeps a tokenizer_config.json's unknown keys and writes them again: `"data_dir": "/home/..."`
    was published with the model (config.json's were refused)."""
    _, folder = tinygpt_folder(tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "data_dir": "/home/me/corpus"}))
    assert main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "staged")]) == 2
    said = "tokenizer_config.json's data_dir holds a local path ('/home/me/corpus'), which would be published as it is"
    assert said in capsys.readouterr().err and not (tmp_path / "staged").exists()


def test_a_config_key_no_tinygpt_field_is_is_refused_not_published(tmp_path, capsys):
    """transformers keeps a config.json's unknown keys and writes them again: a `"wandb_run": "/home/..."` was
    published with the model, past the card's care for local paths."""
    _, folder = tinygpt_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "wandb_run": "/home/me/runs/7"}))
    assert main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "staged")]) == 2
    assert "config.json: wandb_run: no field of a TinyGPT's config" in capsys.readouterr().err
    assert not (tmp_path / "staged").exists()


def test_push_stages_the_installed_code_and_nothing_else(tmp_path):
    import hf_tinygpt
    from hf_tinygpt.hub.publish import stage_for_hub

    folder = tmp_path / "model"
    tiny_model(vocab_size=50257).save_pretrained(folder)  # the bundled GPT-2 tokenizer's ids fit
    (folder / "my_private_notes.py").write_text("HF_TOKEN = 'hf_secret'")
    (folder / "modeling_tinygpt.py").write_text("# an old or edited copy of the model code\n")
    files = stage_for_hub(str(folder), tmp_path / "staged", "me/tiny", tokenizer="gpt2")
    assert "my_private_notes.py" not in files
    package = Path(hf_tinygpt.__file__).parent / "model"
    code_files = sorted(name for name in files if name.endswith(".py"))
    assert code_files == sorted(BUNDLE)
    for name in code_files:
        assert (tmp_path / "staged" / name).read_bytes() == (package / name).read_bytes()
    config = json.loads((tmp_path / "staged" / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_tinygpt.TinyGPTForCausalLM"


def test_card_metadata_and_architecture_table(tmp_path):
    model, folder = tinygpt_folder(tmp_path, scheme="alibi")
    stage_for_hub(str(folder), tmp_path / "staged", REPO)
    card = ModelCard.load(tmp_path / "staged" / "README.md")
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-generation"
    assert card.data.license == "mit"
    assert {"tinygpt", "alibi-positions"} <= set(card.data.tags)
    exact = parameter_breakdown(model.config)["total"]
    assert exact == model.num_parameters()
    assert f"| parameters | {exact:,} " in card.text
    assert f"| layers | {model.config.n_layer} |" in card.text and "| position scheme | `alibi` |" in card.text
    assert f'model="{REPO}"' in card.text  # the usage snippet names the repo it is published as
    assert "was not recorded" in card.text  # a bare save_pretrained folder: the card does not invent a history


def test_gpt2_source_is_converted_verified_and_carded_with_its_base_model(tmp_path):
    gpt2 = random_gpt2(vocab_size=50257, eos_token_id=50256, bos_token_id=50256)
    gpt2.save_pretrained(tmp_path / "gpt2")
    files = stage_for_hub(
        str(tmp_path / "gpt2"), tmp_path / "staged", REPO, tokenizer="gpt2", base_model="openai-community/gpt2"
    )
    assert set(files) == REPO_FILES
    card = ModelCard.load(tmp_path / "staged" / "README.md")
    assert card.data.base_model == "openai-community/gpt2"
    assert card.data.tinygpt["made_by"] == "conversion"
    assert card.data.tinygpt["max_abs_logit_delta"] <= 1e-5
    assert "max |Δlogits| =" in card.text and f'model="{REPO}"' in card.text


@pytest.mark.slow
def test_staged_folder_loads_where_hf_tinygpt_is_not_installed(tmp_path):
    model, folder = tinygpt_folder(tmp_path, scheme="rope")
    stage_for_hub(str(folder), tmp_path / "staged", REPO)
    run = subprocess.run(
        [sys.executable, "-c", REMOTE_CODE_SCRIPT, PROMPT, str(tmp_path / "staged")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["class"].startswith("transformers_modules.")
    assert result["tokens"] == greedy_tokens(model)


# ---- uploading -------------------------------------------------------------------------------------------------------


FROM_THE_HUB = BLOCK_HF_TINYGPT + textwrap.dedent(
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    repo, prompt, snippet = sys.argv[1], sys.argv[2], sys.argv[3]
    exec(snippet)  # the usage snippet from the model card, exactly as written there
    model = AutoModelForCausalLM.from_pretrained(repo, trust_remote_code=True)
    ids = AutoTokenizer.from_pretrained(repo, trust_remote_code=True)(prompt, return_tensors="pt").input_ids
    tokens = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=50256)[0].tolist()
    print(json.dumps({"class": type(model).__module__, "tokens": tokens}))
    """
)


def card_snippet(card_text: str) -> str:
    return re.search(r"```python\n(.*?)```", card_text, re.S).group(1)


@pytest.mark.slow
@pytest.mark.usefixtures("online")
def test_push_uploads_the_staged_folder_byte_for_byte_and_it_loads_over_http(hub, tmp_path):
    model, folder = tinygpt_folder(tmp_path, scheme="learned")
    stage_for_hub(str(folder), tmp_path / "staged", REPO)
    info = push_to_hub(str(folder), REPO, endpoint=hub.url, token=HUB_TOKEN, commit_message="first model")

    staged = folder_bytes(tmp_path / "staged")
    assert hub.repo_files(REPO) == {name: data for name, data in staged.items() if name != MANIFEST}  # ours stays
    assert info.oid == hub.refs(REPO)["main"]
    writes = [path.split("?")[0] for method, path in hub.requests if method == "POST"]
    assert writes == [
        "/api/repos/create",
        "/api/validate-yaml",  # the card's metadata is checked first
        f"/api/models/{REPO}/preupload/main",
        f"/api/models/{REPO}/commit/main",
    ]  # one commit

    card = (tmp_path / "staged" / "README.md").read_text()
    run = subprocess.run(
        [sys.executable, "-c", FROM_THE_HUB, REPO, PROMPT, card_snippet(card)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=hub_subprocess_env(hub, tmp_path),
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["class"].startswith("transformers_modules.")  # the repo's own code, over HTTP
    assert result["tokens"] == greedy_tokens(model)
    assert "To be, or not to be" in run.stdout  # the snippet ran and printed its generation


@pytest.mark.usefixtures("online")
def test_private_repo_on_a_branch(hub, tmp_path):
    _, folder = tinygpt_folder(tmp_path)
    push_to_hub(str(folder), REPO, private=True, revision="dev", endpoint=hub.url, token=HUB_TOKEN)
    assert set(hub.refs(REPO)) == {"main", "dev"}
    assert set(hub.repo_files(REPO, revision="dev")) == REPO_FILES
    assert hub.repo_files(REPO, revision="main") == {}  # the branch was committed to, not main
    hf_hub_download(REPO, "config.json", revision="dev", endpoint=hub.url, token=HUB_TOKEN, cache_dir=tmp_path / "c")
    with pytest.raises(RepositoryNotFoundError):  # private: someone else's token sees nothing
        hf_hub_download(
            REPO, "config.json", revision="dev", endpoint=hub.url, token=OTHER_HUB_TOKEN, cache_dir=tmp_path / "c2"
        )


def test_a_push_that_changes_nothing_says_so(hub, tmp_path, capsys, monkeypatch):
    """huggingface_hub skips a commit of files the repo already holds, and so opens no pull request: the push says
    that instead of printing the repo's old commit as if it were the new one."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    _, folder = tinygpt_folder(tmp_path)
    push_to_hub(str(folder), REPO, endpoint=hub.url, token=HUB_TOKEN)
    refs = hub.refs(REPO)
    for how, said in (["--create-pr"], "no pull request opened"), ([], "no commit made"):
        assert main(["push", str(folder), REPO, "--token", HUB_TOKEN, *how]) == 0
        out = capsys.readouterr().out
        assert f"nothing changed: {REPO} already holds these files; {said}" in out, out
        assert "pull request:" not in out and "\ncommit:" not in out
    assert hub.refs(REPO) == refs


@pytest.mark.slow
def test_a_dry_run_reads_a_private_hub_src_with_the_token_it_is_given(hub, tmp_path):
    _, folder = tinygpt_folder(tmp_path)
    push_to_hub(str(folder), REPO, private=True, endpoint=hub.url, token=HUB_TOKEN)
    run = subprocess.run(
        [sys.executable, "-m", "hf_tinygpt", "push", REPO, "tester/copy", "--dry-run", "--out", "staged"]
        + ["--token", HUB_TOKEN],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=hub_subprocess_env(hub, tmp_path),  # no token but the one given
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert REPO_FILES <= {path.name for path in (tmp_path / "staged").iterdir()}
    assert HUB_TOKEN not in run.stdout + run.stderr


@pytest.mark.slow
def test_cli_push_opens_a_pull_request_and_never_reveals_the_token(hub, tmp_path):
    secret = HUB_TOKEN
    _, folder = tinygpt_folder(tmp_path)
    push_to_hub(str(folder), REPO, endpoint=hub.url, token=secret)  # main exists; the PR proposes new weights
    text_model("rope", seed=1).save_pretrained(folder)
    (folder / "generation_config.json").unlink()  # made afresh while staging: the PR still has one
    run = subprocess.run(
        [sys.executable, "-m", "hf_tinygpt.cli", "push", str(folder), REPO, "--create-pr", "--commit-message", "v2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=hub_subprocess_env(hub, tmp_path, HF_TOKEN=secret),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "pull request:" in run.stdout
    proposed = hub.repo_files(REPO, revision="refs/pr/1")
    assert set(proposed) == REPO_FILES
    assert proposed["model.safetensors"] == (folder / "model.safetensors").read_bytes()
    assert proposed["model.safetensors"] != hub.repo_files(REPO)["model.safetensors"]  # main untouched
    assert set(hub.tokens_seen) == {secret}  # huggingface_hub found the token by itself and sent it
    assert secret not in run.stdout + run.stderr
    for path in tmp_path.rglob("*"):  # not in the model folder, the HF cache, or anything else written
        if path.is_file() and "hub" not in path.relative_to(tmp_path).parts[:1]:
            assert secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    "case, message",
    [
        ("bad-repo-id", "invalid repo id"),
        ("no-owner", "expected owner/name"),
        ("missing-src", "no such file or folder"),
        ("not-a-model", "no config.json"),
        ("no-weights", "missing: model.safetensors"),
        ("no-tokenizer", "tokenizer files"),
        ("wrong-shape", "Wrong shape"),
    ],
)
def test_bad_inputs_fail_clearly_before_any_request(hub, tmp_path, capsys, case, message):
    _, folder = tinygpt_folder(tmp_path)
    src, repo = str(folder), REPO
    if case == "bad-repo-id":
        repo = "tester/not a name!"
    elif case == "no-owner":
        repo = "tinygpt"
    elif case == "missing-src":
        src = str(tmp_path / "nowhere")
    elif case == "not-a-model":
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "notes.txt").write_text("hello")
        src = str(tmp_path / "notes")
    elif case == "no-weights":
        (folder / "model.safetensors").unlink()
    elif case == "no-tokenizer":
        (folder / "tokenizer.json").unlink()
    elif case == "wrong-shape":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "n_embd": 32, "n_head": 2}))
    argv = ["push", src, repo, "--token", HUB_TOKEN]
    with torch.no_grad():
        assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert hub.requests == []  # nothing reached the server


class BrokenServer:
    """A loopback TCP server that accepts connections and then never answers (`hang`), hangs up (`drop`), or answers
    with something that is not HTTP, quoting the request's Authorization header back in it (`garble`)."""

    def __init__(self, mode: str):
        self.mode, self.connections = mode, 0
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.held = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections += 1
            if self.mode == "drop":
                connection.recv(65536)
                connection.close()
            elif self.mode == "garble":
                lines = connection.recv(65536).split(b"\r\n")
                quoted = [line.replace(b":", b"", 1) for line in lines if line.lower().startswith(b"authorization")]
                connection.sendall(b"HTTP/1.1 401 Unauthorized\r\n" + b"\r\n".join(quoted) + b"\r\n\r\n")
                connection.close()
            else:
                self.held.append(connection)

    def close(self):
        self.socket.close()
        for connection in self.held:
            connection.close()


@pytest.mark.parametrize("mode", ["hang", "drop", "garble"])
def test_a_hung_or_dropped_connection_ends_the_push_with_a_clear_error(mode, tmp_path, online):
    from hf_tinygpt.hub.publish import push_to_hub

    folder = tmp_path / "model"
    tiny_model(vocab_size=50257).save_pretrained(folder)
    server = BrokenServer(mode)
    outcome = {}

    def push():
        try:
            push_to_hub(str(folder), "me/tiny", token="hf_test", endpoint=server.url, tokenizer="gpt2", timeout=0.5)
        except Exception as error:
            outcome["error"] = error

    thread = threading.Thread(target=push, daemon=True)
    thread.start()
    thread.join(timeout=300)  # a guard against hanging forever, not a measure of speed
    server.close()
    assert not thread.is_alive(), "push never gave up"
    error = outcome["error"]
    assert isinstance(error, ConnectionError) and f"pushing to {server.url} failed" in str(error)
    assert "hf_test" not in str(error)  # what httpx quotes of a garbled answer is the server's text too
    assert server.connections >= 1


# ---- only what was verified is published -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["added_tokens.json", "special_tokens_map.json", "generation_config.json"])
@pytest.mark.parametrize("target", ["/proc/self/environ", "secret.json"])
def test_push_refuses_a_linked_file_and_stages_nothing_it_points_at(name, target, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_pushers_secret")
    _, folder = tinygpt_folder(tmp_path)
    (tmp_path / "secret.json").write_text(json.dumps({"HF_TOKEN": "hf_pushers_secret"}))
    (folder / name).unlink(missing_ok=True)
    (folder / name).symlink_to(target if target.startswith("/") else tmp_path / target)
    code = main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "staged")])
    assert code == 2 and f"{name} (a symbolic link to" in capsys.readouterr().err
    assert not (tmp_path / "staged").exists()


def test_push_refuses_a_second_weights_layout_beside_the_first(tmp_path, capsys):
    _, folder = tinygpt_folder(tmp_path)
    stale = text_model("rope", seed=1)
    stale.save_pretrained(tmp_path / "stale", max_shard_size="100KB")  # an index and its shards
    for shard in (tmp_path / "stale").glob("model*.safetensors*"):
        shard.rename(folder / shard.name)
    code = main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "staged")])
    err = capsys.readouterr().err
    assert code == 2 and "holds model.safetensors and model.safetensors.index.json: two sets of weights" in err


def test_push_never_copies_a_file_an_index_names_outside_the_folder(tiny_folder, tmp_path, capsys):
    (tmp_path / "victim.txt").write_text("someone's file")
    (tiny_folder / "model.safetensors").unlink()
    (tiny_folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "../victim.txt"}}))
    code, err = run_cli(
        capsys, "push", tiny_folder, "me/tiny", "--dry-run", "--out", tmp_path / "staged", "--tokenizer", "gpt2"
    )
    assert code == 2 and "shard names must be files in the folder itself" in err
    assert not (tmp_path / "staged").exists() and (tmp_path / "victim.txt").read_text() == "someone's file"


def test_every_staged_file_is_written_by_the_library_that_read_it(tmp_path):
    """The staged folder is a reload of what was verified: weights, tokenizer and generation config as loaded (a
    padded, reordered or annotated copy of the user's files is not what goes up)."""
    model, folder = tinygpt_folder(tmp_path)
    generation = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**generation, "max_new_tokens": 17}, indent=7))
    staged = tmp_path / "staged"
    stage_for_hub(str(folder), staged, REPO)
    assert json.loads((staged / "generation_config.json").read_text())["max_new_tokens"] == 17
    assert "       " not in (staged / "generation_config.json").read_text()  # written anew, not copied
    reloaded = hf_tinygpt.TinyGPTForCausalLM.from_pretrained(staged)
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values(), strict=True)
    )


def test_a_trained_models_loss_curve_is_drawn_again_from_its_checked_history(tmp_path, capsys):
    """A training history goes up as numbers checked on the way, with its curve drawn anew from them: the image in
    the folder is never what is published (here it was swapped for another), and the card shows the curve."""
    _, folder = tinygpt_folder(tmp_path)
    history = [{"step": 1, "train_loss": 10.8}, {"step": 2, "train_loss": 9.5, "validation_perplexity": 9000.0}]
    write_history(folder, history)
    (folder / LOSS_CURVE).write_bytes(b"\x89PNG\r\n\x1a\n any picture at all")
    staged = tmp_path / "staged"
    files = stage_for_hub(str(folder), staged, REPO)
    assert set(files) == REPO_FILES | {TRAINING_HISTORY, LOSS_CURVE}
    assert json.loads((staged / TRAINING_HISTORY).read_text()) == history
    assert (staged / LOSS_CURVE).read_bytes() == loss_curve_png(history)
    assert "![training and validation loss](loss.png)" in (staged / "README.md").read_text()

    (folder / TRAINING_HISTORY).write_text(json.dumps([*history, {"step": 2, "train_loss": 9.0}]))
    code = main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "again")])
    assert code == 2 and "training_history.json: row 2: step must be an integer above" in capsys.readouterr().err


def test_push_refuses_a_generation_config_that_does_not_read(tmp_path, capsys):
    _, folder = tinygpt_folder(tmp_path)
    (folder / "generation_config.json").write_text('{"max_new_tokens": "many"')
    code = main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "staged")])
    assert code == 2 and "generation_config.json" in capsys.readouterr().err


def test_a_trained_model_whose_weights_changed_since_is_not_published_with_its_old_card(tmp_path, capsys):
    """Weights saved over a trained model (fine-tuned elsewhere, or re-initialised): its card's perplexity and loss
    history are of the weights the run wrote, and were published beside the new ones."""
    (tmp_path / "plays.txt").write_text("\n".join(f"Line {i}: to be, or not to be." for i in range(80)))
    run, shape = tmp_path / "run", ["--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "16"]
    assert main(["train", "--train", str(tmp_path / "plays.txt"), "--out", str(run), *shape, "--steps", "1"]) == 0
    model = hf_tinygpt.TinyGPTForCausalLM.from_pretrained(run / "model")
    torch.nn.init.normal_(model.transformer.wte.weight)
    model.save_pretrained(run / "model")
    capsys.readouterr()
    assert main(["push", str(run / "model"), REPO, "--dry-run", "--out", str(tmp_path / "staged")]) == 2
    said = capsys.readouterr().err
    assert "model.safetensors (changed since hf-tinygpt wrote it): its card (README.md) and training history" in said
    (run / "model" / "README.md").unlink()
    (run / "model" / "training_history.json").unlink()
    assert main(["push", str(run / "model"), REPO, "--dry-run", "--out", str(tmp_path / "staged")]) == 0
    assert "was not recorded" in (tmp_path / "staged" / "README.md").read_text()


def test_a_trained_models_card_is_published_without_local_paths_unless_asked(tmp_path, capsys):
    data = tmp_path / "private" / "corpus"
    data.mkdir(parents=True)
    (data / "plays.txt").write_text("\n".join(f"Line {i}: to be, or not to be." for i in range(80)))
    run = tmp_path / "private" / "run"
    assert (
        main(
            [
                "train",
                "--train",
                str(data),
                "--out",
                str(run),
                "--n-layer",
                "1",
                "--n-embd",
                "16",
                "--n-head",
                "2",
                "--block-size",
                "16",
                "--batch-size",
                "2",
                "--steps",
                "1",
                "--warmup-steps",
                "0",
            ]
        )
        == 0
    )
    assert str(tmp_path) in (run / "model" / "README.md").read_text()  # the local card says where, in full
    assert main(["push", str(run / "model"), REPO, "--dry-run", "--out", str(tmp_path / "staged")]) == 0
    card = (tmp_path / "staged" / "README.md").read_text()
    assert str(tmp_path) not in card and "--train corpus" in card and "--out run" in card
    kept = tmp_path / "kept"
    assert main(["push", str(run / "model"), REPO, "--dry-run", "--out", str(kept), "--keep-local-paths"]) == 0
    assert f"--train {data}" in (kept / "README.md").read_text()
    capsys.readouterr()


def dry_run_of_the_hub_repo(hub, tmp_path):
    """`hf-tinygpt push REPO tester/copy --dry-run --out staged`, in a fresh process logged in to the loopback Hub."""
    return subprocess.run(
        [sys.executable, "-m", "hf_tinygpt.cli", "push", REPO, "tester/copy", "--dry-run", "--out", "staged"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=hub_subprocess_env(hub, tmp_path, HF_TOKEN=HUB_TOKEN),
    )


@pytest.mark.slow
def test_a_hub_repo_stages_from_the_cache_whose_files_link_to_its_blobs(hub, tmp_path):
    """A Hub SRC is downloaded into the HF cache, where every file of a snapshot is a link into the repo's blobs:
    those links are the download itself, and are read; a link anywhere else still is not."""
    model, folder = tinygpt_folder(tmp_path)
    push_to_hub(str(folder), REPO, endpoint=hub.url, token=HUB_TOKEN)
    run = dry_run_of_the_hub_repo(hub, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    snapshot = next((tmp_path / "hf_cache").glob("models--*/snapshots/*"))
    assert (snapshot / "config.json").is_symlink()
    reloaded = hf_tinygpt.TinyGPTForCausalLM.from_pretrained(tmp_path / "staged")
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values(), strict=True)
    )


@pytest.mark.parametrize(
    "header, message",
    [
        ("tinygpt: [unclosed", "cannot read the model card's metadata"),
        ("tinygpt: just a string", "tinygpt: must be a mapping"),
        (
            "tinygpt:\n  made_by: training\n  training:\n    validation_perplexity: low",
            "tinygpt.training.validation_perplexity must be a number",
        ),
        (  # the template formats each field a run records: one left out was jinja's TypeError
            "tinygpt:\n  made_by: training\n  training:\n    steps: 3",
            "tinygpt.training has no train_description, train_tokens, tokens_per_step, hardware, wall_time, command",
        ),
        (
            "tinygpt:\n  training: {train_description: a, train_tokens: 1, steps: 1, tokens_per_step: 1, hardware: x,"
            " wall_time: y, command: z, validation_perplexity: 3.0}",
            "tinygpt.training has no validation_description, validation_tokens, block_size",
        ),
    ],
)
def test_push_names_a_card_it_cannot_render_again(header, message, tmp_path, capsys):
    _, folder = tinygpt_folder(tmp_path)
    (folder / "README.md").write_text(f"---\n{header}\n---\n# my model\n")
    code = main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "staged")])
    err = capsys.readouterr().err
    assert code == 2 and f"{folder / 'README.md'}" in err and message in err, err


def test_a_published_card_names_no_folder_even_with_spaces_commas_or_quotes(tmp_path, capsys):
    data = tmp_path / "home" / "Alice Smith" / "proj(secret), v2" / "it's"
    data.mkdir(parents=True)
    (data / "plays.txt").write_text("\n".join(f"Line {i}: to be, or not to be." for i in range(80)))
    run = tmp_path / "run"
    shape = ["--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "16", "--batch-size", "2"]
    assert main(["train", "--train", str(data / "plays.txt"), "--out", str(run), *shape, "--steps", "1"]) == 0
    assert main(["push", str(run / "model"), REPO, "--dry-run", "--out", str(tmp_path / "staged")]) == 0
    card = (tmp_path / "staged" / "README.md").read_text()
    assert "Alice" not in card and "secret" not in card and "plays.txt" in card
    assert "Trained on 1 text file (plays.txt):" in card  # a file: no glob, which only picks a folder's files
    assert "The command, each path in it cut to its file name:" in card and "exact command" not in card
    assert "The exact command:" in (run / "model" / "README.md").read_text()  # the run's own card: as it ran
    capsys.readouterr()


def test_a_published_command_keeps_the_hub_ids_the_run_read_and_what_is_no_path():
    """The Hub ids a run read (its card records them) stay whole: cut to `name`, `owner/name` named another repo
    (`--init-from me/tiny` became `tiny`), also where a flag is abbreviated; a revision or a glob is no path; every
    path is cut to its last part, one that looks like owner/name too."""
    from hf_tinygpt.folders.model_card import command_without_folders, without_folders

    described = "the train split of owner/corpus (column `text`), held out: /home/a/held.txt"
    assert without_folders(described, keep=["owner/corpus"]) == described.replace("/home/a/", "")
    command = (
        "hf-tinygpt train --dataset=owner/corpus --init me/tiny --tokenizer tok/bpe --config /home/a/shape.json "
        "--revision refs/pr/3 --glob 'sub/*.txt' --out /home/a/run"
    )
    assert command_without_folders(command, keep=["owner/corpus", "me/tiny"]) == (
        "hf-tinygpt train --dataset=owner/corpus --init me/tiny --tokenizer bpe --config shape.json "
        "--revision refs/pr/3 --glob 'sub/*.txt' --out run"
    )


def test_push_names_an_index_whose_shard_names_are_not_text(tmp_path, capsys):
    _, folder = tinygpt_folder(tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": ["a.safetensors"]}}))
    code = main(["push", str(folder), REPO, "--dry-run", "--out", str(tmp_path / "staged")])
    assert code == 2 and "no weight_map (tensor name → shard file name)" in capsys.readouterr().err


@pytest.mark.slow
def test_the_push_script_publishes_the_shipped_model_as_its_dry_run_staged_it(hub, tmp_path):
    """scripts/push_to_hub.py in a fresh interpreter, logged in through HF_TOKEN as the README says: the repo then
    holds exactly the files a dry run stages, the shipped model's card among them."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "push_to_hub.py"
    env = hub_subprocess_env(hub, tmp_path, HF_TOKEN=HUB_TOKEN)

    def push(*args):
        command = [sys.executable, str(script), str(hf_tinygpt.DEFAULT_MODEL_DIR), REPO, *args]
        return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env)

    dry = push("--dry-run", "--out", str(tmp_path / "staged"))
    assert dry.returncode == 0 and f"what would be uploaded to {REPO}" in dry.stdout, dry.stderr[-3000:]
    assert [method for method, _ in hub.requests if method != "GET"] == []  # a dry run writes nothing
    real = push()
    assert real.returncode == 0 and "commit:" in real.stdout, real.stderr[-3000:]
    staged = folder_bytes(tmp_path / "staged")
    assert hub.repo_files(REPO) == {name: data for name, data in staged.items() if name != MANIFEST}
    card = ModelCard(hub.repo_files(REPO)["README.md"].decode())
    assert card.data.tinygpt["training"]["validation_perplexity"] > 0 and "## Data and licences" in card.text
    assert HUB_TOKEN not in real.stdout + real.stderr


# ---- what a Hub answers is data; Ctrl-C says what is true ------------------------------------------------------------

# Shaped like a real Hub token, but not the one the push sent: a careless Hub may quote any token it knows.
SOMEONE_ELSES = "hf_" + "Q7" * 17
# An error answer that quotes the request's own token back ("{token}", see HubServer.failures) in its message, its
# body (with a terminal escape and several lines of text) and the headers huggingface_hub copies into its errors.
QUOTING = "Invalid token {token}\nsent as `Authorization: Bearer {token}`; also saw " + SOMEONE_ELSES + "\n\x1b[2J"
QUOTING_HEADERS = {"X-Request-Id": "req-{token}", "X-Amzn-Trace-Id": "Bearer {token}"}


def cli_against(hub, monkeypatch):
    """`hf-tinygpt` in this process, pushing to the loopback Hub (push has no --endpoint flag: HfApi reads this), with
    transformers' progress bars off so that stderr holds only what the command itself says."""
    from huggingface_hub import constants
    from transformers.utils import logging

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(logging, "_tqdm_active", False)


@pytest.mark.parametrize(
    "route, status, given",
    [
        ("create", 401, "--token"),
        ("create", 500, "HF_TOKEN"),
        ("preupload", 403, "--token"),
        ("commit", 404, "HF_TOKEN"),
        ("commit", 401, "--token"),
    ],
)
def test_a_hub_error_ends_the_push_in_one_line_that_never_shows_the_token(
    route, status, given, hub, tmp_path, capsys, monkeypatch
):
    cli_against(hub, monkeypatch)
    _, folder = tinygpt_folder(tmp_path)
    headers = QUOTING_HEADERS | ({"X-Error-Code": "RepoNotFound"} if status == 404 else {})
    hub.failures[route] = (status, QUOTING, headers)
    if given == "HF_TOKEN":
        monkeypatch.setenv("HF_TOKEN", HUB_TOKEN)
    token = ["--token", HUB_TOKEN] if given == "--token" else []
    code = main(["push", str(folder), REPO, *token])
    printed = capsys.readouterr()
    assert hub.tokens_seen and set(hub.tokens_seen) == {HUB_TOKEN}  # the server did get it, and quoted it back
    assert code == 2 and len(printed.err.strip().splitlines()) == 1, printed.err
    path = {"create": "/api/repos/create", "preupload": f"/api/models/{REPO}/preupload/main"}
    endpoint = f"POST {path.get(route, f'/api/models/{REPO}/commit/main')}"
    assert f"HTTP {status}" in printed.err and endpoint in printed.err and "Invalid token" in printed.err
    for secret in (HUB_TOKEN, SOMEONE_ELSES, "\x1b"):
        assert secret not in printed.out + printed.err
    if route != "create":
        assert hub.repo_files(REPO) == {}  # nothing was published


def test_the_python_api_raises_the_same_one_line_error_without_the_token(hub, tmp_path):
    from huggingface_hub.errors import HfHubHTTPError

    _, folder = tinygpt_folder(tmp_path)
    hub.failures["commit"] = (403, QUOTING, QUOTING_HEADERS)
    with pytest.raises(OSError) as raised:
        push_to_hub(str(folder), REPO, endpoint=hub.url, token=HUB_TOKEN)
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and f"HTTP 403 on POST /api/models/{REPO}/commit/main" in message
    assert HUB_TOKEN not in message + repr(raised.value.args) and SOMEONE_ELSES not in message
    assert isinstance(raised.value.__cause__, HfHubHTTPError)  # the whole answer, for a caller who wants it


@pytest.mark.slow
def test_a_hub_src_that_answers_an_error_is_named_in_one_line_without_the_token(hub, tmp_path):
    _, folder = tinygpt_folder(tmp_path)
    push_to_hub(str(folder), REPO, endpoint=hub.url, token=HUB_TOKEN)
    hub.failures["resolve:config.json"] = (403, QUOTING, QUOTING_HEADERS)
    run = dry_run_of_the_hub_repo(hub, tmp_path)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert re.search(rf"HTTP 403 on (HEAD|GET) /{REPO}/resolve/\w+/config.json: Invalid token", run.stderr)
    assert HUB_TOKEN not in run.stdout + run.stderr and SOMEONE_ELSES not in run.stderr


@pytest.fixture
def interrupt_main_thread():
    """A hook for the Hub look-alike: Ctrl-C, as the terminal sends it (SIGINT to the main thread, which is waiting
    on the Hub's answer), answered only once the main thread has raised the KeyboardInterrupt, so the interrupt
    lands while the request is in flight however busy the machine is. `landed` holds where it was raised."""
    raised, landed = threading.Event(), []

    def ctrl_c(number, frame):
        landed.append("".join(traceback.format_stack(frame)))
        raised.set()
        raise KeyboardInterrupt

    def hook():
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        assert raised.wait(30), "the main thread never ran its SIGINT handler"

    previous = signal.signal(signal.SIGINT, ctrl_c)
    hook.landed = landed
    yield hook
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("moment", ["staging", "preupload", "commit"])
def test_ctrl_c_during_a_push_says_whether_the_commit_may_land(
    moment, hub, tmp_path, capsys, monkeypatch, interrupt_main_thread
):
    cli_against(hub, monkeypatch)
    _, folder = tinygpt_folder(tmp_path)
    if moment == "staging":
        monkeypatch.setattr("hf_tinygpt.hub.publish.stage_tinygpt_folder", interrupt)
    else:
        hub.after[moment] = interrupt_main_thread
    code = main(["push", str(folder), REPO, "--token", HUB_TOKEN])
    said = [line for line in capsys.readouterr().err.splitlines() if "interrupted" in line]
    assert code == 130 and len(said) == 1 and REPO in said[0], (said, getattr(interrupt_main_thread, "landed", None))
    if moment == "commit":  # it was received whole: the repo holds every file, and the message must not deny it
        assert set(hub.repo_files(REPO)) == REPO_FILES
        assert "may" in said[0] and f"{hub.url}/{REPO}" in said[0] and "before pushing again" in said[0]
        assert "nothing was" not in said[0]
    else:
        assert "nothing was published" in said[0] or "no file was published" in said[0]
        assert not [path for method, path in hub.requests if "/commit/" in path]
    if moment == "staging":
        assert hub.requests == []


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_the_python_api_says_the_same_when_interrupted_after_the_commit_was_sent(hub, tmp_path, interrupt_main_thread):
    _, folder = tinygpt_folder(tmp_path)
    hub.after["commit"] = interrupt_main_thread
    with pytest.raises(KeyboardInterrupt) as raised:
        push_to_hub(str(folder), REPO, endpoint=hub.url, token=HUB_TOKEN)
    assert REPO in str(raised.value) and "may" in str(raised.value)
    assert set(hub.repo_files(REPO)) == REPO_FILES


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("generation_config.json", {"temperature": -5, "do_sample": True}, "temperature must be a finite number >= 0"),
        ("generation_config.json", {"max_length": "x"}, "max_length must be an integer >= 1, got 'x'"),
        ("tokenizer_config.json", {"model_max_length": "huge"}, "model_max_length is 'huge', not a number of tokens"),
    ],
)
def test_push_refuses_settings_that_generate_would_crash_on_or_misread(file, content, message, tmp_path, capsys):
    """transformers reads these as given (its `validate` accepts them): staged, the folder then failed in generate."""
    folder = save_with_tokenizer(text_model(), tmp_path / "model")
    settings = json.loads((folder / file).read_text()) if (folder / file).exists() else {}
    (folder / file).write_text(json.dumps({**settings, **content}))
    code, err = run_cli(capsys, "push", folder, "me/model", "--dry-run", "--out", tmp_path / "staged")
    assert code == 2 and message in last_line(err), err
    assert not (tmp_path / "staged").exists()


@pytest.mark.parametrize(
    "content, message",
    [  # told as the user's own --max-new-tokens (which was 2); the second was dropped unsaid
        ('{"max_new_tokens": -3}', f"{REPO}: generation_config.json: max_new_tokens must be an integer >= 1, got -3"),
        ("nope", f"{REPO}: generation_config.json is not valid JSON"),
    ],
)
@pytest.mark.slow
def test_a_hub_repos_generation_config_is_named_as_a_folders_is(content, message, hub, tmp_path):
    from huggingface_hub import HfApi

    folder = save_with_tokenizer(text_model(), tmp_path / "model")
    (folder / "generation_config.json").write_text(content)
    api = HfApi(endpoint=hub.url, token=HUB_TOKEN)
    api.create_repo(REPO)
    api.upload_folder(repo_id=REPO, folder_path=folder)
    run = subprocess.run(
        [sys.executable, "-m", "hf_tinygpt", "generate", "hi", "--model", REPO, "--max-new-tokens", "2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=hub_subprocess_env(hub, tmp_path, HF_TOKEN=HUB_TOKEN),
    )
    assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]


def test_push_adds_each_model_to_one_collection_of_the_owner_made_once(hub, tmp_path, capsys, monkeypatch):
    """`push --collection TITLE` (the length study's zoo): the first push makes the owner's collection, later ones add
    to it, a model pushed again stays listed once; huggingface_hub's own get_collection reads it back."""
    from huggingface_hub import HfApi

    cli_against(hub, monkeypatch)
    for i, scheme in enumerate(("rope", "alibi", "rope")):
        _, folder = tinygpt_folder(tmp_path / str(i), scheme=scheme)
        code = main(["push", str(folder), f"tester/zoo-{scheme}", "--collection", "Position zoo", "--token", HUB_TOKEN])
        assert code == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    [slug] = hub.collections
    assert f"collection: {hub.url}/collections/{slug}" in printed and slug.startswith("tester/position-zoo-")
    collection = HfApi(endpoint=hub.url, token=HUB_TOKEN).get_collection(slug)
    assert collection.title == "Position zoo" and not collection.private
    assert [(item.item_id, item.item_type) for item in collection.items] == [
        ("tester/zoo-rope", "model"),
        ("tester/zoo-alibi", "model"),
    ]
    assert HUB_TOKEN not in printed


def test_a_collection_the_hub_refuses_is_one_line_after_the_model_was_published(hub, tmp_path, capsys, monkeypatch):
    cli_against(hub, monkeypatch)
    _, folder = tinygpt_folder(tmp_path)
    hub.failures["collections"] = (403, QUOTING, QUOTING_HEADERS)
    code = main(["push", str(folder), REPO, "--collection", "Zoo", "--token", HUB_TOKEN])
    printed = capsys.readouterr()
    assert code == 2 and len(printed.err.strip().splitlines()) == 1, printed.err
    assert f"adding {REPO} to the collection 'Zoo'" in printed.err and "HTTP 403" in printed.err
    assert "commit:" in printed.out and set(hub.repo_files(REPO)) == REPO_FILES  # the model itself was published
    for secret in (HUB_TOKEN, SOMEONE_ELSES, "\x1b"):
        assert secret not in printed.out + printed.err


def test_a_dry_run_says_which_collection_it_would_add_to_and_sends_nothing(hub, tmp_path, capsys, monkeypatch):
    cli_against(hub, monkeypatch)
    _, folder = tinygpt_folder(tmp_path)
    code = main(["push", str(folder), REPO, "--collection", "Zoo", "--dry-run", "--out", str(tmp_path / "staged")])
    assert code == 0
    assert f"and {REPO} would be added to the collection 'Zoo'" in capsys.readouterr().out
    assert hub.requests == [] and hub.collections == {}


def test_an_empty_collection_title_is_refused_by_its_flag_before_any_request(hub, tmp_path, capsys, monkeypatch):
    cli_against(hub, monkeypatch)
    _, folder = tinygpt_folder(tmp_path)
    code = main(["push", str(folder), REPO, "--collection", " ", "--token", HUB_TOKEN])
    assert code == 2 and "--collection must be a title" in capsys.readouterr().err
    assert hub.requests == []  # refused before the model was pushed
