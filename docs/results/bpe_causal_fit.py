"""The rate `bpe-causal` cuts the test split at, with its merge count fitted on the BPE's own
training words (before) and on a held-out quarter of the fit sample (what `fit` does now).

    python docs/results/bpe_causal_fit.py --out docs/results/bpe-causal-fit.json

Built-in Shakespeare (the `tiny` preset's data), rho* = 0.2; no training, the boundaries of
`bpe-causal` depend on its tokenizer only.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from provenance import git_commit

from learntok.boundaries import bpe_causal as bc
from learntok.run.config import load_config
from learntok.data.dataset import FIT_BYTES, ByteData


def words_of(documents: list[bytes]) -> Counter:
    words = Counter()
    for doc in documents:
        words.update(bc.split_pretokens(doc))
    return words


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=float, default=0.2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    data = ByteData.from_config(load_config(preset="tiny").data)
    sample = data.sample_documents("train", FIT_BYTES)
    test = words_of(data.sample_documents("test", 1 << 30))
    own, own_info = bc.fit_bpe(bc.sample_words(sample), args.target)
    fit, held = bc.split_held_out(sample)
    new, new_info = bc.fit_bpe(bc.sample_words(fit), args.target, held_out=bc.sample_words(held))
    record = {
        "target_rate": args.target,
        "fit_bytes": sum(map(len, sample)),
        "fitted_on_own_words": {**own_info, "test_rate": bc.causal_rate(own, test)},
        "fitted_on_held_out": {
            **new_info,
            "held_out_bytes": sum(map(len, held)),
            "test_rate": bc.causal_rate(new, test),
        },
        "command": "python docs/results/bpe_causal_fit.py --out docs/results/bpe-causal-fit.json",
        "commit": git_commit(),
        "seeds": "not recorded: no training and no sampling, so no seed",
    }
    print(json.dumps(record, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=2)


if __name__ == "__main__":
    main()
