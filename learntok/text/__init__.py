"""Text and the model's chunks: how chunks are shown, windows of decisions, the tokenizer, segmentations and pages, sampling."""
