"""Data: byte vocabulary, corpora, splits and batches."""
from learntok.data.vocab import BOS, EOS, PAD, VOCAB_SIZE, decode, encode

__all__ = ["BOS", "EOS", "PAD", "VOCAB_SIZE", "decode", "encode"]
