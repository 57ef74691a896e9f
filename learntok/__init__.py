"""learntok: byte-level language models that learn their own tokenization end to end."""
__version__ = "0.1.0"

from learntok.model.aunet import AUNet, ModelOutput
from learntok.nn.config import ModelConfig
from learntok.objective import ObjectiveConfig

__all__ = ["AUNet", "ModelConfig", "ModelOutput", "ObjectiveConfig"]
