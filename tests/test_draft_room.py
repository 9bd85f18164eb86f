"""Room for speculative decoding in the state table: drafts feed a 1 + K token verification
step through the unchanged gather, and the acceptance result is applied on the device."""

from __future__ import annotations

import torch

from strixlm.engine.request import Request, SamplingParams
from strixlm.worker.input_batch import InputBuffers, gather_inputs
from strixlm.worker.states import RequestStateTable

BS = 4


def _table_with(prompts: dict[str, list[int]]) -> RequestStateTable:
    table = RequestStateTable(4, 64, 16, 1, "cpu")
    next_block = 1
    for rid, toks in prompts.items():
        nblk = min(-(-(len(toks) + 8) // BS), 16)
        blocks = [list(range(next_block, next_block + nblk))]
        next_block += nblk
        # Decode state: everything but the last token is computed.
        table.add(Request(rid, toks, SamplingParams(max_tokens=8)), blocks, len(toks) - 1)
    table.flush(list(table.rows.values()))
    return table


def test_drafts_become_verification_inputs_and_acceptance_applies_on_device():
    table = _table_with({"a": [10, 11, 12, 13, 14], "b": [20, 21, 22]})
    ra, rb = table.rows["a"], table.rows["b"]
    rows_dev = torch.tensor([ra, rb])
    drafts = torch.tensor([[901, 902, 903], [0, 0, 0]])
    table.write_drafts(rows_dev, drafts, torch.tensor([2, 0]))
    # Drafts sit after the known tokens without being counted as known.
    assert table.token_ids[ra, 5:7].tolist() == [901, 902]
    assert table.num_tokens[ra].item() == 5 and table.num_drafts.tolist()[ra] == 2
    assert table.num_tokens[rb].item() == 3

    bufs = InputBuffers(32, 4, "cpu", table.block_table.shape[-1])
    batch = gather_inputs(table, bufs, ["a", "b"], [1 + 2, 1], BS)
    # a verifies [last known token, draft 1, draft 2]; b is a plain decode.
    assert batch.input_ids.tolist() == [14, 901, 902, 22]
    assert batch.positions.tolist() == [4, 5, 6, 2]

    # The verifier accepted a's first draft and sampled 777 after it; b got 555.
    result = torch.tensor([[901, 777, 0], [555, 0, 0]])
    table.accept_tokens(rows_dev, result, torch.tensor([2, 1]))
    assert table.token_ids[ra, :7].tolist() == [10, 11, 12, 13, 14, 901, 777]
    assert table.token_ids[rb, :4].tolist() == [20, 21, 22, 555]
    assert table.num_tokens[rows_dev].tolist() == [7, 4]
    assert table.num_drafts[rows_dev].tolist() == [0, 0]
    table.sync_counts([ra, rb], [2, 1])
    assert table.num_tokens_cpu[[ra, rb]].tolist() == [7, 4]


def test_drafts_never_write_past_the_table():
    table = _table_with({"a": list(range(100, 163))})  # 63 tokens, table holds 64 + 1
    r = table.rows["a"]
    table.write_drafts(torch.tensor([r]), torch.tensor([[1, 2, 3, 4]]), torch.tensor([4]))
    assert table.token_ids[r, 63:].tolist() == [1, 2]  # columns 63 and 64 only
