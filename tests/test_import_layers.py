"""The package's shape: layers that import only downwards, a model bundle on transformers' public API alone, and
optional extras that fail with one line saying what to install."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from transformers.dynamic_module_utils import get_imports

import hf_tinygpt
from hf_tinygpt.cli.commands import main
from hf_tinygpt.model import BUNDLE

PACKAGE = Path(hf_tinygpt.__file__).parent
# Lower layers first; a module may import its own folder and the layers before it, never a later one nor a folder
# beside it in its own layer: the jobs of one layer stand side by side.
LAYERS = [("model",), ("folders",), ("convert", "train", "generate", "plots"), ("hub", "explore"), ("cli",)]
FOLDERS = [folder for layer in LAYERS for folder in layer]


def imported_modules(path: Path) -> set[str]:
    """The hf_tinygpt modules a file imports (relative imports resolved), at any depth of the file."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
                found |= {f"{module}.{alias.name}" if not node.module else module for alias in node.names}
            elif node.module and node.module.startswith("hf_tinygpt"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("hf_tinygpt")}
    return found


def folder_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FOLDERS else None


def layer_of(folder: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if folder in layer)


def test_every_folder_of_the_package_has_a_layer():
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert folders == set(FOLDERS)


def test_layers_import_only_downwards():
    for path in PACKAGE.rglob("*.py"):
        own = folder_of(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        if own is None:
            continue  # the package's __init__ (the top: it re-exports the public API)
        for module in imported_modules(path):
            other = folder_of(module)
            if other is None or other == own:
                continue
            assert layer_of(other) < layer_of(own), f"{path} imports {module}"


def test_the_package_import_reaches_the_command_line_only_for_its_start_up():
    """The command's start-up runs before torch is imported, so the package's `__init__` calls it; that and
    nothing else of the command line: `start_up` imports the standard library alone."""
    assert {m for m in imported_modules(PACKAGE / "__init__.py") if folder_of(m) == "cli"} == {
        "hf_tinygpt.cli.start_up"
    }
    assert imported_modules(PACKAGE / "cli" / "start_up.py") == set()
    assert imported_modules(PACKAGE / "cli" / "__init__.py") == set()


def test_the_model_bundle_uses_only_public_transformers_api():
    """The files that travel with every saved model import only torch, transformers and the standard library, no
    underscore name from transformers, and pass no underscore keyword argument: a published repo keeps its copy of
    this code forever. (The modeling hooks every in-tree model defines, such as `_init_weights` or
    `config._attn_implementation`, are attributes of transformers' documented modeling interface, not imports.)
    One exception: torch's `_StridedShard`, which transformers' own packed tensor-parallel style uses, imported in a
    `try` that turns only tensor parallelism off if it ever goes away. (transformers refuses a remote modeling file
    that imports a package not installed, even inside a function.)"""
    for name in BUNDLE:
        # What transformers itself requires installed before it runs a remote modeling file: every import it finds.
        required = set(get_imports(PACKAGE / "model" / name))
        assert required <= {"torch", "transformers", *sys.stdlib_module_names}, (name, required)
        tree = ast.parse((PACKAGE / "model" / name).read_text())
        guarded = {  # imports inside `try: ... except ImportError:`
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.Try)
            and any(isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers)
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                top = node.module.split(".")[0]
                assert top in ("torch", "transformers") or top in sys.stdlib_module_names, (name, node.module)
                assert not any(part.startswith("_") for part in node.module.split(".")), (name, node.module)
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                assert private in ([], ["_StridedShard"] if id(node) in guarded else []), (name, node.module)
            if isinstance(node, ast.Call):
                assert not any((k.arg or "").startswith("_") for k in node.keywords), (name, ast.unparse(node))


@pytest.mark.slow
def test_importing_the_package_needs_no_extra():
    """In a fresh interpreter: importing the package afresh here would register a second TinyGPTConfig class with
    the Auto classes and confuse every later test."""
    # As if not installed. peft too: it requires accelerate, and transformers imports it whenever it is present.
    blocked = "import sys; sys.modules.update(accelerate=None, matplotlib=None, peft=None)"
    modules = (
        "hf_tinygpt.cli.commands",
        "hf_tinygpt.convert.conversions",
        "hf_tinygpt.hub.publish",
        "hf_tinygpt.generate.text",
    )
    imports = "import " + ", ".join(modules)
    run = subprocess.run([sys.executable, "-c", f"{blocked}; {imports}"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize(
    "verb, extra, package",
    [("train", "train", "accelerate"), ("plot-positions", "plots", "matplotlib"), ("explore", "explore", "gradio")],
)
def test_a_missing_extra_is_one_line_naming_the_install(monkeypatch, tmp_path, capsys, verb, extra, package):
    # As if not installed, submodules included; without accelerate there is no peft either (it requires accelerate,
    # and transformers imports it whenever it is present: run alone, this test failed inside that import).
    for blocked in (package, "peft") if package == "accelerate" else (package,):
        for name in [name for name in sys.modules if name == blocked or name.startswith(blocked + ".")]:
            monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.setitem(sys.modules, blocked, None)
    module = {
        "train": "hf_tinygpt.train.loop",
        "plots": "hf_tinygpt.plots.positions",
        "explore": "hf_tinygpt.explore.app",
    }
    monkeypatch.delitem(sys.modules, module[extra], raising=False)
    args = {
        "train": ["train", "--train", str(tmp_path / "texts"), "--out", str(tmp_path / "run")],
        "plot-positions": ["plot-positions", "rope", "--out", str(tmp_path / "plots")],
        "explore": ["explore", "rope"],
    }[verb]
    assert main(args) == 2
    assert capsys.readouterr().err == (
        f"hf-tinygpt {verb}: error: this needs {package} (not installed): pip install 'hf-tinygpt[{extra}]'\n"
    )


def test_the_wheel_holds_every_folder_of_the_package():
    """pyproject.toml lists the packages by name: a folder it does not name is in a clone and missing from a wheel
    (and from a Space, which carries the wheel's files)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {f"hf_tinygpt.{path.parent.name}" for path in PACKAGE.glob("*/__init__.py")}
    assert folders <= listed, sorted(folders - listed)
