"""A model shared on the Hugging Face Hub: a repo id resolves through huggingface_hub's cache, as
`transformers` resolves one, for every reader (the Auto classes, LearntokForCausalLM, learntok's
Tokenizer and AUNet, the commands), in a fresh process with HF_HUB_OFFLINE=1 and a cache laid out
in a temporary folder (no test reaches a hub); and a push goes through huggingface_hub's upload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

pytest.importorskip("transformers", reason="the hf extra")
pytest.importorskip("huggingface_hub")

REPO = "someuser/learntok-tiny"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(tmp: Path, source: str = "tiny-shakespeare") -> Path:
    """A huggingface_hub cache holding REPO at COMMIT: an export of a shipped model, laid out as
    snapshot_download leaves it (models--owner--name/{refs/main, snapshots/COMMIT/...})."""
    from learntok.hf import export

    cache = tmp / "hub"
    repo = cache / f"models--{REPO.replace('/', '--')}"
    export(source, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return cache


def offline_env(cache: Path) -> dict:
    return {
        **os.environ, "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "home"), "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
    }  # fmt: skip


LOADS = """
import torch
import learntok.hf
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from learntok import AUNet, Tokenizer
from learntok.hf import LearntokForCausalLM
repo = {repo!r}
config = AutoConfig.from_pretrained(repo, trust_remote_code=True)
tok = AutoTokenizer.from_pretrained(repo, trust_remote_code=True)
auto = AutoModelForCausalLM.from_pretrained(repo, trust_remote_code=True)
direct = LearntokForCausalLM.from_pretrained(repo)
native = AUNet.from_pretrained(repo)
shipped = AUNet.from_pretrained("tiny-shakespeare")
same = all(torch.equal(a, b) for a, b in zip(native.state_dict().values(), shipped.state_dict().values()))
ids = tok("ROMEO: ", return_tensors="pt")
text = tok.decode(auto.generate(**ids, max_new_tokens=12, do_sample=False)[0])
import json
print(json.dumps([type(config).__name__, type(direct).__name__, same, text, len(Tokenizer.from_pretrained(repo).encode("to be or not"))]))
"""


def test_a_hub_repo_id_loads_from_the_cache_in_a_fresh_process(tmp_path):
    env = offline_env(hub_cache(tmp_path))
    r = subprocess.run(
        [sys.executable, "-c", LOADS.format(repo=REPO)], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-3000:]
    config, model, same, text, n = json.loads(r.stdout.splitlines()[-1])
    assert (config, model, same) == ("LearntokConfig", "LearntokForCausalLM", True)
    assert text.startswith("ROMEO: ") and len(text) > len("ROMEO: ") and n > 0


OLD = "fedcba9876543210fedcba9876543210fedcba98"
MULTI = "someuser/learntok-multi"


@pytest.fixture(scope="module")
def revisions(tmp_path_factory):
    """A cache whose REPO's main is tiny-python, with tiny-shakespeare at OLD (branch v1), and
    MULTI holding tiny-chinese in its subfolder `zh`."""
    from learntok.hf import export

    cache = tmp_path_factory.mktemp("revisions") / "hub"
    repo, multi = cache / f"models--{REPO.replace('/', '--')}", cache / f"models--{MULTI.replace('/', '--')}"
    export("tiny-python", repo / "snapshots" / COMMIT)
    export("tiny-shakespeare", repo / "snapshots" / OLD)
    export("tiny-chinese", multi / "snapshots" / COMMIT / "zh")
    for folder, refs in ((repo, {"main": COMMIT, "v1": OLD}), (multi, {"main": COMMIT})):
        (folder / "refs").mkdir(parents=True)
        for name, commit in refs.items():
            (folder / "refs" / name).write_text(commit)
    return cache


@pytest.mark.parametrize("auto", [True, False], ids=["Auto", "LearntokForCausalLM"])
@pytest.mark.parametrize(
    "repo, options, shipped",
    [
        (REPO, {}, "tiny-python"),
        (REPO, {"revision": "main"}, "tiny-python"),
        (REPO, {"revision": "v1"}, "tiny-shakespeare"),
        (REPO, {"revision": OLD}, "tiny-shakespeare"),
        (MULTI, {"subfolder": "zh"}, "tiny-chinese"),
        (MULTI, {"subfolder": "zh", "revision": COMMIT}, "tiny-chinese"),
    ],
)
def test_the_hubs_keywords_select_what_loads(revisions, auto, repo, options, shipped):
    """revision (a branch or a commit), subfolder and cache_dir select the weights, as they select
    the config and the tokenizer in `transformers`, never the default branch instead."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from learntok import AUNet
    from learntok.hf import LearntokByteTokenizer, LearntokForCausalLM

    where = {"cache_dir": str(revisions), "local_files_only": True, **options}
    model = (AutoModelForCausalLM if auto else LearntokForCausalLM).from_pretrained(repo, **where)
    want = AUNet.from_pretrained(shipped).state_dict()
    assert want.keys() == model.aunet.state_dict().keys()
    assert all(torch.equal(a, want[k]) for k, a in model.aunet.state_dict().items())
    assert type(AutoTokenizer.from_pretrained(repo, **where)) is LearntokByteTokenizer


