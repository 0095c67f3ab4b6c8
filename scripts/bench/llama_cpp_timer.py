"""llama.cpp as a peer of the speed benchmark: its greedy decoding of one prompt, timed on request in a worker that
stays up, so that its runs interleave with TinyGPT's in the same rounds (scripts/measurement_log.md, "Speed")."""

import json
import os
import subprocess
from pathlib import Path

from scripts.bench.engine_worker import RESULT
from scripts.bench.engines import (
    HANG,
    WORKER,
    WORKER_ENV,
    convert_to_gguf,
    llama_cpp_engine,
    worker_result,
    write_inputs,
)
from scripts.bench.measure import cpu_flags, llama_cpp_build_check


class LlamaCppTimer:
    """llama.cpp (llama-cpp-python from PyPI, in its own venv: scripts/bench/engines.py) decoding one prompt greedily on
    request, in `engine_worker.py llama_cpp_timer`. A context manager: leaving it ends the worker.

    The GGUFs are made the way a user would make them: `hf-tinygpt convert --to gpt2` of the GPT-2 folder, then
    llama.cpp's own convert_hf_to_gguf.py, one per type. A type whose first run fails (q8_0 died with SIGILL in one
    build of llama.cpp on this CPU) is left out, with the reason in `unavailable`."""

    def __init__(
        self,
        gpt2_folder: str,
        work: Path,
        prompt: list[int],
        new_tokens: int,
        threads: int,
        types=("f32", "f16", "q8_0"),
        avx2_only: bool = False,
    ):
        from hf_tinygpt.convert.conversions import export_tinygpt

        engine = llama_cpp_engine(avx2_only)
        export_tinygpt(gpt2_folder, str(work / "gpt2-export"), to="gpt2", verify_tolerance=1e-5)
        inputs = write_inputs(work / "llama_inputs.json", [prompt], new_tokens)
        one_token = write_inputs(work / "one_token.json", [prompt], 1)
        self.ggufs, self.unavailable = {}, {}
        for outtype in types:
            gguf = convert_to_gguf(engine, work / "gpt2-export", work / f"model-{outtype}.gguf", outtype)
            try:  # a one-token run in a process of its own: a crash there must not take the timer down
                worker_result(engine[0], "llama_cpp", gguf, one_token)
                self.ggufs[outtype] = gguf
            except RuntimeError as failed:
                self.unavailable[outtype] = str(failed).splitlines()[-1][-300:]
        self.gguf_bytes = {outtype: gguf.stat().st_size for outtype, gguf in self.ggufs.items()}
        self.process = subprocess.Popen(
            [str(engine[0]), str(WORKER), "llama_cpp_timer", str(threads), *map(str, self.ggufs.values()), str(inputs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **WORKER_ENV},
        )
        self.index = {outtype: i for i, outtype in enumerate(self.ggufs)}
        self.prompt_length, self.new_tokens = len(prompt), new_tokens
        # llama.cpp's version and the instructions it was compiled for, set against this CPU's.
        build = self._read()["build"]
        self.build = build | llama_cpp_build_check(build["system_info"], cpu_flags()[1])

    def _read(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(RESULT):
                return json.loads(line.removeprefix(RESULT))
        raise RuntimeError(f"llama.cpp's timer ended (exit {self.process.wait()})")

    def run(self, outtype: str) -> dict:
        """One timed greedy decode with the GGUF of `outtype`, checked to be the work `generate` does."""
        self.process.stdin.write(f"{self.index[outtype]}\n")
        self.process.stdin.flush()
        result = self._read()
        if len(result["tokens"]) != self.new_tokens:
            raise RuntimeError(f"llama.cpp {outtype} made {len(result['tokens'])} tokens, not {self.new_tokens}")
        # The same work as `generate`'s: the whole prompt in one prefill, then a decoding step per further token
        # (llama.cpp reports a count of 0 as 1).
        done = (result["prompt_tokens_evaluated"], result["decoding_steps"])
        expected = (max(1, self.prompt_length), max(1, self.new_tokens - 1))
        if done != expected:
            raise RuntimeError(
                f"llama.cpp {outtype} evaluated {done[0]} prompt tokens and {done[1]} decoding steps; "
                f"a run is {expected[0]} and {expected[1]}."
            )
        return result

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.write("\n")
            self.process.stdin.close()
            self.process.wait(timeout=HANG)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
