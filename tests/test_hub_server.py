"""The test Hub server (tests/hub_server.py) against the real huggingface_hub and transformers, over loopback only."""

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import HUB_TOKEN, OTHER_HUB_TOKEN, hub_subprocess_env, word_tokenizer
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

TOKEN, OTHER_TOKEN = HUB_TOKEN, OTHER_HUB_TOKEN
REPO = "tester/tiny"


pytestmark = pytest.mark.usefixtures("online")  # every test here talks to the loopback server (conftest `hub`)


@pytest.fixture
def api(hub):
    return HfApi(endpoint=hub.url, token=TOKEN)


@pytest.fixture
def folder(tmp_path) -> Path:
    """A config, a nested binary file, an empty file, and an 11 MB file: above the sizes that used to mean LFS."""
    rng = random.Random(0)
    folder = tmp_path / "upload"
    (folder / "nested").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "gpt2", "n_layer": 1}\n')
    (folder / "nested" / "small.bin").write_bytes(rng.randbytes(1000))
    (folder / "empty.txt").write_bytes(b"")
    (folder / "weights.bin").write_bytes(rng.randbytes(11 * 1024 * 1024))
    return folder


def local_files(folder: Path) -> dict[str, bytes]:
    return {f.relative_to(folder).as_posix(): f.read_bytes() for f in folder.rglob("*") if f.is_file()}


def test_upload_folder_stores_identical_files(hub, api, folder):
    api.create_repo(REPO, exist_ok=True)
    api.create_repo(REPO, exist_ok=True)  # second time: the 409 is swallowed
    info = api.upload_folder(repo_id=REPO, folder_path=folder, commit_message="first")

    assert hub.repo_files(REPO) == local_files(folder)
    assert info.oid == hub.refs(REPO)["main"] == api.model_info(REPO).sha
    assert set(hub.tokens_seen) == {TOKEN}
    # The whole upload went through preupload + one inline commit: no LFS batch, no Xet token request.
    writes = [(method, path.split("?")[0]) for method, path in hub.requests if method == "POST"]
    assert writes == [
        ("POST", "/api/repos/create"),
        ("POST", "/api/repos/create"),
        ("POST", f"/api/models/{REPO}/preupload/main"),
        ("POST", f"/api/models/{REPO}/commit/main"),
    ]


def test_download_round_trip(hub, api, folder, tmp_path):
    api.create_repo(REPO)
    api.upload_folder(repo_id=REPO, folder_path=folder)
    expected = local_files(folder)

    assert sorted(api.list_repo_files(REPO)) == sorted(expected)
    assert sorted(s.rfilename for s in api.model_info(REPO).siblings) == sorted(expected)
    for path, data in expected.items():
        local = hf_hub_download(REPO, path, endpoint=hub.url, cache_dir=tmp_path / "cache", token=False)
        assert Path(local).read_bytes() == data
    snapshot = snapshot_download(REPO, endpoint=hub.url, cache_dir=tmp_path / "cache2", token=False)
    assert local_files(Path(snapshot)) == expected


def test_branches_and_revisions(hub, api, folder, tmp_path):
    api.create_repo(REPO)
    first = api.upload_folder(repo_id=REPO, folder_path=folder).oid
    api.create_branch(REPO, branch="dev")
    (folder / "config.json").write_text('{"changed": true}\n')
    dev = api.upload_folder(repo_id=REPO, folder_path=folder, revision="dev").oid

    assert hub.refs(REPO) == {"main": first, "dev": dev}
    assert hub.repo_files(REPO, "dev")["config.json"] == b'{"changed": true}\n'
    assert hub.repo_files(REPO, "main")["config.json"] != b'{"changed": true}\n'
    assert api.model_info(REPO, revision="dev").sha == dev

    def download(revision):
        return Path(hf_hub_download(REPO, "config.json", revision=revision, endpoint=hub.url, cache_dir=tmp_path))

    assert download("dev").read_bytes() == b'{"changed": true}\n'
    assert download(first).read_bytes() == download("main").read_bytes() != b'{"changed": true}\n'
    with pytest.raises(HfHubHTTPError) as error:
        api.create_branch(REPO, branch="dev")
    assert error.value.response.status_code == 409


