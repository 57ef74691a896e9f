"""The byte vocabulary's ids: the 256 byte values, then BOS, EOS and PAD; the embedding table is
padded to a multiple of 64. Imports nothing: the model's config reads its sizes here, and the
vocabulary's functions (learntok.data.vocab) build on it."""

BOS = 256
EOS = 257
PAD = 258
N_SYMBOLS = 259
VOCAB_SIZE = 320  # N_SYMBOLS padded to a multiple of 64
