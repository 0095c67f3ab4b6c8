"""What a push is asked to do: `PushSettings` publishes a model (`push`), `SpacePushSettings` a Space folder that
`hf-tinygpt explore --space-out` wrote (`push_space`). Which one runs is what the caller chose, never what a folder
says of itself."""

from dataclasses import dataclass

from ..settings import hub_token, setting


@dataclass
class _Commit:
    """Where a push commits, and how it talks to the Hub: alike for a model and a Space."""

    src: str
    repo_id: str = setting(help="owner/name on the Hub", positional=True)
    private: bool = setting(False, "create the repo private (if it does not exist)")
    revision: str | None = setting(
        None, "branch to commit to, created if needed (default: main)", flag=("--revision", "--branch")
    )
    commit_message: str | None = setting(None, "commit message (default: says what was uploaded)")
    create_pr: bool = setting(False, "open a pull request instead of committing")
    token: str | None = hub_token()
    timeout: float = setting(
        60.0, "seconds a network request may make no progress before the push fails", minimum=0.001
    )


@dataclass
class SpacePushSettings(_Commit):
    """What `push_space` (`hf-tinygpt push-space`) is asked to do."""

    src: str = setting(help="a Space folder, as `hf-tinygpt explore --space-out` wrote it", positional=True, reads=True)
    dry_run: bool = setting(False, "only list the files that would be uploaded")


@dataclass
class PushSettings(_Commit):
    """What `push` (`hf-tinygpt push`) is asked to do."""

    src: str = setting(
        help="tinygpt folder or Hub id, or any GPT-2 source (converted and verified first)", positional=True, reads=True
    )
    token: str | None = setting(
        None,
        "Hub token, also for reading a private `src` (default: the one huggingface_hub already knows; never printed)",
    )
    collection: str | None = setting(
        None,
        "then add the model to the repo owner's collection of that title, made if needed (with `private`, a new "
        "collection is private too; default: no collection)",
        metavar="TITLE",
    )
    dry_run: bool = setting(False, "only stage the files into `out` and list them")
    out: str | None = setting(
        None,
        "with `dry_run`: the folder to stage into, written atomically (default: none; required with `dry_run`)",
        metavar="DIR",
    )
    force: bool = setting(False, "with `dry_run`: replace an earlier output at `out`")
    tokenizer: str | None = setting(
        None,
        "the tokenizer to bundle (default: `src`'s): 'gpt2' (the GPT-2 BPE shipped here), or a folder or Hub id",
        metavar="gpt2|PATH",
        reads=True,
    )
    verify_tolerance: float | None = setting(
        None,
        "largest max |Δlogits| against GPT2LMHeadModel when a GPT-2 `src` is converted first, per unit of the logits' "
        "scale, max(1, max |logit|) (default: 1e-5, for fp32; bf16 needs ~0.05)",
        minimum=0,
        flag="--tolerance",
    )
    base_model: str | None = setting(
        None,
        "Hub id of the model `src` came from, for the card (default: the card's; a GPT-2 `src`: `src` if a Hub id)",
    )
    license: str | None = setting(None, "licence for the model card (default: the card's, else mit)")
    keep_local_paths: bool = setting(
        False, "publish the card's training data paths and command line as they are (default: cut to file names)"
    )
