"""Parsers that split generated text into reasoning, content and tool calls.

`reasoning/` knows where each model family's thinking ends (`<think>...</think>`);
`tools/` turns the tool-call markup a family emits into OpenAI tool calls. Both work on a
complete text and incrementally on streamed text deltas, with the same result.
"""