def test_a_revision_not_in_the_cache_is_one_error(revisions):
    from learntok.hf import LearntokForCausalLM
    from learntok.util.errors import CheckpointError

    with pytest.raises(CheckpointError, match="at revision 'nope'"):
        LearntokForCausalLM.from_pretrained(REPO, cache_dir=str(revisions), local_files_only=True, revision="nope")


def test_the_commands_read_a_hub_repo_id(tmp_path):
    env = offline_env(hub_cache(tmp_path))
    r = subprocess.run(
        [sys.executable, "-m", "learntok", "eval", REPO, "--source", "shakespeare", "--max-bytes", "4096", "--threads", "1"],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "bits per byte" in r.stdout or "bpb" in r.stdout


@pytest.mark.parametrize("name", ["someuser/not-cached", "runs/typo"])
def test_a_repo_id_not_in_the_cache_is_one_line(tmp_path, name):
    env = offline_env(hub_cache(tmp_path))
    r = subprocess.run(
        [sys.executable, "-m", "learntok", "eval", name], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "does not exist here" in r.stderr and "HF_HUB_OFFLINE" in r.stderr


def test_a_local_folder_wins_over_a_repo_of_the_same_name(tmp_path):
    from learntok.util.shipped import hub_folder

    (tmp_path / "someuser" / "learntok-tiny").mkdir(parents=True)
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert hub_folder(REPO) is None
    finally:
        os.chdir(cwd)
    assert run_cli("eval", REPO, cwd=tmp_path).returncode == 2  # the folder is read (and holds no model)


@pytest.fixture
def hub_calls(monkeypatch):
    """huggingface_hub's API intercepted: what a push would send, and nothing sent."""
    import huggingface_hub

    calls = []

    def create_repo(self, repo_id, *args, **kwargs):
        calls.append(("create_repo", repo_id))
        named = repo_id if "/" in repo_id else f"me/{repo_id}"  # a bare name is the user's repo
        return huggingface_hub.RepoUrl(f"https://huggingface.co/{named}")

    def create_branch(self, repo_id, *, branch, **kwargs):
        calls.append(("create_branch", repo_id, branch))

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        calls.append(("upload_folder", repo_id, sorted(p.name for p in Path(folder_path).iterdir()), kwargs))

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "create_branch", create_branch)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    return calls


def test_push_to_hub_uploads_the_saved_folder_through_huggingface_hub(tmp_path, hub_calls):
    from learntok.hf import LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    model.save_pretrained(tmp_path / "out", push_to_hub=True, repo_id="me/tiny")
    model.push_to_hub("me/tiny2")
    files = ["README.md", "config.json", "model.safetensors", "tokenizer_config.json"]
    assert [c[:2] for c in hub_calls] == [
        ("create_repo", "me/tiny"), ("upload_folder", "me/tiny"), ("create_repo", "me/tiny2"), ("upload_folder", "me/tiny2"),
    ]  # fmt: skip
    assert all(set(files) <= set(c[2]) for c in hub_calls if c[0] == "upload_folder")


def test_a_push_from_a_trainers_output_dir_uploads_the_model_alone(tmp_path, hub_calls):
    from learntok.hf import LearntokForCausalLM
    from learntok.hf.export import EXPORT_FILES

    (tmp_path / "out" / "checkpoint-7").mkdir(parents=True)
    (tmp_path / "out" / "checkpoint-7" / "optimizer.pt").write_bytes(b"x")
    LearntokForCausalLM.from_pretrained("tiny-shakespeare").save_pretrained(
        tmp_path / "out", push_to_hub=True, repo_id="me/tiny"
    )
    (upload,) = [c for c in hub_calls if c[0] == "upload_folder"]
    assert upload[3]["allow_patterns"] == sorted(EXPORT_FILES) and "checkpoint-7" in upload[2]


def test_a_push_goes_where_transformers_would_push_it(tmp_path, hub_calls):
    """To the repo the Hub names for a bare name, to a branch (made first) or as a pull request."""
    from learntok.hf import LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    model.save_pretrained(tmp_path / "tiny", push_to_hub=True)
    model.push_to_hub("me/tiny", revision="dev", commit_description="why")
    model.push_to_hub("me/tiny", create_pr=True)
    uploads = [(c[1], c[3]) for c in hub_calls if c[0] == "upload_folder"]
    assert uploads[0][0] == "me/tiny" and "revision" not in uploads[0][1]
    assert ("create_branch", "me/tiny", "dev") in hub_calls
    assert uploads[1][1]["revision"] == "dev" and uploads[1][1]["commit_description"] == "why"
    assert uploads[2][1]["create_pr"] is True and [c for c in hub_calls if c[0] == "create_branch"] == [
        ("create_branch", "me/tiny", "dev")
    ]


@pytest.mark.parametrize(
    "kwargs, words",
    [({"safe_serialization": False}, "safetensors only"), ({"max_shard_size": "1KB"}, "max_shard_size"),
     ({"variant": "fp16"}, "unknown keyword")],
)  # fmt: skip
def test_save_pretrained_refuses_what_it_would_ignore(tmp_path, kwargs, words):
    from learntok.hf import LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    with pytest.raises((ValueError, TypeError), match=words):
        model.save_pretrained(tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_push_offline_is_one_clear_error_and_writes_nothing(tmp_path, monkeypatch):
    import huggingface_hub

    from learntok.hf import LearntokForCausalLM

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
        model.save_pretrained(tmp_path / "out", push_to_hub=True, repo_id="me/tiny")
    assert not (tmp_path / "out").exists()


def test_the_card_has_the_hubs_front_matter(tmp_path):
    import yaml

    from learntok.hf import LearntokForCausalLM, export

    folders = [export("tiny-python", tmp_path / "a")]
    LearntokForCausalLM.from_pretrained("tiny-shakespeare").save_pretrained(tmp_path / "b")
    folders.append(tmp_path / "b")
    for folder in folders:
        text = (folder / "README.md").read_text()
        meta = yaml.safe_load(text.split("---\n")[1])
        assert (
            meta["library_name"] == "learntok"
            and meta["license"] == "mit"
            and meta["pipeline_tag"] == "text-generation"
        )
        assert "learntok" in meta["tags"]
        assert "from_pretrained" in text
    metrics = yaml.safe_load((folders[0] / "README.md").read_text().split("---\n")[1])["model-index"][0]["results"][0][
        "metrics"
    ]
    assert {m["type"] for m in metrics} == {"bits_per_byte", "boundary_rate"}


@pytest.mark.parametrize("size", [400, 321, 258, 1, 0, -1])
def test_resize_token_embeddings_is_refused_before_any_change(tmp_path, size):
    import torch

    from learntok.hf import LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="nothing was changed"):
        model.resize_token_embeddings(size)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    model.save_pretrained(tmp_path / "m")
    assert (
        LearntokForCausalLM.from_pretrained(tmp_path / "m").aunet.embed.num_embeddings
        == before["aunet.embed.weight"].shape[0]
    )
    assert model.resize_token_embeddings(None) is model.aunet.embed


def test_from_pretrained_names_a_subfolder_of_the_wrong_type():
    from learntok.hf import LearntokForCausalLM

    with pytest.raises(TypeError, match="subfolder must be a folder's name"):
        LearntokForCausalLM.from_pretrained("tiny-shakespeare", subfolder=3)


@pytest.mark.parametrize("size", ["320", 320.0, True])
def test_resize_token_embeddings_names_a_wrong_type(size):
    from learntok.hf import LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    with pytest.raises(TypeError, match="new_num_tokens must be an integer or None"):
        model.resize_token_embeddings(size)


def test_resize_token_embeddings_to_the_tokenizers_size_keeps_the_model():
    """Fine-tuning scripts call resize_token_embeddings(len(tokenizer)) whatever they added: a size
    that every id fits (the tokenizer's 259 up to the table's rows) leaves the weights as they are."""
    import torch

    from learntok.hf import LearntokByteTokenizer, LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = model.aunet.embed.num_embeddings
    for size in (len(LearntokByteTokenizer()), rows, None):
        assert model.resize_token_embeddings(size) is model.aunet.embed
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before) and rows == 320


