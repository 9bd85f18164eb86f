"""A tiny Llama trained (overfit) to answer a few scripted chats exactly, for end-to-end
tests of reasoning and tool-call parsing through a real server.

The model carries SmolLM2's tokenizer and a ChatML chat template of our own that renders
`tools`, assistant `tool_calls`, tool results and `enable_thinking` the way Qwen3-style
templates do. Each transcript is rendered with that template (so the server's prompt for
the same request is identical token for token) and the model is trained on the assistant
reply only, until greedy decoding reproduces every reply; that is checked with
transformers' own `generate` before the folder is cached under $STRIXLM_CACHE.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from strixlm import file_lock

VERSION = 1  # bump to retrain cached models after changing the recipe

CHAT_TEMPLATE = """\
{%- if tools -%}
<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}Functions you may call:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
To call one, answer with a <tool_call></tool_call> block.<|im_end|>
{% elif messages[0].role == 'system' -%}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
<|im_start|>assistant
{{ m.content or '' }}
{%- for call in m.tool_calls or [] %}<tool_call>
{{ {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}
</tool_call>{% endfor %}<|im_end|>
{% elif m.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% elif m.role != 'system' -%}
<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif -%}
{%- endif -%}
"""

# ---- tools (as a client sends them) ------------------------------------------------------
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "detailed": {"type": "boolean"},
            },
            "required": ["city"],
        },
    },
}
WRITE_FILE_TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a text file",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "mode": {"type": "integer"},
            },
            "required": ["path", "content"],
        },
    },
}
BOOK_TOOL = {
    "type": "function",
    "function": {
        "name": "book_table",
        "description": "Book a restaurant table",
        "parameters": {
            "type": "object",
            "properties": {
                "restaurant": {"type": "string"},
                "party": {
                    "type": "object",
                    "properties": {
                        "size": {"type": "integer"},
                        "seating": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "time": {"type": "string"},
            },
        },
    },
}

# ---- the scripted chats --------------------------------------------------------------------
MATH = [{"role": "user", "content": "What is 2 + 2?"}]
WEATHER = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]
WRITE = [{"role": "user", "content": "Save a hello world script to hello.py"}]
BOOK = [{"role": "user", "content": "Book a table for 4 at Chez Nous at 7pm, by the window."}]
WEATHER_ARGS = {"city": "Paris", "days": 3, "detailed": True}
WEATHER_FOLLOWUP = WEATHER + [
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": WEATHER_ARGS},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 22 C"},
]

HELLO_PY = 'def main():\n    print("hello")\n'


@dataclass(frozen=True)
class Script:
    name: str
    messages: list[dict[str, Any]]
    reply: str  # the raw assistant text, as the model writes it (before <|im_end|>)
    tools: list[dict[str, Any]] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


SCRIPTS = [
    Script(
        "think",
        MATH,
        "<think>\nTwo plus two is four.\n</think>\n\nThe answer is 4.",
    ),
    Script("no_think", MATH, "The answer is 4.", kwargs={"enable_thinking": False}),
    Script(
        "weather_xml",
        WEATHER,
        "<think>\nI call get_weather.\n</think>\n\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=detailed>\ntrue\n</parameter>\n"
        "</function>\n</tool_call>",
        tools=[WEATHER_TOOL],
    ),
    Script(
        "math_with_tools",
        MATH,
        "<think>\nNo tool needed.\n</think>\n\nThe answer is 4.",
        tools=[WEATHER_TOOL],
    ),
    Script(
        "write_xml",
        WRITE,
        "<think>\nI call write_file.\n</think>\n\n"
        "I will write the file.\n\n<tool_call>\n<function=write_file>\n"
        f"<parameter=path>\nhello.py\n</parameter>\n<parameter=content>\n{HELLO_PY}\n"
        "</parameter>\n<parameter=mode>\n644\n</parameter>\n</function>\n</tool_call>",
        tools=[WRITE_FILE_TOOL, WEATHER_TOOL],
    ),
    Script(
        "book_hermes",
        BOOK,
        '<tool_call>\n{"name": "book_table", "arguments": {"restaurant": "Chez Nous", '
        '"party": {"size": 4, "seating": ["window", "quiet"]}, "time": "19:00"}}\n</tool_call>',
        tools=[BOOK_TOOL],
    ),
    Script(
        "weather_followup",
        WEATHER_FOLLOWUP,
        "<think>\nIt is sunny.\n</think>\n\nSunny and 22 C.",
        tools=[WEATHER_TOOL],
    ),
]

# Model and training recipe: about 90 full-batch steps, a few CPU seconds.
MODEL = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
)
MAX_STEPS = 400
LR = 6e-3
# Training stops once every reply token leads the runner-up by this many logits, far more
# than the rounding differences between transformers and strixlm's kernels.
MARGIN = 3.0


def render(tokenizer, script: Script) -> str:
    return tokenizer.apply_chat_template(
        script.messages,
        tools=script.tools,
        tokenize=False,
        add_generation_prompt=True,
        **script.kwargs,
    )


def _fingerprint() -> str:
    blob = json.dumps(
        [VERSION, CHAT_TEMPLATE, [s.__dict__ for s in SCRIPTS], MODEL, MAX_STEPS, LR, MARGIN],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _examples(tokenizer) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, reply ids + <|im_end|>) per script, tokenized as the server does."""
    out = []
    for s in SCRIPTS:
        prompt = tokenizer.encode(render(tokenizer, s), add_special_tokens=False)
        reply = tokenizer.encode(s.reply, add_special_tokens=False) + [tokenizer.eos_token_id]
        out.append((prompt, reply))
    return out


def _train(model, examples: list[tuple[list[int], list[int]]], pad_id: int) -> None:
    """Teacher-forced training on the replies. Only the few hundred token ids the scripts
    use take part (a compact vocabulary), so a step costs milliseconds instead of a pass
    over SmolLM2's 49k-wide embedding; `_expand` puts the rows back at their real ids."""
    seqs = [p + r for p, r in examples]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    rows, cols, targets = [], [], []
    for i, ((p, r), s) in enumerate(zip(examples, seqs, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        for j in range(len(r)):  # the hidden state at position t predicts token t + 1
            rows.append(i)
            cols.append(len(p) + j - 1)
            targets.append(r[j])
    rows_t, cols_t, tgt = torch.tensor(rows), torch.tensor(cols), torch.tensor(targets)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    # Every token outside the scripts gets logit 0 in the expanded model (zero lm_head
    # rows): train against one constant 0 logit so the right token always beats them.
    zero = torch.zeros(len(rows), 1)
    model.train()
    for _ in range(MAX_STEPS):
        hidden = model.model(input_ids=ids, attention_mask=attn).last_hidden_state
        logits = torch.cat([model.lm_head(hidden[rows_t, cols_t]), zero], dim=1)
        if _margin(logits.detach(), tgt) >= MARGIN:
            break  # teacher-forced argmax right everywhere: greedy decoding reproduces it
        loss = torch.nn.functional.cross_entropy(logits, tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    else:
        raise RuntimeError(f"scripted model did not converge in {MAX_STEPS} steps")
    model.eval()


def _margin(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """The smallest lead of the right token's logit over the best other one."""
    right = logits.gather(1, targets[:, None])[:, 0]
    others = logits.scatter(1, targets[:, None], float("-inf")).amax(dim=1)
    return float((right - others).min())


def _expand(compact, used: list[int], vocab_size: int):
    """The compact model with its embedding and lm_head rows moved to the real token ids."""
    from transformers import LlamaForCausalLM

    config = compact.config.to_dict()
    config["vocab_size"] = vocab_size
    full = LlamaForCausalLM(type(compact.config).from_dict(config))
    state = compact.state_dict()
    index = torch.tensor(used)
    for key in ("model.embed_tokens.weight", "lm_head.weight"):
        big = torch.zeros(vocab_size, state[key].shape[1])
        big[index] = state[key]
        state[key] = big
    full.load_state_dict(state)
    return full.eval()


def _check(model, examples: list[tuple[list[int], list[int]]], tokenizer) -> None:
    """transformers' greedy decoding must reproduce every reply exactly."""
    for s, (p, r) in zip(SCRIPTS, examples, strict=True):
        with torch.no_grad():
            out = model.generate(
                torch.tensor([p]),
                attention_mask=torch.ones(1, len(p), dtype=torch.long),
                max_new_tokens=len(r) + 4,
                do_sample=False,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.eos_token_id,
            )
        got = out[0, len(p) :].tolist()
        if got != r:
            raise RuntimeError(
                f"scripted model did not learn {s.name!r}: got {tokenizer.decode(got)!r}"
            )


def build_scripted_model(out: Path, tokenizer_src: str) -> None:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_src)
    tokenizer.chat_template = CHAT_TEMPLATE
    examples = _examples(tokenizer)
    eos = tokenizer.eos_token_id
    used = sorted({t for p, r in examples for t in p + r} | {eos})
    compact_id = {t: i for i, t in enumerate(used)}
    compact_examples = [
        ([compact_id[t] for t in p], [compact_id[t] for t in r]) for p, r in examples
    ]
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(used),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=eos,
        tie_word_embeddings=False,  # the expanded lm_head has zero rows, the embedding not
        **MODEL,
    )
    compact = LlamaForCausalLM(config)
    _train(compact, compact_examples, compact_id[eos])
    model = _expand(compact, used, len(tokenizer))
    _check(model, examples, tokenizer)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def scripted_model_dir(tokenizer_src: str) -> str:
    """The trained model's folder, built once per recipe and cached under $STRIXLM_CACHE."""
    root = Path(os.environ.get("STRIXLM_CACHE", Path.home() / ".cache" / "strixlm"))
    final = root / "scripted-chat" / _fingerprint()
    with file_lock.exclusive(final):  # another worker building it: wait, then reuse
        if not (final / "config.json").exists():
            _build_into(final, tokenizer_src)
    return str(final)


def _build_into(final: Path, tokenizer_src: str) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="building-", dir=final.parent))
    try:
        start = time.monotonic()
        build_scripted_model(tmp, tokenizer_src)
        print(f"trained the scripted chat model in {time.monotonic() - start:.1f}s")
        try:
            tmp.rename(final)  # atomic: a concurrent build that won leaves its copy
        except OSError:
            if not (final / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
