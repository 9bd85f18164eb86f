"""`strixlm chat`: a terminal chat, against a running server (--url) or in-process."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator

import httpx

from strixlm.config import EngineConfig


def _stream_from_server(
    url: str,
    api_key: str | None,
    model: str | None,
    messages: list[dict],
    temperature: float,
    max_tokens: int,
) -> Iterator[str]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    base = url.rstrip("/")
    with httpx.Client(timeout=None, headers=headers) as http:
        if model is None:
            model = http.get(f"{base}/models").json()["data"][0]["id"]
        body = {
            "model": model,
            "messages": messages,
            "stream": True,
            "temperature": temperature,
            "max_tokens": max_tokens,
        }
        with http.stream("POST", f"{base}/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                resp.read()
                raise RuntimeError(resp.json().get("error", {}).get("message", resp.text))
            for line in resp.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices", []):
                    text = choice.get("delta", {}).get("content")
                    if text:
                        yield text


def _stream_in_process(
    llm, messages: list[dict], temperature: float, max_tokens: int
) -> Iterator[str]:
    from strixlm.engine.request import SamplingParams

    engine = llm.engine
    tok = engine.tokenizer
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok.encode(prompt, add_special_tokens=False)
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens)
    engine.add_request(ids, params, kind="delta")
    while engine.has_unfinished():
        for out in engine.step():
            for c in out.outputs:
                if c.text:
                    yield c.text


def run_chat(
    args: argparse.Namespace, make_config: Callable[[argparse.Namespace], EngineConfig]
) -> None:
    llm = None
    if args.url is None:
        from strixlm.entrypoints.llm import LLM

        llm = LLM.from_config(make_config(args))
    messages: list[dict] = []
    if args.system:
        messages.append({"role": "system", "content": args.system})
    print("strixlm chat: type a message, /reset to start over, Ctrl-D to quit.", flush=True)
    while True:
        try:
            line = input("> ")
        except EOFError:
            print()
            return
        if not line.strip():
            continue
        if line.strip() == "/reset":
            messages = messages[:1] if args.system else []
            continue
        messages.append({"role": "user", "content": line})
        if llm is None:
            stream = _stream_from_server(
                args.url,
                args.api_key,
                args.model_flag or args.model,
                messages,
                args.temperature,
                args.max_tokens,
            )
        else:
            stream = _stream_in_process(llm, messages, args.temperature, args.max_tokens)
        reply = []
        try:
            for piece in stream:
                reply.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()
        except (RuntimeError, httpx.HTTPError) as e:
            print(f"\n[error] {e}", file=sys.stderr)
            messages.pop()
            continue
        print()
        messages.append({"role": "assistant", "content": "".join(reply)})
