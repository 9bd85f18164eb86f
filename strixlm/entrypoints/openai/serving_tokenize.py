"""/tokenize and /detokenize, as vLLM serves them: the server's own tokenizer and chat
template, so a client can count a prompt's tokens (or see what a chat renders to) before
sending it, and turn token ids (from logprobs, or its own) back into text."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from strixlm.engine.processor import vocab_error
from strixlm.entrypoints.openai.chat_parsing import plan_tools
from strixlm.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from strixlm.entrypoints.openai.serving import APIError, ServingBase, parse_body, validate
from strixlm.entrypoints.openai.serving_chat import ServingChat


class ServingTokenize(ServingBase):
    def __init__(self, chat: ServingChat) -> None:
        super().__init__(chat.client)
        self.chat = chat  # renders messages exactly as a chat completion would

    def tokenizer(self):
        tok = self.client.info.tokenizer
        if tok is None:
            raise APIError("this model was loaded without a tokenizer")
        return tok

    async def tokenize(self, raw: Request) -> JSONResponse:
        req = await parse_body(raw, TokenizeRequest)
        self.check_model(req.model)
        tok = self.tokenizer()
        if (req.prompt is None) == (req.messages is None):
            raise APIError("send either prompt or messages", param="prompt")
        if req.messages is not None:
            fields = ("messages", "tools", "chat_template_kwargs", "add_generation_prompt")
            chat = validate(
                {f: getattr(req, f) for f in (*fields, "continue_final_message")},
                ChatCompletionRequest,
            )
            ids, text = self.chat.render(chat, plan_tools(chat, self.chat.parsing))
            if req.add_special_tokens:  # the template's text with the tokenizer's own added
                ids = tok.encode(text, add_special_tokens=True)
        else:
            add = True if req.add_special_tokens is None else req.add_special_tokens
            ids = tok.encode(req.prompt, add_special_tokens=add)
        resp = TokenizeResponse(
            count=len(ids),
            max_model_len=self.client.info.max_model_len,
            tokens=ids,
            token_strs=tok.convert_ids_to_tokens(ids) if req.return_token_strs else None,
        )
        return JSONResponse(resp.model_dump(exclude_none=True))

    async def detokenize(self, raw: Request) -> JSONResponse:
        req = await parse_body(raw, DetokenizeRequest)
        self.check_model(req.model)
        tok = self.tokenizer()
        if msg := vocab_error(req.tokens, self.client.info.vocab_size):
            raise APIError(msg, param="tokens")
        return JSONResponse(DetokenizeResponse(prompt=tok.decode(req.tokens)).model_dump())
