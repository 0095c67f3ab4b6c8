"""What .ci/run counts on beyond the README's commands: a tier it requires cannot pass by running nothing."""

import os
import subprocess
import sys

import pytest
from conftest import REPOSITORY


@pytest.mark.slow  # two fresh interpreters
def test_the_transformers_suite_that_ci_requires_fails_where_it_is_not_found(tmp_path):
    """.ci/run sets HF_TINYGPT_SUITE_MUST_RUN: a suite that is not where it is looked for is then a failure that says
    so, not a skipped module (which ends the run only through pytest's "no tests ran" exit code, without a word)."""
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-m", "slow", "-p", "no:cacheprovider"]
    command.append(str(REPOSITORY / "tests" / "test_transformers_suite.py"))
    env = {**os.environ, "HF_TINYGPT_TRANSFORMERS_TESTS": str(tmp_path / "nowhere")}
    env.pop("HF_TINYGPT_SUITE_MUST_RUN", None)
    skipped = subprocess.run(command, cwd=REPOSITORY, env=env, capture_output=True, text=True)
    required = subprocess.run(
        command, cwd=REPOSITORY, env={**env, "HF_TINYGPT_SUITE_MUST_RUN": "1"}, capture_output=True, text=True
    )
    assert "1 skipped" in skipped.stdout, skipped.stdout[-2000:]
    assert required.returncode == 2, required.stdout[-2000:]  # an error in collection, which stops the run
    assert f"MODEL TEST SUITE NOT FOUND at {tmp_path / 'nowhere'}" in required.stdout, required.stdout[-2000:]
