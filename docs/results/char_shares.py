"""Where a run's chunks sit on characters: per run, the share of chunks that are whole characters
and where their boundary bytes fall inside characters, per script class
(`learntok.text.display.whole_character_shares`), on the first 20 KB of the run's test split, cut by
`learntok.Tokenizer` (sampled cuts, seed 0, as training decides; and greedy).
Usage: python docs/results/char_shares.py OUT.json RUN [RUN ...]"""

import json
import sys

import torch

from learntok import Tokenizer
from provenance import git_commit

from learntok.data import ByteData
from learntok.text.display import whole_character_shares

torch.set_num_threads(1)
N_BYTES = 20_000
out, runs = sys.argv[1], sys.argv[2:]
results = {}
for run in runs:
    tok = Tokenizer.from_pretrained(run)
    data = ByteData.from_config(tok.run_cfg.data)
    text, n = [], 0
    for doc in data.documents("test"):
        text.append(doc[: N_BYTES - n])
        n += len(text[-1])
        if n >= N_BYTES:
            break
    text = b"".join(text)
    row = {"source": tok.run_cfg.data.source, "seed": tok.run_cfg.train.seed, "n_bytes": len(text)}
    for rule, greedy in (("sampled", False), ("greedy", True)):
        enc = tok.encode(text, greedy=greedy, seed=0)
        row[rule] = whole_character_shares(text, enc.chunks)
    results[run] = row
    print(run, json.dumps({k: v for k, v in row["sampled"].items()}), flush=True)
commit = git_commit()
report = {
    "command": "python docs/results/char_shares.py " + " ".join(sys.argv[1:]),
    "commit": commit,
    "seeds": sorted({row["seed"] for row in results.values()}),
    "runs": results,
}
with open(out, "w") as f:
    json.dump(report, f, indent=1)
