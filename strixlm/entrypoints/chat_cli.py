"""`strixlm chat`: a terminal chat, against a running server (--url) or in-process."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterator

import httpx

from strixlm.config import EngineConfig


def _api_base(http: httpx.Client, url: str) -> tuple[str, str]:
    """(the OpenAI API base, the first served model). A server URL without its /v1 works
    too: `strixlm chat --url http://127.0.0.1:8000`."""
    base = url.rstrip("/")
    tried = []
    for candidate in (base, f"{base}/v1") if not base.endswith("/v1") else (base,):
        try:
            resp = http.get(f"{candidate}/models")
        except httpx.TransportError as e:
            raise RuntimeError(
                f"cannot reach the server at {url} ({e}); is `strixlm serve` running there?"
            ) from None
        if resp.status_code == 200:
            try:
                return candidate, resp.json()["data"][0]["id"]
            except (ValueError, KeyError, IndexError, TypeError):
                pass
        elif resp.status_code != 404:  # a server that said why (a wrong --api-key: 401)
            raise RuntimeError(_error_message(resp))
        tried.append(f"GET {candidate}/models: HTTP {resp.status_code}")
    raise RuntimeError(
        f"no OpenAI-compatible server at {url} ({'; '.join(tried)}); give --url the server's "
        "API base, e.g. http://127.0.0.1:8000/v1"
    )


def _error_message(resp: httpx.Response) -> str:
    """An OpenAI error object's message, else the body as it came."""
    try:
        return resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return f"HTTP {resp.status_code}: {resp.text[:200]}"


class _Server:
    """The running server a chat talks to: one HTTP client for the session, and the API
    base and model found on the first message (looked up again while that fails)."""

    def __init__(self, url: str, api_key: str | None, model: str | None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(timeout=None, headers=headers)
        self.url, self.model = url, model
        self.base: str | None = None

    def stream(self, messages: list[dict], temperature: float, max_tokens: int) -> Iterator[str]:
        if self.base is None:
            base, first_model = _api_base(self.http, self.url)
            self.base, self.model = base, self.model or first_model
        body = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "temperature": temperature,
            "max_tokens": max_tokens,
        }
        with self.http.stream("POST", f"{self.base}/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                resp.read()
                raise RuntimeError(_error_message(resp))
            for line in resp.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:  # an error after the stream started
                    raise RuntimeError(chunk["error"].get("message", str(chunk["error"])))
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
    llm = server = None
    # httpx logs each request at INFO: noise between the prompt and the reply.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.url is None:
        from strixlm.entrypoints.llm import LLM

        llm = LLM.from_config(make_config(args))
    else:
        server = _Server(args.url, args.api_key, args.model_flag or args.model)
    try:
        _chat_loop(args, llm, server)
    finally:
        if server is not None:
            server.http.close()


def _chat_loop(args: argparse.Namespace, llm, server: _Server | None) -> None:
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
        if server is not None:
            stream = server.stream(messages, args.temperature, args.max_tokens)
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
