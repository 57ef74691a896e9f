from learntok.hf.config import LearntokConfig  # noqa: F401
