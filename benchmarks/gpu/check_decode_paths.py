"""Greedy tokens of the decode-path variants at the Qwen3-0.6B shape in bf16, against each
other: the kernels that only take that shape and dtype (splitk_linear's dense table, the
fused gate_up + SiLU, the GEMV's row limit, the opt-in fused qkv + norm + rotary + KV write)
never run in check_e2e.py, whose tiny fp32 models match none of their tables.

A Qwen3 model with the bundled qwen3-0.6b config and weights drawn N(0, 0.1) (norms at 1, so
the logits spread wide and bf16 rounding rarely flips an argmax) is saved once; each variant
runs in its own process (the switches are read at import) over 200 requests whose prompt
lengths (20-600) and output lengths (4-64) vary, so the decode batch shrinks through every
row count the tables cover. Printed per variant: tokens equal to the reference variant's, and
the sequences equal in full.

python benchmarks/gpu/check_decode_paths.py   (JSON to $OUT/check_decode_paths.json if set)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VARIANTS = {  # name -> environment; the first is the reference (session 10's dispatch)
    "cublas_gemv8": dict(
        STRIXLM_GEMV_MAX_ROWS="8", STRIXLM_DENSE_GEMM="0", STRIXLM_FUSE_GATE_UP_SILU="0"
    ),
    "defaults": {},
    "fused_qkv": dict(STRIXLM_FUSE_QKV_NORM_ROPE="1"),
    "eager_defaults": dict(STRIXLM_CHECK_EAGER="1"),
}


def save_model(folder: str) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg_path = os.path.join(ROOT, "strixlm", "benchmarks", "configs", "qwen3-0.6b", "config.json")
    cfg = Qwen3Config.from_pretrained(os.path.dirname(cfg_path))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.normal_(0, 0.1)
    model.save_pretrained(folder)


def run_variant(folder: str, out_path: str) -> None:
    import torch

    sys.path.insert(0, ROOT)
    from strixlm.engine.request import SamplingParams
    from strixlm.entrypoints.llm import LLM

    g = torch.Generator().manual_seed(1)
    n = 200
    lens = torch.randint(20, 600, (n,), generator=g).tolist()
    outs = torch.randint(4, 64, (n,), generator=g).tolist()
    prompts = [torch.randint(0, 150_000, (k,), generator=g).tolist() for k in lens]
    llm = LLM(
        folder,
        device="cuda",
        dtype="bfloat16",
        skip_tokenizer_init=True,
        enforce_eager=os.environ.get("STRIXLM_CHECK_EAGER") == "1",
        max_num_seqs=256,
        gpu_memory_utilization=0.5,
    )
    params = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in outs]
    got = llm.generate(prompts, params, use_tqdm=False)
    with open(out_path, "w") as f:
        json.dump([o.outputs[0].token_ids for o in got], f)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        run_variant(os.environ["CHECK_MODEL"], sys.argv[2])
        return 0
    results: dict = {}
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "model")
        save_model(model)
        tokens = {}
        for name, extra in VARIANTS.items():
            path = os.path.join(d, f"{name}.json")
            env = dict(os.environ, CHECK_MODEL=model, **extra)
            rc = subprocess.run([sys.executable, __file__, "--worker", path], env=env).returncode
            if rc != 0:
                print(f"{name:16s} FAILED (exit {rc})")
                results[name] = {"error": rc}
                continue
            with open(path) as f:
                tokens[name] = json.load(f)
        ref_name = next(iter(VARIANTS))
        ref = tokens.get(ref_name)
        for name, seqs in tokens.items():
            if ref is None:
                break
            pairs = zip(seqs, ref, strict=True)
            same = sum(a == b for s, r in pairs for a, b in zip(s, r, strict=False))
            total = sum(len(r) for r in ref)
            exact = sum(s == r for s, r in zip(seqs, ref, strict=True))
            results[name] = {"token_match": same / total, "exact": exact, "n": len(ref)}
            print(f"{name:16s} vs {ref_name}: token match {same / total:.4f}, "
                  f"exact {exact}/{len(ref)}")  # fmt: skip
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "check_decode_paths.json"), "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
