"""`hf-tinygpt`: one convention across verbs, help that shows defaults and an example, and a version."""

import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hf_tinygpt import DEFAULT_MODEL_DIR, TinyGPTForCausalLM
from hf_tinygpt.cli.commands import build_parser, main

VERBS = ["generate", "params", "plot-positions", "verify-gpt2", "convert", "train", "push"]
TAKES_A_HUB_MODEL = ["generate", "params", "plot-positions", "verify-gpt2", "convert", "push"]
WRITES_A_FOLDER = ["plot-positions", "convert", "train", "push"]


def options(verb: str) -> dict[str, object]:
    """{--flag: its argparse action} for one verb."""
    subparsers = next(a for a in build_parser()._actions if a.dest == "verb")  # argparse keeps them only here
    return {flag: action for action in subparsers.choices[verb]._actions for flag in action.option_strings}


def test_version(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.strip() == f"hf-tinygpt {importlib.metadata.version('hf-tinygpt')}"


@pytest.mark.parametrize("verb", VERBS)
def test_help_shows_defaults_and_an_example(verb, capsys):
    with pytest.raises(SystemExit):
        main([verb, "--help"])
    text = capsys.readouterr().out
    assert f"example:\n  hf-tinygpt {verb}" in text
    flat = " ".join(text.split())
    for action in options(verb).values():
        if not action.help or action.option_strings == ["-h", "--help"] or action.nargs == 0 or action.required:
            continue  # a switch (store_true) is off unless given
        if action.default is None:  # the help says what happens without the option
            assert "default: " in action.help, action.option_strings
        else:
            assert f"(default: {action.default})" in flat, action.option_strings


def test_plot_positions_help_names_every_scheme_it_draws_untrained(capsys):
    """(It named five of the fifteen it takes.)"""
    from hf_tinygpt import POSITION_SCHEME_CLASSES

    with pytest.raises(SystemExit):
        main(["plot-positions", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    assert f"an untrained small model): {', '.join(POSITION_SCHEME_CLASSES)}" in flat


def test_the_same_idea_has_the_same_flag_in_every_verb():
    for verb in TAKES_A_HUB_MODEL:
        assert {"--revision", "--token"} <= options(verb).keys(), verb
    for verb in WRITES_A_FOLDER:
        assert {"--out", "--force"} <= options(verb).keys(), verb
    for verb in ["verify-gpt2", "convert"]:
        assert options(verb)["--tolerance"].default == 1e-5, verb
    assert options("push")["--tolerance"].default is None  # 1e-5 where a GPT-2 is converted; a tinygpt has no check
    for verb in ["convert", "train", "push"]:
        assert options(verb)["--tokenizer"].metavar == "gpt2|PATH", verb


def test_train_defaults_to_a_small_model():
    from hf_tinygpt.train.settings import TrainingSettings, build_config

    args = build_parser().parse_args(["train", "--train", "texts", "--out", "run"])
    settings = TrainingSettings(out=args.out, train=args.train, block_size=args.block_size)
    config = build_config(settings, vocab_size=50257, eos_token_id=50256)
    assert (config.n_layer, config.n_embd, config.n_head, args.steps) == (4, 64, 4, 500)
    assert sum(p.numel() for p in TinyGPTForCausalLM(config).parameters()) < 4e6


def test_every_training_setting_is_a_train_flag_with_the_settings_default_and_help():
    """The train verb's flags are made from `TrainingSettings`: a field added there is a flag, with the field's
    default and help. (Before, the command line copied the fields by hand: --steps defaulted to 500 where the
    settings said 1000, and `keep_checkpoints`, `eval_batch_size` and `validation_tokens` had no flag.)"""
    import dataclasses

    from hf_tinygpt.cli.commands import in_flags
    from hf_tinygpt.cli.flags import settings_values
    from hf_tinygpt.train.settings import TrainingSettings

    set_otherwise = {"config", "command"}  # from --config and the shape flags; the command line itself
    assert {f.name for f in dataclasses.fields(TrainingSettings) if f.metadata.get("flag") is False} == set_otherwise
    flags = {action.dest: action for action in options("train").values()}
    fields = {setting.name: setting for setting in dataclasses.fields(TrainingSettings)}
    assert set(fields) - set_otherwise <= set(flags)  # (--config sets `config` too, from a JSON file)
    names = {dest: max(action.option_strings, key=len) for dest, action in flags.items()}
    for name, setting in fields.items():
        if name not in set_otherwise:
            assert flags[name].help.startswith(in_flags(setting.metadata["help"], names)), name
    args = build_parser().parse_args(["train", "--train", "texts", "--out", "run"])
    given = TrainingSettings(**settings_values(args, TrainingSettings))
    assert given == TrainingSettings(out="run", train=["texts"])


def test_push_dry_run_needs_out(capsys):
    assert main(["push", "model", "me/tiny", "--dry-run"]) == 2
    assert "--dry-run needs --out: the folder to stage the files in" in capsys.readouterr().err


# The command as the console script starts it, and as `python -m hf_tinygpt` does: the same in every way.
COMMANDS = {"console script": ["hf-tinygpt"], "python -m": [sys.executable, "-m", "hf_tinygpt"]}


def run_command(command: str, *args) -> subprocess.CompletedProcess:
    """`hf-tinygpt ARGS` in a fresh process, started the way `command` names."""
    start = [shutil.which(word) or word for word in COMMANDS[command]]
    return subprocess.run([*start, *args], capture_output=True, text=True)


@pytest.mark.slow
def test_python_m_hf_tinygpt_is_the_console_script_and_prints_no_start_up_noise():
    """The same in every way: a version, a verb's help, a verb that works, a verb that fails. With the [int8] extra
    installed, importing transformers imports torchao, which logs the GPU extensions it cannot load, and torch logs
    a deprecation about torchao's enums: none of it reaches a command's stderr."""
    model, runs = str(DEFAULT_MODEL_DIR), {}
    for args in (("--version",), ("train", "--help"), ("params", model), ("params", "nowhere")):
        script, module = run_command("console script", *args), run_command("python -m", *args)
        assert (script.returncode, script.stdout, script.stderr) == (module.returncode, module.stdout, module.stderr)
        runs[args] = script
    assert runs["--version",].stdout.strip() == f"hf-tinygpt {importlib.metadata.version('hf-tinygpt')}"
    assert runs["params", model].returncode == 0 and runs["params", model].stderr == "", runs["params", model].stderr
    assert runs["params", "nowhere"].returncode != 0


@pytest.mark.slow  # a fresh interpreter
def test_importing_the_package_leaves_a_program_as_it_was(tmp_path):
    """Only the command's own start-up sets a Ctrl-C handler and filters start-up logs (the package's `__init__`
    runs `start_the_command` first, which returns at once in any other process): a program that imports the library
    keeps Python's own Ctrl-C and every log line, whatever its arguments."""
    program = tmp_path / "my_program.py"
    program.write_text(
        "import logging, signal\n"
        "import hf_tinygpt\n"
        "from hf_tinygpt.cli.start_up import START_UP_NOISE\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
        "assert not any(logging.getLogger(name).filters for name in START_UP_NOISE)\n"
        "print('as it was')\n"
    )
    run = subprocess.run([sys.executable, str(program), "train", "--help"], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout == "as it was\n", run.stderr[-2000:]


@pytest.mark.parametrize("module", ["hf_tinygpt.__main__", "hf_tinygpt.cli.__main__"])
def test_python_m_is_the_command_once_its_module_runs(monkeypatch, module):
    """While `python -m` runs the module (and in a process the command spawns, which is given its `sys.argv`),
    `sys.argv[0]` is the module's file: the command still, so that a Ctrl-C while it exits is one line and a spawned
    process filters the start-up noise, as the console script's do."""
    from hf_tinygpt.cli.start_up import starting_the_command

    main_file = importlib.util.find_spec(module).origin  # where Python finds it, as `python -m` does
    monkeypatch.setattr(sys, "argv", [main_file, "serve", "my-tinygpt"])
    assert starting_the_command()
    monkeypatch.setattr(sys, "argv", [str(Path(main_file).with_name("my_program.py")), "serve", "my-tinygpt"])
    assert not starting_the_command()


def test_the_command_takes_what_its_imports_made_out_of_the_garbage_collectors_walks(monkeypatch, capsys):
    """The command, once started (its start-up Ctrl-C handler set), freezes what the imports made, so that no
    collection walks torch's and transformers' objects again, nor the one Python makes as it exits (about 1 s of a
    `generate`); a program that calls `main` itself (as these tests do) keeps its collector as it was."""
    import signal
    from types import SimpleNamespace

    from hf_tinygpt.cli import commands
    from hf_tinygpt.cli.start_up import interrupted_while_starting

    frozen = []
    monkeypatch.setattr(commands, "gc", SimpleNamespace(freeze=lambda: frozen.append("frozen")))
    assert main(["params", str(DEFAULT_MODEL_DIR)]) == 0 and frozen == []
    before = signal.signal(signal.SIGINT, interrupted_while_starting)  # what the command's start-up sets
    try:
        assert main(["params", str(DEFAULT_MODEL_DIR)]) == 0 and frozen == ["frozen"]
    finally:
        signal.signal(signal.SIGINT, before)
    capsys.readouterr()


def test_the_start_up_filter_drops_only_the_known_lines():
    import logging

    from hf_tinygpt.cli.start_up import not_start_up_noise

    def record(logger, message):
        return logging.LogRecord(logger, logging.WARNING, __file__, 1, message, None, None)

    enum_note = "<enum 'KernelPreference'> is an Enum subclass and is now natively supported by torch.compile as an"
    assert not not_start_up_noise(record("torchao", "Failed to load /venv/torchao/_C_mxfp8.so: Could not load it"))
    assert not not_start_up_noise(record("torch.utils._pytree", enum_note + " opaque value type."))
    assert not_start_up_noise(record("torchao", "quantize_: no module matched the filter"))  # a real warning
    assert not_start_up_noise(record("transformers", "Failed to load /x/y.so: not torchao's"))


def test_a_warning_of_the_library_outside_cli_is_one_line_in_flags(monkeypatch, capsys):
    """Any file of the package is the library, not only cli/ (where the hook lives)."""
    import warnings

    from hf_tinygpt.train import loop

    def run_params(args):
        warnings.simplefilter("always")
        warnings.warn_explicit("`revision`: a warning of the library", UserWarning, loop.__file__, 1)
        return 0

    monkeypatch.setattr("hf_tinygpt.cli.commands.run_params", run_params)
    assert main(["params", "tiny"]) == 0
    assert capsys.readouterr().err == "hf-tinygpt params: warning: --revision: a warning of the library\n"
