"""learntok through `transformers` (optional extra: `pip install -e '.[hf]'`; docs/transformers.md).

Importing this package registers learntok's classes with the Auto classes, in this process (no
code is fetched, nothing needs `trust_remote_code`):

    import learntok.hf
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained("runs/a/checkpoints/step_0001500")   # a learntok folder
    tok = AutoTokenizer.from_pretrained("runs/a/checkpoints/step_0001500")
    out = model.generate(**tok("ROMEO.", return_tensors="pt"), max_new_tokens=50, do_sample=False)

AutoConfig / AutoModelForCausalLM.from_pretrained read any folder whose config.json says
`"model_type": "learntok"`: every model and checkpoint folder learntok writes, and the folders
`learntok export` and `save_pretrained` write. A run folder, a shipped name ("learntok/tiny-shakespeare":
the Auto classes would look it up on the Hub) or a folder an older learntok wrote load through
`LearntokForCausalLM.from_pretrained` (or `learntok export` first; a shipped model's folder is
`learntok.util.shipped.shipped_folder(name)`).
"""

from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from learntok.hf.config import LearntokConfig
from learntok.hf.export import export, write_export
from learntok.hf.modeling import LearntokCausalLMOutput, LearntokForCausalLM
from learntok.hf.tokenizer import LearntokByteTokenizer

AutoConfig.register(LearntokConfig.model_type, LearntokConfig, exist_ok=True)
AutoModelForCausalLM.register(LearntokConfig, LearntokForCausalLM, exist_ok=True)
AutoTokenizer.register(LearntokConfig, slow_tokenizer_class=LearntokByteTokenizer, exist_ok=True)

__all__ = [
    "LearntokByteTokenizer",
    "LearntokCausalLMOutput",
    "LearntokConfig",
    "LearntokForCausalLM",
    "export",
    "write_export",
]
