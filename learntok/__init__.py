"""learntok: byte-level language models that learn their own tokenization end to end."""

__version__ = "0.1.0"

from learntok.model.aunet import AUNet, ModelOutput
from learntok.nn.config import ModelConfig
from learntok.objective import ObjectiveConfig
from learntok.tokenizer import Encoding, Tokenizer

__all__ = ["AUNet", "Encoding", "ModelConfig", "ModelOutput", "ObjectiveConfig", "Tokenizer"]
