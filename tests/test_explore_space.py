"""The explorer as a Hugging Face Space: `explore --space-out` writes the folder, the folder's own `app.py` serves
the explorer from the package copy inside it (models from the loopback Hub, tests/hub_server.py), and `push`
publishes it as a Gradio Space repo there."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import HUB_TOKEN, REPOSITORY, hub_subprocess_env, save_with_tokenizer, text_model

pytest.importorskip("gradio")
from gradio_client import Client
from huggingface_hub import SpaceCard

from hf_tinygpt import gpt2_tokenizer
from hf_tinygpt.explore.space import write_space
from hf_tinygpt.hub.publish import is_space_folder, space_files
from hf_tinygpt.plots.positions import load_for_plots
from scripts.explorer_screenshots import free_port

PROMPT = "The cat sat on the mat"


def command(env, *args, cwd=None):
    run = subprocess.run(
        [sys.executable, "-m", "hf_tinygpt", *map(str, args)], env=env, cwd=cwd, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def serve(space: Path, env: dict) -> tuple[subprocess.Popen, Client]:
    """The Space's own `python app.py`, as the Space runs it, on a loopback port."""
    port = free_port()
    env = env | {"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "0"}
    server = subprocess.Popen(
        [sys.executable, "app.py"], cwd=space, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for _ in range(480):
        try:
            return server, Client(f"http://127.0.0.1:{port}/", verbose=False)
        except Exception:  # not up yet: gradio_client raises whatever its first request met
            if server.poll() is not None:
                raise AssertionError(server.stdout.read()[-3000:]) from None
            time.sleep(0.5)
    server.kill()
    raise AssertionError("the Space's app.py did not serve within 4 minutes")


def test_a_space_loads_its_models_at_the_revision_they_were_checked_at_and_holds_no_token(tmp_path, monkeypatch):
    """`explore me/tiny --revision dev --space-out DIR` checked the models at `dev`: the Space loaded `main`. (The
    check's load stands in for the Hub's: what is tested is what app.py holds.)"""
    from hf_tinygpt.explore import space

    checked = []
    monkeypatch.setattr(
        space, "load_for_plots", lambda source, hub_kwargs: checked.append(hub_kwargs) or (text_model("rope"), source)
    )
    space.write_space(tmp_path / "space", ["me/tiny"], hub_kwargs={"revision": "dev", "token": "hf_not_for_the_space"})
    assert checked == [{"revision": "dev", "token": "hf_not_for_the_space"}]
    app = (tmp_path / "space" / "app.py").read_text()
    assert "hf_not_for_the_space" not in app
    assert """HUB = json.loads('{"revision": "dev"}')""" in app and "load_models(MODELS, hub_kwargs=HUB)" in app
    with pytest.raises(ValueError, match="`revision` is the revision of the Space's Hub models, and none of its"):
        space.write_space(tmp_path / "shipped", [], hub_kwargs={"revision": "dev"})  # the shipped model has no revision


def test_a_model_the_space_cannot_load_is_named_once(tmp_path):
    with pytest.raises(ValueError) as refused:
        write_space(tmp_path / "space", ["me/nothere"])  # offline: no Hub answers
    said = str(refused.value)
    assert said.startswith("me/nothere: the Space could not load it: not a scheme name") and said.count("me/") == 1


@pytest.mark.slow
def test_a_space_folder_serves_the_explorer_and_is_published_as_a_space(hub, tmp_path):
    from huggingface_hub import HfApi

    folder = save_with_tokenizer(text_model("alibi", seed=3), tmp_path / "alibi")
    HfApi(endpoint=hub.url, token=HUB_TOKEN).create_repo("me/alibi")
    HfApi(endpoint=hub.url, token=HUB_TOKEN).upload_folder(repo_id="me/alibi", folder_path=folder)
    (tmp_path / "long.txt").write_text("To be, or not to be. " * 200, encoding="utf-8")
    env = hub_subprocess_env(hub, tmp_path, PYTHONDONTWRITEBYTECODE="1")
    space = tmp_path / "space"

    printed = command(env, "explore", "me/alibi", "learned", "--space-out", space, "--long-text", tmp_path / "long.txt")
    assert f"publish it: hf-tinygpt push-space {space} OWNER/NAME" in printed
    files = space_files(space, "me/explorer")
    assert {"app.py", "requirements.txt", "README.md", "long_text.txt"} <= set(files)
    assert {"hf_tinygpt/explore/app.py", "hf_tinygpt/default_model/model.safetensors"} <= set(files)
    card = SpaceCard.load(space / "README.md").data
    assert (card.sdk, card.app_file, card.models) == ("gradio", "app.py", ["me/alibi"])
    assert card.sdk_version == __import__("gradio").__version__
    assert "gradio>=5" in (space / "requirements.txt").read_text().splitlines()

    # The Space runs the package copy inside it, not this checkout's.
    where = "import hf_tinygpt.explore.app as app; print(app.__file__)"
    inside = subprocess.run([sys.executable, "-c", where], cwd=space, env=env, capture_output=True, text=True)
    assert Path(inside.stdout.strip()).is_relative_to(space), inside.stderr[-2000:]
    server, client = serve(space, env)
    try:
        texts = client.predict(PROMPT, 6, api_name="/generate")
    finally:
        server.kill()
        server.wait()
    tokenizer = gpt2_tokenizer()
    ids = torch.tensor([tokenizer(PROMPT)["input_ids"]])
    for source, text in zip([folder, "learned"], texts, strict=True):
        model, _ = load_for_plots(str(source))
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
        assert text == tokenizer.decode(expected[0, ids.shape[1] :])

    assert space_files(space, "me/explorer") == files  # serving wrote nothing into the folder
    dry = command(env, "push-space", space, "me/explorer", "--dry-run")
    assert f"{len(files)} files, {sum(files.values()):,} bytes" in dry
    assert not any("me/explorer" in path for _, path in hub.requests)  # a dry run sends nothing
    refused = subprocess.run(
        [sys.executable, "-m", "hf_tinygpt", "push", space, "me/explorer", "--tokenizer", "gpt2"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert (
        refused.returncode == 2
        and "is a Space folder (`hf-tinygpt explore --space-out` wrote it), not a model" in refused.stderr
        and "`hf-tinygpt push-space`" in refused.stderr
    )
    printed = command(env, "push-space", space, "me/explorer", "--token", HUB_TOKEN)
    assert "uploading to the Space me/explorer:" in printed and HUB_TOKEN not in printed
    published = hub.repo_files("me/explorer", repo_type="space")
    assert set(published) == set(files)
    assert all(published[name] == (space / name).read_bytes() for name in ("app.py", "README.md"))

    (space / "app.py").write_text((space / "app.py").read_text() + "\nprint('changed')\n")
    with pytest.raises(ValueError, match=r"not as `hf-tinygpt explore --space-out` wrote it \(app.py \(changed since"):
        space_files(space, "me/explorer")


@pytest.mark.slow
def test_an_installed_package_writes_the_same_space_as_a_source_tree(tmp_path):
    """From a source tree the package goes in as its wheel builds it; from an installed wheel, as its record lists
    it. Both hold the same files."""
    wheels, target = tmp_path / "wheels", tmp_path / "installed"
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, REPOSITORY], check=True)
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", target, *wheels.glob("*.whl")], check=True)
    env = os.environ | {"PYTHONPATH": str(target), "PYTHONDONTWRITEBYTECODE": "1"}
    script = (
        "import sys, hf_tinygpt; from hf_tinygpt.explore.space import write_space; "
        "assert hf_tinygpt.__file__.startswith(sys.argv[2]), hf_tinygpt.__file__; write_space(sys.argv[1])"
    )
    subprocess.run([sys.executable, "-c", script, tmp_path / "from-wheel", target], check=True, env=env, cwd=tmp_path)
    write_space(tmp_path / "from-source")
    installed, built = (space_files(tmp_path / name, "me/explorer") for name in ("from-wheel", "from-source"))
    assert installed == built and "hf_tinygpt/explore/space.py" in built


def test_a_spaces_package_holds_only_what_git_tracks_and_no_link(tmp_path):
    """(A note beside the package's files, `HF_TOKEN=...` in hf_tinygpt/default_model/my_notes.txt, and a link to a
    file outside were built into the Space's package and published with it.)"""
    from hf_tinygpt.explore.space import _copy_source

    source = tmp_path / "source"
    for name in ("pyproject.toml", "README.md", "hf_tinygpt/__init__.py", "model_cards/trained.md"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text("tracked\n")
    git = ["git", "-C", str(source), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    (source / "hf_tinygpt" / "my_notes.txt").write_text("HF_TOKEN=hf_not_for_the_space\n")
    (tmp_path / "secret.txt").write_text("elsewhere\n")
    (source / "hf_tinygpt" / "linked.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.warns(UserWarning, match="as files git does not track: hf_tinygpt/linked.txt, hf_tinygpt/my_notes"):
        _copy_source(source, tmp_path / "tree")
    copied = sorted(p.relative_to(tmp_path / "tree").as_posix() for p in (tmp_path / "tree").rglob("*") if p.is_file())
    assert copied == ["README.md", "hf_tinygpt/__init__.py", "model_cards/trained.md", "pyproject.toml"]
    subprocess.run([*git, "add", "hf_tinygpt/linked.txt"], check=True)  # a link git tracks is still a link
    with pytest.raises(ValueError, match="linked.txt is a link: the Space's package is built from files"):
        _copy_source(source, tmp_path / "again")


def test_a_space_is_made_of_hub_models_and_only_a_space_folder_is_pushed_as_one(tmp_path, tiny_folder):
    with pytest.raises(ValueError, match=f"{tiny_folder}: a Space loads its models from the Hub.*hf-tinygpt push"):
        write_space(tmp_path / "space", [str(tiny_folder)])
    assert not (tmp_path / "space").exists()
    assert not is_space_folder(tiny_folder) and not is_space_folder(tmp_path / "nothing")
    with pytest.raises(ValueError, match="not a Space folder of hf-tinygpt"):
        space_files(tiny_folder, "me/explorer")


def test_the_verb_names_flags_that_need_a_space_folder(capsys):
    from hf_tinygpt.cli.commands import main

    assert main(["explore", "rope", "--force"]) == 2
    assert "--force replaces an earlier --space-out folder: it needs --space-out DIR" in capsys.readouterr().err


def space_folder(out: Path) -> Path:
    """A Space folder as `write_space` seals one (its manifest of kind "space"), without building the package."""
    from hf_tinygpt.folders.outputs import output_folder

    with output_folder(out, kind="space") as staging:
        (staging / "app.py").write_text("print('the explorer')\n", encoding="utf-8")
        (staging / "README.md").write_text("---\nsdk: gradio\n---\n", encoding="utf-8")
        (staging / "hf_tinygpt").mkdir()
        (staging / "hf_tinygpt" / "__init__.py").write_text("", encoding="utf-8")
    return out


def planted_leftover(space: Path, tmp_path: Path) -> Path:
    """A folder named like one our writer replaces (`.app.old-PID-HEX`), with a manifest of ours: a leftover by
    every sign, holding a secret."""
    from hf_tinygpt.folders.outputs import output_folder

    with output_folder(tmp_path / "planted", kind="space") as staging:
        (staging / "secret.env").write_text("HF_TOKEN=hf_planted\n", encoding="utf-8")
    leftover = space / ".app.old-4242-0badc0de"
    (tmp_path / "planted").rename(leftover)
    return leftover


def test_a_space_push_uploads_exactly_what_its_dry_run_lists(hub, tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    from hf_tinygpt.cli.commands import main

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    space = space_folder(tmp_path / "space")
    assert main(["push", str(space), "me/explorer", "--dry-run", "--out", str(tmp_path / "staged")]) == 2
    assert "a Space folder" in capsys.readouterr().err and not (tmp_path / "staged").exists()  # `push` is for models
    assert main(["push-space", str(space), "me/explorer", "--dry-run"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:-1]]
    assert listed == ["README.md", "app.py", "hf_tinygpt/__init__.py"]
    assert main(["push-space", str(space), "me/explorer", "--token", HUB_TOKEN]) == 0, capsys.readouterr().err
    assert sorted(hub.repo_files("me/explorer", repo_type="space")) == listed


def test_a_space_push_refuses_a_folder_its_manifest_does_not_prove(hub, tmp_path, capsys, monkeypatch):
    """A planted folder with a manifest of ours, named like our leftovers, is refused by name by the dry run and by
    the push alike, and nothing is sent."""
    from huggingface_hub import constants

    from hf_tinygpt.cli.commands import main

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    space = space_folder(tmp_path / "space")
    planted_leftover(space, tmp_path)
    for dry_run in (["--dry-run"], ["--token", HUB_TOKEN]):
        assert main(["push-space", str(space), "me/explorer", *dry_run]) == 2
        err = capsys.readouterr().err
        assert ".app.old-4242-0badc0de/" in err and "write it again" in err, err
    assert not any("me/explorer" in path for _, path in hub.requests)


@pytest.mark.parametrize("repo_id", ["../../x", "/etc", "a b", "me/explorer/x", "me"])
def test_a_space_dry_run_refuses_the_repo_ids_a_push_refuses(tmp_path, capsys, repo_id):
    from hf_tinygpt.cli.commands import main

    space = space_folder(tmp_path / "space")
    for dry_run in (["--dry-run"], []):
        assert main(["push-space", str(space), repo_id, *dry_run]) == 2
        assert f"invalid repo id {repo_id!r}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "title, message",
    [
        ("x" * 101, "is 101 characters long; a title takes at most 100"),
        ("Zoo\x1b[31m", "holds a control character (U+001B at character 4)"),
        ("Zoo\nmore", "holds a control character (U+000A at character 4)"),
        ("  ", "must be a title, got an empty one"),
    ],
)
def test_a_collection_title_is_one_line_of_bounded_text(tmp_path, tiny_folder, capsys, title, message):
    from hf_tinygpt.cli.commands import main

    args = ["push", str(tiny_folder), "me/model", "--collection", title]
    for dry_run in (["--dry-run", "--out", str(tmp_path / "staged")], []):
        assert main([*args, *dry_run]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "staged").exists()
