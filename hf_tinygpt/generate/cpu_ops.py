"""Building this package's own CPU kernels (int8_dot_products.cpp, avx2_products.cpp) as torch ops, on first use.

torch's C++ extension builder compiles each once per machine (a C++ compiler, which torch.compile needs too, and
ninja) and loads it once per process. A kernel that cannot be built leaves the products it would take to torch's
own kernels, with a warning that says why.
"""

import contextlib
import os
import sysconfig
import warnings
from pathlib import Path

from torch.utils.cpp_extension import load


@contextlib.contextmanager
def ninja_of_this_python():
    """torch's extension builder runs `ninja` from PATH. This package's dependencies install it beside this
    interpreter, which is not on PATH when a venv's python runs by its path, unactivated: for the build, PATH ends
    with that folder."""
    path = os.environ.get("PATH", os.defpath)
    os.environ["PATH"] = os.pathsep.join([path, sysconfig.get_path("scripts")])
    try:
        yield
    finally:
        os.environ["PATH"] = path


def built(name: str, source: Path, instead: str) -> bool:
    """Whether the op in `source` is built and loaded as extension `name`; if it cannot be, a warning gives the
    compiler's reason and says what runs `instead`."""
    try:
        with ninja_of_this_python():
            load(
                name=name,
                sources=[str(source)],
                extra_cflags=["-O3", "-fopenmp"],  # -fopenmp: ATen's parallel_for runs on one thread without it
                extra_ldflags=["-fopenmp"],
                is_python_module=False,
            )
    except (OSError, RuntimeError, ImportError) as error:
        lines = str(error).splitlines() or [type(error).__name__]
        reason = next((line for line in lines if " error: " in line), lines[0])  # the compiler's, if it failed
        warnings.warn(f"{source.stem} could not be built ({reason}); {instead}", stacklevel=4)
        return False
    return True