def test_one_trainer_step_through_labels_moves_the_policy_and_the_early_head(tmp_path):
    import torch
    from transformers import Trainer, TrainingArguments

    from learntok.hf import LearntokByteTokenizer, LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    tok = LearntokByteTokenizer()
    rows = [tok("To be, or not to be, that is the question: " * 2)["input_ids"][:64] for _ in range(4)]
    data = [{"input_ids": torch.tensor(r), "labels": torch.tensor(r)} for r in rows]
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    args = TrainingArguments(
        output_dir=str(tmp_path / "t"), max_steps=1, per_device_train_batch_size=4, learning_rate=1e-2,
        report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
    )  # fmt: skip
    Trainer(model=model, args=args, train_dataset=data).train()
    moved = {k for k, v in model.named_parameters() if not torch.equal(v.detach(), before[k])}
    assert any(k.startswith("aunet.strategy.") for k in moved), "the boundary policy got no update"
    assert any(k.startswith("aunet.early_head.") for k in moved), "the early-exit head got no update"
    assert moved == set(before)


def test_trainer_checkpoints_with_activation_checkpointing_and_resumes_from_them(tmp_path):
    """Trainer(gradient_checkpointing=True) saves a checkpoint every step through save_pretrained
    (with the state_dict it passes) and resume_from_checkpoint reads that checkpoint's weights
    back (the file holds the AUNet's names; the Trainer loads it with strict=False)."""
    import torch
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    from learntok.hf import LearntokByteTokenizer, LearntokForCausalLM

    tok = LearntokByteTokenizer()
    data = [tok(t) for t in ["To be, or not to be", "ROMEO: O, she doth teach", "abc", "JULIET: Good night"]]
    collate = DataCollatorForLanguageModeling(tok, mlm=False)

    def args(**kwargs):
        return TrainingArguments(
            output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2, learning_rate=1e-2,
            report_to=[], use_cpu=True, logging_strategy="no", **kwargs,
        )  # fmt: skip

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    trainer = Trainer(
        model=model, args=args(save_strategy="steps", save_steps=1, gradient_checkpointing=True),
        train_dataset=data, data_collator=collate, processing_class=tok,
    )  # fmt: skip
    trainer.train()
    assert model.is_activation_checkpointing
    checkpoints = {p: p.read_bytes() for p in (tmp_path / "out").glob("checkpoint-*/*") if p.is_file()}
    trainer.save_model()  # into output_dir, beside its checkpoints; twice, as scripts do
    trainer.save_model()
    final = LearntokForCausalLM.from_pretrained(tmp_path / "out")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), final.state_dict().values()))
    assert checkpoints and all(p.read_bytes() == data for p, data in checkpoints.items())
    saved = LearntokForCausalLM.from_pretrained(tmp_path / "out" / "checkpoint-2")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), saved.state_dict().values()))
    resumed = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    Trainer(model=resumed, args=args(save_strategy="no"), train_dataset=data, data_collator=collate).train(
        resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-2")
    )
    assert all(torch.equal(a, b) for a, b in zip(resumed.state_dict().values(), saved.state_dict().values()))


