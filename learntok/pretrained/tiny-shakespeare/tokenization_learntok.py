from learntok.hf.tokenizer import LearntokByteTokenizer  # noqa: F401
