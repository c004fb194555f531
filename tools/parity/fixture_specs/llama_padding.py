"""Llama whose `pad_token_id` occurs in the text: transformers builds
`nn.Embedding(vocab, hidden, padding_idx=pad_token_id)`, so that row of the embedding gets no
gradient from the lookup (as when pad = eos, a common choice, and EOS tokens are trained). The
reference batch (see `make_batch`) holds token 53 at row 0, position 2, unmasked and trained on;
padding positions still hold id 0 behind a zero attention mask. The head is tied, so row 53 still
gets the LM head's gradient: only the lookup's part is dropped."""

from make_fixtures import COMMON

SPECS = {
    "llama_padding": (
        "llama",
        {**COMMON, "num_key_value_heads": 2, "pad_token_id": 53, "tie_word_embeddings": True},
    ),
}
