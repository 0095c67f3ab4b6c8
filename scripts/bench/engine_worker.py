"""What scripts/bench/engines.py runs by its path inside each engine's own venv (never in the project's): one engine,
one folder, and JSON on the stdout line that starts with RESULT. It imports nothing of this repository: the venvs hold
the engine and what it needs from PyPI, not hf_tinygpt; TinyGPT folders load through the code saved beside their
weights (`trust_remote_code`), as they would on a machine without this package.

    python engine_worker.py onnx FOLDER OUT.onnx INPUTS.json   → {"logits": [...]}
    python engine_worker.py vllm FOLDER INPUTS.json             → {"tokens": [[...], ...]}
    python engine_worker.py llama_cpp MODEL.gguf INPUTS.json    → {"tokens": [[...], ...], "logits": [[...], ...]}
    python engine_worker.py llama_cpp_timer THREADS A.gguf [B.gguf ...] INPUTS.json
        → {"loaded": [...]}, then for each index N read from stdin, a run of GGUF N:
          {"seconds": s, "tokens": [...], "prompt_tokens_evaluated": p, "decoding_steps": d}

INPUTS.json: {"input_ids": [[...], ...], "attention_mask": [[...], ...], "max_new_tokens": n}.
"""

import itertools
import json
import sys

RESULT = "engine_worker result:"
# llama.cpp's own sampler made greedy: the best token, nothing reweighted.
LLAMA_CPP_GREEDY = {"top_k": 1, "top_p": 1.0, "min_p": 0.0, "temp": 0.0, "repeat_penalty": 1.0}


def onnx(folder: str, out: str, inputs: dict) -> dict:
    """torch.onnx.export (dynamo) of the logits, dynamic batch and length, then the same inputs in ONNX Runtime: the
    README's recipe (its ```python onnx block), positions counted from each row's first real token."""
    import onnxruntime
    import torch
    from transformers import AutoModelForCausalLM

    class Logits(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # as `generate` counts them under padding
            return self.model(
                input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            ).logits

    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
    example = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length", max=model.config.n_positions)
    # An inference graph: parameters that need gradients (the learned biases of t5, kerple and fire) would make the
    # exporter decompose sdpa as for training, which it cannot convert.
    with torch.no_grad():
        torch.onnx.export(
            Logits(model),
            (example, torch.ones_like(example)),
            out,
            dynamo=True,
            input_names=["input_ids", "attention_mask"],
            output_names=["logits"],
            dynamic_shapes={"input_ids": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}},
        )
    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    feed = {name: torch.tensor(inputs[name]).numpy() for name in ("input_ids", "attention_mask")}
    return {"logits": session.run(["logits"], feed)[0].tolist()}


def vllm(folder: str, inputs: dict) -> dict:
    """vLLM's offline `LLM.generate`, greedy, fp32, on prompts given as token ids. vLLM picks the model class: its
    own for GPT-2 and GPT-NeoX, its Transformers backend (the folder's remote code) for TinyGPT."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(
        model=folder,
        trust_remote_code=True,
        dtype="float32",
        max_model_len=128,
        seed=0,
        enforce_eager=True,  # torch.compile gives the same tokens, only later (scripts/README.md, "Engines")
        kv_cache_memory_bytes=64 * 2**20,  # else the CPU backend reserves 90% of the machine's memory
        skip_tokenizer_init=True,
    )
    greedy = SamplingParams(temperature=0, max_tokens=inputs["max_new_tokens"], ignore_eos=True, detokenize=False)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in inputs["input_ids"]], greedy, use_tqdm=False)
    return {
        "tokens": [list(output.outputs[0].token_ids) for output in outputs],
        "architecture": llm.llm_engine.model_config.architecture,
    }


def llama_cpp(gguf: str, inputs: dict) -> dict:
    """llama.cpp (llama-cpp-python) on a GGUF: greedy tokens through its own sampler (top_k=1), and the logits at
    each prompt's last position."""
    import numpy
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=128, logits_all=True, n_threads=2, seed=0, verbose=False)
    tokens, logits = [], []
    for ids in inputs["input_ids"]:
        llm.reset()
        llm.eval(ids)
        logits.append(numpy.asarray(llm.scores[len(ids) - 1], dtype=numpy.float32).tolist())
        greedy = llm.generate(ids, **LLAMA_CPP_GREEDY, reset=True)
        tokens.append([int(token) for token in itertools.islice(greedy, inputs["max_new_tokens"])])
    return {"tokens": tokens, "logits": logits}


def llama_cpp_timer(threads: str, *args) -> None:
    """Time greedy decoding in llama.cpp on request, so that a benchmark can interleave it with its own runs: load
    each GGUF, then for every index read from stdin, decode the (one) prompt with that GGUF from a reset context,
    exactly `max_new_tokens` tokens (prefill included, as transformers' `generate` is timed), and report the wall
    time with llama.cpp's own count of what it evaluated. An empty line ends it."""
    import time

    import llama_cpp
    from llama_cpp import Llama, llama_perf_context, llama_perf_context_reset

    *ggufs, inputs = args
    (prompt,), new_tokens = inputs["input_ids"], inputs["max_new_tokens"]
    models = [
        Llama(
            model_path=gguf,
            n_ctx=len(prompt) + new_tokens,
            n_threads=int(threads),
            n_threads_batch=int(threads),
            seed=0,
            verbose=False,
        )
        for gguf in ggufs
    ]
    # Which llama.cpp, compiled for which instructions: the build decides its speed as much as the machine does.
    build = {"version": llama_cpp.__version__, "system_info": llama_cpp.llama_print_system_info().decode()}
    print(RESULT, json.dumps({"loaded": ggufs, "build": build}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            break
        llm = models[int(line)]
        # Forget the last run: `generate` would find this prompt still in the KV cache and skip its prefill.
        llm.reset()
        llama_perf_context_reset(llm.ctx)
        start = time.perf_counter()
        greedy = llm.generate(prompt, **LLAMA_CPP_GREEDY, reset=True)
        # islice, not zip with a range: zip asks the generator for one more token, and that costs a decoding step.
        tokens = [int(token) for token in itertools.islice(greedy, new_tokens)]
        seconds = time.perf_counter() - start
        counts = llama_perf_context(llm.ctx)  # llama.cpp's own tally: prompt tokens, then one-token decodes
        print(
            RESULT,
            json.dumps(
                {
                    "seconds": seconds,
                    "tokens": tokens,
                    "prompt_tokens_evaluated": counts.n_p_eval,
                    "decoding_steps": counts.n_eval,
                }
            ),
            flush=True,
        )


def main(engine: str, *args: str) -> None:
    *leading, inputs_path = args
    with open(inputs_path) as file:
        inputs = json.load(file)
    if engine == "llama_cpp_timer":
        return llama_cpp_timer(*leading, inputs)
    engines = {"onnx": onnx, "vllm": vllm, "llama_cpp": llama_cpp}
    result = engines[engine](*leading, inputs)
    print(RESULT, json.dumps(result), flush=True)  # engines log to stdout too, before and after


if __name__ == "__main__":
    main(*sys.argv[1:])
