"""`strixlm serve | generate | chat | bench | router` with vLLM's flag names where they exist."""

from __future__ import annotations

import argparse
import logging
import sys

from strixlm.cli_args import port_number
from strixlm.config import EngineConfig


class CLIError(Exception):
    """A bad flag value: printed as one line naming the flag, exit code 2."""


def _positive_int(flag: str):
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} expects an integer, got {v!r}") from None
        if n <= 0:
            raise argparse.ArgumentTypeError(f"{flag} must be positive, got {n}")
        return n

    return parse


def add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        nargs="?",
        default=None,
        help="HF folder, .gguf file, or omit for the embedded SmolLM2-135M-Instruct",
    )
    p.add_argument("--model", dest="model_flag", default=None, help="same as the positional")
    p.add_argument("--tokenizer", default=None)
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "float16", "bfloat16", "half", "float", "bf16"],
    )
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-model-len", type=_positive_int("--max-model-len"), default=None)
    p.add_argument("--max-num-seqs", type=_positive_int("--max-num-seqs"), default=None)
    p.add_argument(
        "--max-num-batched-tokens", type=_positive_int("--max-num-batched-tokens"), default=None
    )
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument(
        "--kv-cache-memory",
        type=_positive_int("--kv-cache-memory"),
        default=512 << 20,
        help="bytes of KV cache on CPU (GPU sizes it from --gpu-memory-utilization)",
    )
    p.add_argument(
        "--num-gpu-blocks-override", type=_positive_int("--num-gpu-blocks-override"), default=None
    )
    p.add_argument("--block-size", type=_positive_int("--block-size"), default=16)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--load-format", default="auto", choices=["auto", "safetensors", "gguf", "dummy"]
    )
    p.add_argument("--served-model-name", default=None)
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="accepted for vLLM compatibility: strixlm runs its own model code",
    )
    p.add_argument(
        "--tensor-parallel-size",
        "-tp",
        type=_positive_int("--tensor-parallel-size"),
        default=1,
        help="GPUs per engine (only 1 is supported for now)",
    )
    p.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8", "fp8_e4m3"])
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    p.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="plan the next step while the device runs this one",
    )
    p.add_argument("--attention-backend", default="auto", choices=["auto", "torch", "triton"])
    p.add_argument("--skip-tokenizer-init", action="store_true")


def add_chat_parsing_args(p: argparse.ArgumentParser) -> None:
    from strixlm.parsers.reasoning import REASONING_PARSERS
    from strixlm.parsers.tools import TOOL_PARSERS

    p.add_argument(
        "--reasoning-parser",
        default=None,
        choices=sorted(REASONING_PARSERS),
        help="split model output into reasoning_content and content",
    )
    p.add_argument(
        "--tool-call-parser",
        default=None,
        choices=sorted(TOOL_PARSERS),
        help="the tool-call format the model writes",
    )
    p.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help="parse tool calls the model chooses to make (needs --tool-call-parser)",
    )


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    model = args.model_flag or args.model
    try:
        return EngineConfig.from_flat(
            model=model,
            tokenizer=args.tokenizer,
            dtype=args.dtype,
            max_model_len=args.max_model_len,
            load_format=args.load_format,
            seed=args.seed,
            served_model_name=args.served_model_name,
            trust_remote_code=args.trust_remote_code,
            tensor_parallel_size=args.tensor_parallel_size,
            skip_tokenizer_init=args.skip_tokenizer_init,
            block_size=args.block_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            cpu_kv_cache_bytes=args.kv_cache_memory,
            num_gpu_blocks_override=args.num_gpu_blocks_override,
            enable_prefix_caching=args.enable_prefix_caching,
            kv_cache_dtype=args.kv_cache_dtype,
            max_num_seqs=args.max_num_seqs or 256,
            max_num_batched_tokens=args.max_num_batched_tokens or 8192,
            enable_chunked_prefill=args.enable_chunked_prefill,
            device=args.device,
            enforce_eager=args.enforce_eager,
            async_scheduling=args.async_scheduling,
            attention_backend=args.attention_backend,
        )
    except ValueError as e:
        raise CLIError(str(e)) from None


