"""One convention for what a chunk is, the model's: token k is the encoder state at boundary byte
t_k (learntok.nn.pooling), which reads the bytes up to and including t_k, so the chunk it stands
for is the bytes after the previous boundary through t_k. The tokenizer, `segment`, the HTML page
and `sample --show-boundaries` all show that chunk; eval's references are named by it."""

from __future__ import annotations

import io

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from learntok import Tokenizer
from learntok.evaluation import boundary_quality as bq
from learntok.data import encode
from learntok.text.display import Chunk, chunk_starts, display_chunks, whole_character_shares
from learntok.nn.pooling import downsample
from learntok.text.sample import ChunkWriter
from conftest import tiny_model

SCRIPTS = {  # five scripts, each with a multi-byte character class of its own
    "latin": "Déjà vu, naïve café.",
    "cyrillic": "Съешь же ещё этих мягких булок.",
    "chinese": "学而时习之，不亦说乎。",
    "japanese": "吾輩は猫である。名前はまだ無い。",
    "emoji": "a😀b 🎉 done",
}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_a_chunk_ends_at_the_byte_its_token_pools(bits):
    """For any decisions, the chunks chunk_starts gives are exactly the spans the pooled tokens
    read: chunk k ends at the boundary byte of token k (pooling's pos, BOS at 0), and holds the
    bytes after the previous one. The trailing chunk is the one the model is still reading."""
    a_bytes = [int(b) for b in bits]
    a = torch.tensor([[1, *a_bytes]])  # (1, T): BOS always a boundary
    h = torch.arange(a.size(1), dtype=torch.float32).view(1, -1, 1)
    _, pos, valid = downsample(h, a, int(a.sum()))
    token_ends = [int(p) - 1 for p, v in zip(pos[0], valid[0]) if v][1:]  # data offsets; BOS's token reads BOS
    starts = chunk_starts(a_bytes)
    ends = [s - 1 for s in starts[1:]] + [len(a_bytes) - 1]
    assert starts[0] == 0
    assert [e for e in ends if a_bytes[e]] == token_ends
    assert all(a_bytes[e] for e in ends[:-1])  # every chunk but the open last one closes on a boundary


def test_word_rule_gives_word_space_tokens():
    """The whitespace rule puts its boundary at the space after a word: each token reads "word "."""
    tok = Tokenizer(tiny_model("whitespace"))
    assert tok.encode("the cat sat on it").tokens == ["the ", "cat ", "sat ", "on ", "it"]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
@pytest.mark.parametrize("greedy", [True, False])
def test_round_trip_and_convention_in_five_scripts(name, greedy):
    """In each script the chunks join to the text, and every chunk but the last ends at a byte the
    model decided was a boundary (and every boundary ends a chunk)."""
    model = tiny_model(target_rate=0.5)
    model.strategy.proj.weight.data.mul_(300)  # cuts often, inside characters too
    tok = Tokenizer(model)
    text = SCRIPTS[name]
    enc = tok.encode(text, greedy=greedy, seed=1)
    assert tok.decode(enc) == text
    rows = list(tok.decide([(0, 0, text.encode())], greedy, 1))
    dec = [a for d in rows for w in d.windows for a in w.decisions]
    assert [c.end - 1 for c in enc.chunks[:-1]] == [i for i, a in enumerate(dec) if a and i + 1 < len(dec)]


def test_sample_marks_the_same_chunks():
    """`sample --show-boundaries` closes a chunk after its boundary byte, as display_chunks does."""
    data = "ab cd ef".encode()
    flags = [0, 0, 1, 0, 0, 1, 0, 0]  # boundaries at the two spaces
    out = io.StringIO()
    w = ChunkWriter(out, show_boundaries=True)
    for byte, f in zip(data, flags):
        w.write(byte, bool(f))
    w.close()
    assert out.getvalue() == "|".join(c.text for c in display_chunks(data, chunk_starts(flags))) + "\n"
    assert out.getvalue() == "ab |cd |ef\n"


@pytest.mark.parametrize(
    "text, boundary_at, reference",
    [
        ("the cat sat", "e", "space_word"),  # a word's last letter: tokens " word"
        ("the cat sat", " ", "word_space"),  # the space after: tokens "word "
        ("the cat sat", "cs", "first_letter"),  # a word's first letter
    ],
)
def test_word_references_are_named_by_their_tokens(text, boundary_at, reference):
    x = encode(text).unsqueeze(0)
    data = text.encode()
    ref = bq.REFERENCES[reference](x)[0, 1:].tolist()  # per data byte
    if reference == "space_word":
        assert [data[i : i + 1] for i, r in enumerate(ref) if r] == [b"e", b"t"]
        chunks = display_chunks(data, chunk_starts(ref))
        assert [c.text for c in chunks] == ["the", " cat", " sat"]
    elif reference == "word_space":
        assert [c.text for c in display_chunks(data, chunk_starts(ref))] == ["the ", "cat ", "sat"]
    else:
        assert [c.text for c in display_chunks(data, chunk_starts(ref))] == ["the c", "at s", "at"]


@pytest.mark.parametrize(
    "text, ends",
    [("ab", [1, 1]), ("é", [0, 1]), ("学a", [0, 0, 1, 1]), ("😀", [0, 0, 0, 1]), ("aé学", [1, 0, 1, 0, 0, 1])],
)
def test_char_ends_marks_the_last_byte_of_every_character(text, ends):
    x = encode(text).unsqueeze(0)
    assert bq.char_ends(x)[0, 1:].int().tolist() == ends


def _chunks(data: bytes, cut_after: list[int]) -> list[Chunk]:
    return display_chunks(data, [0] + [i + 1 for i in cut_after if i + 1 < len(data)])


def test_whole_character_shares_per_script():
    """Three-byte characters cut after their last byte are whole; cut after their first are not."""
    data = "学而时习".encode()  # 4 three-byte characters
    whole = whole_character_shares(data, _chunks(data, [2, 5, 8]))
    assert whole == {"3-byte": {"chunks": 4, "whole_share": 1.0, "at_byte": {3: 1.0}}}
    inside = whole_character_shares(data, _chunks(data, [0, 3, 6]))
    assert inside["3-byte"]["whole_share"] == 0.0 and inside["3-byte"]["at_byte"] == {1: 0.75, 3: 0.25}
    mixed = "a学".encode()
    shares = whole_character_shares(mixed, _chunks(mixed, [0]))
    assert shares == {
        "ascii": {"chunks": 1, "whole_share": 1.0, "at_byte": {1: 1.0}},
        "3-byte": {"chunks": 1, "whole_share": 1.0, "at_byte": {3: 1.0}},
    }