def test_create_pr(hub, api, folder):
    api.create_repo(REPO)
    main = api.upload_folder(repo_id=REPO, folder_path=folder).oid
    (folder / "config.json").write_text('{"pr": 1}\n')

    # upload_folder (hf_xet installed) opens the PR first, then commits to refs/pr/1.
    info = api.upload_folder(repo_id=REPO, folder_path=folder, create_pr=True)
    assert info.pr_url == f"{hub.url}/{REPO}/discussions/1"
    assert info.pr_revision == "refs/pr/1"
    assert hub.repo_files(REPO, "refs/pr/1")["config.json"] == b'{"pr": 1}\n'
    assert hub.refs(REPO)["main"] == main

    # create_commit uses the other route: commit to main with ?create_pr=1.
    (folder / "config.json").write_text('{"pr": 2}\n')
    info = api.upload_file(
        repo_id=REPO, path_or_fileobj=folder / "config.json", path_in_repo="config.json", create_pr=True
    )
    assert info.pr_revision == "refs/pr/2"
    assert hub.repo_files(REPO, "refs/pr/2")["config.json"] == b'{"pr": 2}\n'
    assert hub.refs(REPO)["main"] == main
    assert api.model_info(REPO, revision="refs/pr/2").sha == hub.refs(REPO)["refs/pr/2"]


def test_errors_map_to_huggingface_hub_exceptions(hub, api, folder, tmp_path):
    api.create_repo(REPO, private=True)
    api.upload_folder(repo_id=REPO, folder_path=folder)

    def download(repo_id=REPO, filename="config.json", revision=None, token=TOKEN):
        return hf_hub_download(repo_id, filename, revision=revision, endpoint=hub.url, cache_dir=tmp_path, token=token)

    assert Path(download()).read_bytes() == (folder / "config.json").read_bytes()  # the owner reads the private repo
    with pytest.raises(RepositoryNotFoundError):
        download(repo_id="tester/missing")
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.url, token=False).model_info(REPO)  # private: anonymous gets "not found"
    with pytest.raises(RepositoryNotFoundError):
        download(token=OTHER_TOKEN, filename="nested/small.bin")  # private: another user too
    with pytest.raises(RevisionNotFoundError):
        download(revision="no-such-branch")
    with pytest.raises(EntryNotFoundError):
        download(filename="no_such_file.json")
    with pytest.raises(RevisionNotFoundError):  # upload_folder does not create branches: create_branch first
        api.upload_folder(repo_id=REPO, folder_path=folder, revision="no-such-branch")

    with pytest.raises(HfHubHTTPError) as error:
        api.create_repo(REPO)
    assert error.value.response.status_code == 409
    with pytest.raises(HfHubHTTPError) as error:
        HfApi(endpoint=hub.url, token="hf_wrong").create_repo("tester/other")
    assert error.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError) as error:
        HfApi(endpoint=hub.url, token=False).create_repo("tester/other")
    assert error.value.response.status_code == 401
    api.create_repo("tester/public")
    with pytest.raises(HfHubHTTPError) as error:  # a public repo is readable by all but writable by its owner only
        HfApi(endpoint=hub.url, token=OTHER_TOKEN).upload_folder(repo_id="tester/public", folder_path=folder)
    assert error.value.response.status_code == 403
    assert "hf_wrong" in hub.tokens_seen


@pytest.mark.slow
def test_transformers_loads_model_and_tokenizer_from_hub(hub, api, tmp_path):
    """A fresh interpreter with HF_ENDPOINT set: exactly how a user of the uploaded repo would load it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=100, n_positions=16, n_embd=32, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    ).eval()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    word_tokenizer(["hello", "world"]).save_pretrained(folder)
    api.create_repo(REPO)
    api.upload_folder(repo_id=REPO, folder_path=folder)

    script = textwrap.dedent(f"""
        import sys, torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained({REPO!r})
        ids = tokenizer("hello world nope", return_tensors="pt").input_ids
        model = AutoModelForCausalLM.from_pretrained({REPO!r}, revision="main").eval()
        with torch.no_grad():
            torch.save({{"ids": ids, "logits": model(ids).logits}}, sys.argv[1])
    """)
    env = hub_subprocess_env(hub, tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "out.pt")],
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr

    out = torch.load(tmp_path / "out.pt")
    assert out["ids"].tolist() == [[1, 2, 0]]
    with torch.no_grad():
        torch.testing.assert_close(out["logits"], model(out["ids"]).logits)
    fetched = {path.rsplit("/", 1)[-1] for method, path in hub.requests if method == "GET" and "/resolve/" in path}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= fetched
