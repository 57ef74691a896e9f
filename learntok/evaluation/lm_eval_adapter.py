"""lm-evaluation-harness adapter: a `learntok` model type (optional extra: `pip install -e '.[eval]'`).

Importing this module registers the model type with lm-eval. Run standard tasks with

    python -m learntok.evaluation.lm_eval_adapter --model learntok --model_args pretrained=RUN_DIR \
        --tasks piqa,arc_easy,lambada_openai --batch_size 16 --device cpu

(the same arguments as `lm_eval`; this entry point only imports the adapter first), or from
Python: `import learntok.evaluation.lm_eval_adapter; lm_eval.simple_evaluate(model="learntok", ...)`.

Requests are scored on bytes with `learntok.evaluation.tasks.score_requests`: the continuation's
UTF-8 bytes given BOS + the context's bytes (lm-eval's continuations carry their own leading
space). Model arguments: pretrained (run, checkpoint or model folder), device, batch_size,
seq_len (default: the run's train.seq_len), greedy_boundaries (p > 0.5 instead of sampling),
seed (boundary samples and generation).

loglikelihood_rolling scores a whole text in `eval`'s windows (seq_len - 1 bytes, each after its
own BOS; learntok.data.dataset.reading_windows), so a text's bits per byte here are `eval`'s and
those of lm-eval's `hf` backend on an export. generate_until uses `AUNet.generate` (temperature 0 = argmax).
Each request type shows a progress bar on stderr (learntok.util.progress). docs/evaluation.md has runnable
task files for each request type.
"""

from __future__ import annotations

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from learntok.run.checkpoint import load_run
from learntok.evaluation.tasks import rolling_windows, score_requests
from learntok.util.progress import Progress


@register_model("learntok")
class LearntokLM(LM):
    def __init__(
        self,
        pretrained: str,
        device: str | None = None,
        batch_size: int | str = 16,
        seq_len: int | None = None,
        greedy_boundaries: bool = False,
        seed: int = 0,
        **kwargs,
    ):
        super().__init__()
        self._device = torch.device(device or "cpu")
        self.model, run_cfg = load_run(pretrained, self._device)
        self.seq_len = int(seq_len or (run_cfg.train.seq_len if run_cfg is not None else 1024))
        self.batch_size = int(batch_size) if str(batch_size).isdigit() else 16  # "auto" -> 16
        self.greedy = str(greedy_boundaries).lower() in ("1", "true", "yes")
        self.seed = int(seed)

    def _score(self, pairs: list[tuple[bytes, bytes]], name: str) -> list[tuple[float, int, bool]]:
        return score_requests(
            self.model,
            pairs,
            batch_size=self.batch_size,
            seq_len=self.seq_len,
            greedy=self.greedy,
            seed=self.seed,
            device=self._device,
            progress=name,
        )

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        pairs = [(ctx.encode("utf-8"), cont.encode("utf-8")) for ctx, cont in (r.args for r in requests)]
        return [(ll, greedy) for ll, _, greedy in self._score(pairs, "loglikelihood")]

    def loglikelihood_rolling(self, requests) -> list[float]:
        pairs, owner = [], []
        for i, r in enumerate(requests):
            windows = rolling_windows(r.args[0].encode("utf-8"), self.seq_len)
            pairs += windows
            owner += [i] * len(windows)
        totals = [0.0] * len(requests)
        for i, (ll, _, _) in zip(owner, self._score(pairs, "loglikelihood_rolling")):
            totals[i] += ll
        return totals

    def generate_until(self, requests) -> list[str]:
        outputs = []
        for r in Progress(requests, desc="generate_until", unit="request"):
            context, kwargs = r.args
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else until
            temperature = float(kwargs.get("temperature", 0.0)) if kwargs.get("do_sample", False) else 0.0
            data, _ = self.model.generate(
                context,
                max_bytes=int(kwargs.get("max_gen_toks", 256)),
                temperature=temperature,
                seed=self.seed,
                boundaries="greedy" if self.greedy else "sample",
            )
            text = data.decode("utf-8", errors="replace")
            for stop in until:
                if stop and stop in text:
                    text = text[: text.index(stop)]
            outputs.append(text)
        return outputs


def main() -> None:
    """`lm_eval` with the learntok model type registered."""
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