@pytest.mark.parametrize(
    "beside, written",
    [
        (["checkpoint-3/", "runs/", "training_args.bin", "trainer_state.json", "all_results.json"], True),
        (["checkpoint-3/", "notes.txt"], False),
        (["checkpoint-x/"], False),
        (["my-runs/"], False),
        (["model.safetensors/"], False),
    ],
)
def test_save_pretrained_writes_beside_a_trainers_outputs_alone(tmp_path, beside, written):
    """save_pretrained into a folder that holds a Trainer's outputs (its checkpoints, logs, state)
    writes the model's files beside them and leaves them as they are; a folder with anything else
    is refused, nothing touched."""
    from learntok.hf import LearntokForCausalLM
    from learntok.util.errors import OutputError

    folder = tmp_path / "out"
    for name in beside:
        (folder / name.rstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        if name.endswith("/"):
            (folder / name / "kept.txt").parent.mkdir(parents=True)
            (folder / name / "kept.txt").write_text("kept")
        else:
            (folder / name).write_text("kept")
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    if written:
        model.save_pretrained(folder)
        assert LearntokForCausalLM.from_pretrained(folder).aunet.embed.num_embeddings == 320
    else:
        with pytest.raises(OutputError, match="nothing was written"):
            model.save_pretrained(folder)
        assert {p for p in folder.rglob("*") if p.is_file()} == set(before)
    assert all(p.read_bytes() == data for p, data in before.items())


def test_activation_checkpointing_refuses_what_it_would_not_do():
    from learntok.hf import LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    for kwargs in ({"every_n_layers": 2}, {"offload": True}):
        with pytest.raises(ValueError, match="nothing was changed"):
            model.activation_checkpointing_enable(**kwargs)
        assert not model.is_activation_checkpointing
    model.activation_checkpointing_enable({"use_reentrant": False})
    assert model.is_activation_checkpointing and model.is_gradient_checkpointing
    model.gradient_checkpointing_disable()
    assert not model.is_activation_checkpointing


def test_masked_labels_train_the_lm_loss_on_them_alone():
    import torch

    from learntok.hf import LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare").train()
    x = torch.randint(0, 256, (2, 40))
    labels = x.clone()
    labels[:, :20] = -100  # a prompt that is not trained on
    model(input_ids=x, labels=labels).loss.backward()
    assert model.aunet.strategy.proj.weight.grad is None or not model.aunet.strategy.proj.weight.grad.any()


def test_a_hub_repo_id_loads_without_the_transformers_classes_imported(tmp_path):
    code = "from learntok import AUNet, Tokenizer\nAUNet.from_pretrained({r!r})\nprint(len(Tokenizer.from_pretrained({r!r}).encode('to be')))"
    env = offline_env(hub_cache(tmp_path))
    r = subprocess.run(
        [sys.executable, "-c", code.format(r=REPO)], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 0 and "learntok.hf" not in r.stderr, r.stderr[-2000:]
    r = subprocess.run(
        [sys.executable, "-c", code.format(r="someuser/absent")], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert "CheckpointError" in r.stderr and "AttributeError" not in r.stderr


def test_hf_arguments_that_cannot_work_are_named(tmp_path):
    import torch

    from learntok.hf import LearntokByteTokenizer, LearntokForCausalLM

    with pytest.raises(ValueError, match="device_map 'meta'"):
        LearntokForCausalLM.from_pretrained("tiny-shakespeare", device_map="meta")
    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    x = torch.randint(0, 256, (2, 8))
    with pytest.raises(ValueError, match="labels"):
        model(input_ids=x, labels=x[:1, :3])
    (tmp_path / "file.txt").write_text("x")
    for where in (tmp_path / "file.txt", tmp_path / ("f" * 300)):
        with pytest.raises(ValueError, match="LearntokByteTokenizer.save_pretrained"):
            LearntokByteTokenizer().save_pretrained(where)
    assert (tmp_path / "file.txt").read_text() == "x"


def test_the_second_rounds_cases_are_one_clear_error(tmp_path):
    import torch

    from learntok import AUNet
    from learntok.hf import LearntokByteTokenizer, LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    cases = [
        (
            lambda: model.generate(torch.tensor([[82, 79, 72]]), max_new_tokens=3, do_sample=True, temperature=1e308),
            "temperature",
        ),
        (lambda: model.generate(torch.tensor([[82, 79, 300]]), max_new_tokens=3), "input ids"),
        (lambda: AUNet.from_pretrained("tiny-shakespeare").generate("hi", max_bytes=10**12), "max_bytes"),
        (lambda: LearntokByteTokenizer().save_pretrained(tmp_path / "file.txt" / "sub"), "is a file"),
    ]
    if not torch.cuda.is_available():
        cases.append((lambda: LearntokForCausalLM.from_pretrained("tiny-shakespeare", device_map="cuda"), "CUDA"))
        cases.append(
            (lambda: LearntokForCausalLM.from_pretrained("tiny-shakespeare", device_map={"": "cuda:0"}), "CUDA")
        )
    (tmp_path / "file.txt").write_text("x")
    for call, words in cases:
        with pytest.raises(ValueError, match=words):
            call()
    r = run_cli("sample", "tiny-shakespeare", "--prompt", "hi", "--max-bytes", "1000000000000", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "max-bytes" in r.stderr
