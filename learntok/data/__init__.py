"""Data: byte vocabulary, corpora, splits and batches."""

from learntok.data.corpora import load_documents
from learntok.data.dataset import ByteData, DataConfig, small_split_warnings
from learntok.data.split import split_documents
from learntok.data.vocab import BOS, EOS, PAD, VOCAB_SIZE, decode, encode

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "VOCAB_SIZE",
    "ByteData",
    "DataConfig",
    "decode",
    "encode",
    "load_documents",
    "small_split_warnings",
    "split_documents",
]