def _serve(args: argparse.Namespace) -> None:
    from strixlm.entrypoints.openai.api_server import run_server
    from strixlm.entrypoints.openai.chat_parsing import ChatParsingOptions

    try:
        parsing = ChatParsingOptions(
            reasoning_parser=args.reasoning_parser,
            tool_call_parser=args.tool_call_parser,
            enable_auto_tool_choice=args.enable_auto_tool_choice,
        )
    except ValueError as e:
        raise CLIError(str(e)) from None
    run_server(engine_config_from_args(args), args, parsing)


def _generate(args: argparse.Namespace) -> None:
    from strixlm.engine.request import SamplingParams
    from strixlm.entrypoints.llm import LLM

    prompts = args.prompt or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not prompts:  # before the model loads: nothing to generate is a usage error
        print(
            "strixlm generate: error: no prompt: give --prompt TEXT (repeatable) or pipe "
            "prompts on stdin, one a line",
            file=sys.stderr,
        )
        raise SystemExit(2)
    cfg = engine_config_from_args(args)
    llm = LLM.from_config(cfg)
    params = SamplingParams(
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        top_p=args.top_p,
        seed=args.sampling_seed,
    )
    outs = (
        llm.chat([[{"role": "user", "content": p}] for p in prompts], params)
        if args.chat
        else llm.generate(prompts, params)
    )
    for o in outs:
        print(o.outputs[0].text)


def _chat(args: argparse.Namespace) -> None:
    from strixlm.entrypoints.chat_cli import run_chat

    run_chat(args, engine_config_from_args)


def _bench(args: argparse.Namespace) -> None:
    args.bench_run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="strixlm", description="strixlm LLM engine")
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="OpenAI-compatible HTTP server")
    add_engine_args(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port_number, default=8000)
    serve.add_argument("--api-key", default=None)
    serve.add_argument("--log-stats-interval", type=float, default=10.0)
    add_chat_parsing_args(serve)
    serve.set_defaults(func=_serve)

    gen = sub.add_parser("generate", help="offline generation for prompts (args or stdin)")
    add_engine_args(gen)
    gen.add_argument("--prompt", action="append", default=None)
    gen.add_argument("--chat", action="store_true", help="wrap prompts in the chat template")
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--max-tokens", type=_positive_int("--max-tokens"), default=128)
    gen.add_argument("--sampling-seed", type=int, default=None)
    gen.set_defaults(func=_generate)

    chat = sub.add_parser("chat", help="terminal chat against a server or in-process")
    add_engine_args(chat)
    chat.add_argument("--url", default=None, help="server base URL, e.g. http://127.0.0.1:8000/v1")
    chat.add_argument("--api-key", default=None)
    chat.add_argument("--system", default=None)
    chat.add_argument("--temperature", type=float, default=0.7)
    chat.add_argument("--max-tokens", type=_positive_int("--max-tokens"), default=512)
    chat.set_defaults(func=_chat)

    from strixlm.router.cli import add_router_parser

    add_router_parser(sub)

    bench = sub.add_parser("bench", help="benchmarks")
    bsub = bench.add_subparsers(dest="bench_command", required=True)
    from strixlm.benchmarks import latency as bench_latency
    from strixlm.benchmarks import serve as bench_serve
    from strixlm.benchmarks import throughput as bench_tp

    for name, mod in (("throughput", bench_tp), ("latency", bench_latency), ("serve", bench_serve)):
        bp = bsub.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0])
        mod.add_args(bp)
        bp.set_defaults(func=_bench, bench_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(levelname)s %(asctime)s %(message)s",
    )
    try:
        args.func(args)
    except CLIError as e:
        parser.exit(2, f"strixlm: error: {e}\n")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: CLIError raised by modules
    # that import strixlm.entrypoints.cli must be the class main() catches.
    from strixlm.entrypoints.cli import main as _main

    _main()
