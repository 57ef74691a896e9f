"""Paired comparison against `uniform`: per 255-byte window of the val/test split, the bits-per-byte
difference of each strategy from uniform (same windows, seeded samples); corpus-level mean and the
standard error over windows. Run from the repo root after the compare run in the README:
    PYTHONPATH=. python docs/results/paired_vs_uniform.py
"""
import torch, math, json
from learntok.model.aunet import AUNet
from learntok.config import load_config
from learntok.data import ByteData
from learntok.objective import token_ce
from learntok.runtime import isolated_rng
torch.set_num_threads(2)
cfg = load_config(file="runs/compare-tiny/learned/config.toml")
data = ByteData.from_config(cfg.data)
def per_window(name, split):
    m = AUNet.from_pretrained(f"runs/compare-tiny/{name}").eval()
    nats, n = [], []
    with torch.no_grad(), isolated_rng(0, torch.device("cpu")):
        for x, _ in data.eval_batches(split, 16, 256):
            ce, mask = token_ce(m(x).logits, x)
            nats.append(ce.sum(1)); n.append(mask.sum(1))
    return torch.cat(nats).double(), torch.cat(n).double()
out = {}
for split in ("val", "test"):
    base, nb = per_window("uniform", split)
    for name in ("learned", "whitespace", "bpe", "entropy", "nawrot", "hnet", "fixed"):
        a, na = per_window(name, split)
        d = (a - base) / (math.log(2) * na.clamp(min=1))        # per-window bpb difference
        w = na / na.sum()
        mean = float((a.sum() - base.sum()) / (math.log(2) * na.sum()))
        se = float(d.std() / math.sqrt(len(d)))
        out[f"{split}:{name}"] = (mean, se, len(d))
        print(split, name, f"{mean:+.4f} +- {se:.4f} ({len(d)} windows)", flush=True)
json.dump(out, open("/tmp/paired.json", "w"), indent=1)
