"""`learntok eval-tasks`: zero-shot tasks from JSONL(.gz) files (the forms: docs/evaluation.md).

Two forms, told apart by the fields of each file's first record:
- multiple choice: `query`, `choices` (list of strings), `gold` (index of the right choice);
- continuation: `context`, `continuation` (LAMBADA style).

Every request is (context, continuation); only the continuation's bytes are scored, given
BOS + context. The delimiter between them is " " unless the context already ends in
whitespace (queries in piqa end with a newline; LAMBADA contexts end before the word's space);
it belongs to the continuation, so the same bytes are scored for every choice.

Reported: accuracy (highest summed log-likelihood), length-normalised accuracy (highest
log-likelihood per byte), and the bits per byte of the gold continuation: mean over examples
with its standard error, and corpus-level (sum of bits / sum of bytes). For continuation tasks,
accuracy is exact greedy match: every continuation byte is the argmax of the next-byte
distribution (lm-eval's `is_greedy`).

Boundaries: sampled, under a fixed seed (`seed`), like `learntok eval` and the paper's bpb; or
`greedy` (p > 0.5). With greedy decisions the context is cut the same way for every choice;
with sampled ones each row draws its own cut, which adds a little noise to accuracy.

Shapes: B batch, T bytes (BOS at t = 0), V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from learntok.run.checkpoint import figures_of, load_run_folder
from learntok.data.corpora import json_records
from learntok.data.dataset import reading_windows
from learntok.data.vocab import bos_rows
from learntok.util.errors import TaskError
from learntok.evaluation.metrics import finite_sums
from learntok.evaluation.statistics import mean_and_se
from learntok.util.files import open_input
from learntok.model.metrics import bits_per_byte
from learntok.util.progress import Progress
from learntok.util.runtime import autocast, inference
from learntok.util.json_toml import expect_fields

# The fields of each form and the kind of each (learntok.util.json_toml.expect_fields).
FORMS = {
    "multiple_choice": {"query": "a string", "choices": "a list of strings", "gold": "an integer"},
    "continuation": {"context": "a string", "continuation": "a string"},
}


@dataclass
class Example:
    context: str
    choices: list[str]  # one entry for continuation tasks
    gold: int


def read_task(path: str | Path) -> tuple[str, list[Example]]:
    """(form, examples) from a JSONL or JSONL.gz file."""
    path = Path(path)
    form, examples = None, []
    with open_input(path, "task file", TaskError) as f:  # a regular file; .gz decompressed
        for lineno, rec in json_records(f, str(path), TaskError):
            if form is None:
                form = "continuation" if "continuation" in rec or "context" in rec else "multiple_choice"
            examples.append(_example(rec, form, f"{path} line {lineno}"))
    if not examples:
        raise TaskError(f"task file {path} holds no examples")
    return form, examples


def _example(rec: dict, form: str, where: str) -> Example:
    for name in FORMS[form]:
        if name not in rec:
            raise TaskError(
                f"{where}: missing field {name!r} ({form.replace('_', ' ')} needs {', '.join(FORMS[form])})"
            )
    expect_fields(rec, FORMS[form], where, TaskError)
    # only the continuation's bytes are scored: an empty one would score nothing (or the delimiter alone)
    field = "continuation" if form == "continuation" else "choices"
    texts = [rec[field]] if form == "continuation" else rec[field]
    if not texts or "" in texts:
        raise TaskError(f"{where}: field {field!r} holds no text (empty): there is nothing to score")
    if form == "continuation":
        return Example(rec["context"], [rec["continuation"]], 0)
    choices, gold = rec["choices"], rec["gold"]
    if not 0 <= gold < len(choices):
        raise TaskError(f"{where}: field 'gold' {gold!r} is not an index into {len(choices)} choices")
    return Example(rec["query"], choices, gold)


def join(context: str, continuation: str, delimiter: str | bytes = " ") -> tuple[bytes, bytes]:
    """(context bytes, continuation bytes with the delimiter in front unless the context ends in
    whitespace or is empty). A str delimiter is UTF-8; bytes are taken as they are (the command
    line's, which need not be UTF-8)."""
    ctx = context.encode("utf-8")
    sep = delimiter.encode("utf-8") if isinstance(delimiter, str) else bytes(delimiter)
    return ctx, (b"" if not context or context[-1].isspace() else sep) + continuation.encode("utf-8")


def score_requests(
    model,
    requests: list[tuple[bytes, bytes]],
    batch_size: int = 16,
    seq_len: int = 1024,
    greedy: bool = False,
    seed: int = 0,
    device: torch.device | None = None,
    amp_dtype: torch.dtype | None = None,
    progress: str | None = None,
) -> list[tuple[float, int, bool]]:
    """For each (context, continuation) in bytes: (log-likelihood of the continuation in nats,
    its bytes, whether every byte is the argmax). Rows are BOS + context + continuation, cut from
    the left to seq_len (the continuation is kept whole when it fits), PAD on the right; batches
    are formed longest first and run under `seed`, so results are deterministic. With
    `progress`, a progress bar of that name over the requests."""
    device = device or next(model.parameters()).device
    order = sorted(range(len(requests)), key=lambda i: -sum(map(len, requests[i])))
    results: list[tuple[float, int, bool]] = [(0.0, 0, True)] * len(requests)
    bar = Progress(desc=progress, total=len(requests), unit="request", enabled=progress is not None)
    with inference(model, seed, device), bar:
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            x, cont = _rows([requests[j] for j in idx], seq_len)  # (B, T), (B, T-1) bool
            x, cont = x.to(device), cont.to(device)
            with autocast(device, amp_dtype):
                out = model(x, greedy=greedy)
            logp = torch.log_softmax(out.logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
            target = x[:, 1:]  # (B, T-1)
            ll = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1) * cont  # (B, T-1)
            hit = (logp.argmax(-1) == target) | ~cont
            for j, s, n, g in zip(idx, ll.sum(1).tolist(), cont.sum(1).tolist(), hit.all(1).tolist()):
                results[j] = (s, int(n), bool(g))
            bar.update(len(idx))
    return results


def rolling_windows(data: bytes, seq_len: int) -> list[tuple[bytes, bytes]]:
    """(context, window) pairs that score every byte of `data` once: `eval`'s windows
    (learntok.data.dataset.reading_windows), each of seq_len - 1 bytes after its own BOS and no
    context, so a text scored here has the bits per byte `eval` gives it."""
    _, start, size = reading_windows(np.array([len(data)]), seq_len)
    return [(b"", data[a : a + n]) for a, n in zip(start.tolist(), size.tolist())]


def _rows(pairs: list[tuple[bytes, bytes]], seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x (B, T) BOS + bytes + PAD, cont (B, T-1) True where the target is a continuation byte)."""
    seqs, n_cont = [], []
    for ctx, cont in pairs:
        keep = seq_len - 1
        cont = cont[-keep:]  # a continuation longer than a row: its tail
        seqs.append((ctx + cont)[-keep:])
        n_cont.append(len(cont))
    x = bos_rows(seqs)  # (B, T)
    cont = torch.zeros(len(seqs), x.size(1) - 1, dtype=torch.bool)
    for b, (s, n) in enumerate(zip(seqs, n_cont)):
        cont[b, len(s) - n : len(s)] = True  # targets t predict x[t+1]
    return x, cont


def evaluate_task(model, form: str, examples: list[Example], delimiter: str | bytes = " ", **score_kw) -> dict:
    """Accuracy, length-normalised accuracy and gold-continuation bpb (mean +- s.e., corpus)."""
    requests, owner = [], []
    for e_i, ex in enumerate(examples):
        for choice in ex.choices:
            requests.append(join(ex.context, choice, delimiter))
            owner.append(e_i)
    scores = score_requests(model, requests, **score_kw)
    per_ex: list[list[tuple[float, int, bool]]] = [[] for _ in examples]
    for e_i, s in zip(owner, scores):
        per_ex[e_i].append(s)
    acc, acc_norm, gold_nats, gold_bytes = [], [], [], []
    for ex, s in zip(examples, per_ex):
        ll = np.array([v[0] for v in s])
        n = np.array([max(v[1], 1) for v in s])
        if form == "continuation":
            acc.append(float(s[0][2]))
            acc_norm.append(float(s[0][2]))
        else:
            acc.append(float(np.argmax(ll) == ex.gold))
            acc_norm.append(float(np.argmax(ll / n) == ex.gold))
        gold_nats.append(-s[ex.gold][0])
        gold_bytes.append(s[ex.gold][1])
    nats, nbytes = finite_sums(np.array(gold_nats), "the gold continuations' bits per byte"), np.array(gold_bytes)
    per_example = bits_per_byte(nats, nbytes)
    bpb_mean, bpb_se = mean_and_se(per_example)
    acc_mean, acc_se = mean_and_se(np.array(acc))
    return {
        "form": form,
        "n": len(examples),
        "accuracy": acc_mean,
        "accuracy_se": acc_se,
        "accuracy_norm": float(np.mean(acc_norm)),
        "gold_bpb": bpb_mean,
        "gold_bpb_se": bpb_se,
        "gold_bpb_corpus": float(bits_per_byte(nats.sum(), nbytes.sum())),
        "gold_bytes": int(nbytes.sum()),
    }


@dataclass
class TasksRequest:
    """What `learntok eval-tasks` scores and how: the task files, the rows, the boundaries."""

    tasks: list[str]  # task files (JSONL, .gz too), each reported by its name without .jsonl(.gz)
    batch_size: int = 16  # rows per forward
    seq_len: int | None = None  # bytes per row, BOS included (None: the run's, else 1024)
    greedy: bool = False  # boundaries p > 0.5 instead of sampled
    seed: int = 0  # of the sampled boundaries
    limit: int | None = None  # the first N examples of each task (None: all)
    delimiter: str | bytes = " "  # between context and continuation (unless the context ends in whitespace)
    device: str = "cpu"


def run_tasks(path, request: TasksRequest) -> dict:
    """`learntok eval-tasks`: every task file, by its name without .jsonl(.gz)."""
    r = request
    model, run_cfg, run = load_run_folder(path, r.device)
    seq_len = r.seq_len or (run_cfg.train.seq_len if run_cfg is not None else 1024)
    report = {"boundaries": "greedy" if r.greedy else f"sampled (seed {r.seed})", "seq_len": seq_len, "tasks": {}}
    for task in r.tasks:
        form, examples = read_task(task)
        name = Path(task).name.removesuffix(".gz").removesuffix(".jsonl")
        with figures_of(run.folder):
            report["tasks"][name] = evaluate_task(
                model,
                form,
                examples[: r.limit],
                r.delimiter,
                batch_size=r.batch_size,
                seq_len=seq_len,
                greedy=r.greedy,
                seed=r.seed,
                device=torch.device(r.device),
                progress=name,
            )
    return report


def format_tasks(report: dict) -> str:
    lines = [f"{'task':<20} {'n':>6} {'acc':>14} {'acc_norm':>9} {'gold bpb':>16}"]
    for name, r in report["tasks"].items():
        lines.append(
            f"{name:<20} {r['n']:>6} {r['accuracy']:>7.4f}±{r['accuracy_se']:.4f} {r['accuracy_norm']:>9.4f} "
            f"{r['gold_bpb']:>8.4f}±{r['gold_bpb_se']:.4f}"
        )
    lines.append(f"boundaries: {report['boundaries']}")
    return "\n".join(lines)
