from learntok.hf.modeling import LearntokForCausalLM  # noqa: F401
