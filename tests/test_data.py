"""Data: vocabulary, loaders, splits and batches. Fast (seconds), CPU only."""

from collections import defaultdict

import gzip
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from learntok.data import BOS, EOS, PAD, ByteData, DataConfig, decode, encode, load_documents, split_documents
from learntok.data.split import cut_document
from learntok.util.errors import DataError

from conftest import write_jsonl

LATIN1 = "caf\u00e9 na\u00efve\n".encode("latin-1")  # not valid UTF-8


# --- vocabulary -----------------------------------------------------------------------------


def test_encode_decode_round_trip_with_non_utf8_bytes():
    raw = bytes(range(256)) + LATIN1
    ids = encode(raw)
    assert ids[0] == BOS and ids.shape == (len(raw) + 1,)
    assert decode(ids) == raw
    assert decode(encode("h\u00e9llo \U0001f600")) == "h\u00e9llo \U0001f600".encode()


# --- loaders --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, at_least",
    [("shakespeare", 40), ("kjv", 66), ("python-stdlib", 100), ("python-docs", 60), ("python-rst", 300)],
)
def test_builtin_corpora_load(name, at_least):
    docs = load_documents(name)
    assert len(docs) >= at_least and all(isinstance(d, bytes) and d for d in docs)


def test_shakespeare_is_shakespeare():
    assert any(b"To be, or not to be" in d for d in load_documents("shakespeare"))


def test_python_docs_is_the_reference_documentation():
    docs = load_documents("python-docs")
    assert any(b'The "if" statement' in d and b"if_stmt ::=" in d for d in docs)
    assert all(d.decode("utf-8") for d in docs)  # text, one document per help() topic


def test_python_rst_is_the_library_reference():
    docs = load_documents("python-rst")
    assert any(b".. module:: os" in d and b"os.path" in d for d in docs)
    assert sum(map(len, docs)) > 6_000_000


@pytest.mark.parametrize("name", ["docs.jsonl", "docs.jsonl.gz"])
def test_jsonl(tmp_path, name):
    path = tmp_path / name
    write_jsonl(path, [{"text": "first \u00e9"}, {"text": ""}, {"body": "x", "text": "second"}])
    assert load_documents(str(path)) == ["first \u00e9".encode(), b"second"]


def test_jsonl_custom_field_and_missing_field_names_the_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    write_jsonl(path, [{"body": "a"}, {"body": "b"}])
    assert load_documents(str(path), text_field="body") == [b"a", b"b"]
    write_jsonl(path, [{"body": "a"}, {"body": "b"}, {"text": "c"}])
    with pytest.raises(DataError, match="line 3: no field 'body'"):
        load_documents(str(path), text_field="body")


def test_text_file_keeps_raw_bytes(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes(LATIN1)
    assert load_documents(str(path)) == [LATIN1]


def test_folder_is_recursive_sorted_and_skips_hidden_and_binary(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "b" / "two.md").write_bytes(b"two")
    (tmp_path / "a.txt").write_bytes(b"one")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\0\0\0")
    (tmp_path / ".git" / "HEAD").write_bytes(b"ref")
    assert load_documents(str(tmp_path)) == [b"one", b"two"]


def test_parquet(tmp_path):
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": ["alpha", "", "beta"], "id": [1, 2, 3]}), path)
    assert load_documents(str(path)) == [b"alpha", b"beta"]  # empty texts are skipped, as in JSONL
    with pytest.raises(DataError, match="no column 'body'"):
        load_documents(str(path), text_field="body")
    pq.write_table(pa.table({"text": ["alpha", None, "beta"]}), path)
    with pytest.raises(DataError, match="row 2: column 'text' is null"):  # refused, as a JSONL null is
        load_documents(str(path))


def test_errors_are_data_errors_with_clear_messages(tmp_path):
    with pytest.raises(
        DataError, match="neither a built-in corpus .*shakespeare, kjv, python-stdlib, python-docs, python-rst"
    ):
        load_documents("shakespear")
    with pytest.raises(DataError, match="neither a built-in corpus"):
        load_documents(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match="is empty"):
        load_documents(str(tmp_path / "empty.txt"))
    (tmp_path / "dir").mkdir()
    with pytest.raises(DataError, match="holds no non-empty text files"):
        load_documents(str(tmp_path / "dir"))
    (tmp_path / "blank.jsonl").write_bytes(b"\n\n")
    with pytest.raises(DataError, match="holds no documents"):
        load_documents(str(tmp_path / "blank.jsonl"))
    (tmp_path / "prepared").mkdir()
    (tmp_path / "prepared" / "index.json").write_text("{}")
    with pytest.raises(DataError, match="prepared data folder"):
        load_documents(str(tmp_path / "prepared"))


# --- splits ---------------------------------------------------------------------------------


def test_split_is_deterministic_disjoint_and_complete():
    docs = [f"document {i}\n".encode() * (i + 1) for i in range(200)]
    a, b = split_documents(docs, seed=3), split_documents(docs, seed=3)
    assert a == b and split_documents(docs, seed=4) != a
    parts = a["train"] + a["val"] + a["test"]
    assert sorted(parts) == sorted(docs)
    assert len(a["val"]) == len(a["test"]) == 10


def test_single_big_file_gets_all_three_splits():
    text = b"".join(f"line {i}\n".encode() for i in range(20_000))
    splits = split_documents([text])
    assert all(splits[name] for name in ("train", "val", "test"))
    assert sum(len(d) for docs in splits.values() for d in docs) == len(text)


def test_cut_document_concatenates_back_and_cuts_after_newlines():
    doc = b"".join(f"line {i}\n".encode() for i in range(1000))
    pieces = cut_document(doc, 500)
    assert b"".join(pieces) == doc and max(map(len, pieces)) <= 500
    assert all(p.endswith(b"\n") for p in pieces)


def test_split_rejects_too_few_bytes_and_bad_fractions():
    with pytest.raises(DataError, match="too few"):
        split_documents([b"ab"])
    with pytest.raises(DataError, match="val_fraction"):
        split_documents([b"x"] * 100, val_fraction=0.6, test_fraction=0.5)


# --- batches --------------------------------------------------------------------------------


def _data(packed=False):
    rng = np.random.default_rng(0)
    docs = [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in (3, 40, 7, 100, 1, 64)]
    return ByteData({"train": docs, "val": docs[:3], "test": docs[3:]}, packed=packed)


@pytest.mark.parametrize("packed", [False, True])
def test_train_batch_is_deterministic_in_seed_step_rank(packed):
    data = _data(packed)
    x = data.train_batch(step=5, batch_size=8, seq_len=16, seed=1)
    assert x.dtype == torch.long and x.shape == (8, 16)
    assert torch.equal(x, data.train_batch(step=5, batch_size=8, seq_len=16, seed=1))
    assert not torch.equal(x, data.train_batch(step=6, batch_size=8, seq_len=16, seed=1))
    assert not torch.equal(x, data.train_batch(step=5, batch_size=8, seq_len=16, seed=2))
    assert not torch.equal(x, data.train_batch(step=5, batch_size=8, seq_len=16, seed=1, rank=1, world=2))


def test_unpacked_rows_are_bos_then_a_window_of_one_document_then_pad():
    data = _data(packed=False)
    docs = list(data.documents("train"))
    x = data.train_batch(step=0, batch_size=256, seq_len=16, seed=0)
    assert (x[:, 0] == BOS).all() and not (x[:, 1:] == BOS).any() and not (x == EOS).any()
    for row in x[:, 1:]:
        n_real = int((row != PAD).sum())
        assert (row[n_real:] == PAD).all()  # PAD only at the end
        window = bytes(row[:n_real].tolist())
        assert any(window in d and (n_real == 15 or window == d) for d in docs)


def test_packed_rows_cross_documents_with_eos():
    data = _data(packed=True)
    stream = b"".join(d + b"\xff" for d in data.documents("train"))  # 0xff stands in for EOS
    x = data.train_batch(step=0, batch_size=256, seq_len=32, seed=0)
    assert (x[:, 0] == BOS).all() and not (x == PAD).any() and (x == EOS).any()
    for row in x[:, 1:].tolist():
        assert bytes(255 if t == EOS else t for t in row) in stream


def test_too_short_split_raises_with_sizes():
    with pytest.raises(DataError, match="train split has 215 bytes, fewer than one sequence of 1024"):
        _data().train_batch(step=0, batch_size=2, seq_len=1024, seed=0)


@pytest.mark.parametrize("packed", [False, True])
def test_eval_batches_score_every_byte_exactly_once(packed):
    data = _data(packed)
    for split in ("train", "val", "test"):
        got = defaultdict(bytes)
        for x, doc_ids in data.eval_batches(split, batch_size=3, seq_len=9):
            assert x.shape[1] == 9 and (x[:, 0] == BOS).all() and x.shape[0] == doc_ids.shape[0] <= 3
            for row, i in zip(x, doc_ids.tolist()):
                got[i] += decode(row)
        assert [got[i] for i in range(len(got))] == list(data.documents(split))


def test_eval_batches_max_bytes_and_ranks():
    data = _data()
    scored = sum(int((x[:, 1:] != PAD).sum()) for x, _ in data.eval_batches("train", 4, 9, max_bytes=50))
    assert scored == 50
    per_rank = [
        sum(int((x[:, 1:] != PAD).sum()) for x, _ in data.eval_batches("train", 4, 9, rank=r, world=3))
        for r in range(3)
    ]
    assert sum(per_rank) == data.n_bytes("train")


@pytest.mark.parametrize(
    "batch, seq_len, max_bytes, rank, world",
    [(4, 9, None, 0, 1), (3, 17, 50, 0, 1), (2, 9, None, 1, 3), (5, 5, 7, 0, 2)],
)
def test_n_eval_batches_counts_what_eval_batches_yields(batch, seq_len, max_bytes, rank, world):
    data = _data()
    want = len(list(data.eval_batches("train", batch, seq_len, max_bytes, rank, world)))
    assert data.n_eval_batches("train", batch, seq_len, max_bytes, rank, world) == want


def test_from_config_on_a_single_text_file(tmp_path):
    path = tmp_path / "book.txt"
    path.write_bytes(b"".join(f"line {i}\n".encode() for i in range(5000)))
    data = ByteData.from_config(DataConfig(source=str(path), split_seed=1))
    assert sum(data.n_bytes(s) for s in ("train", "val", "test")) == path.stat().st_size
    assert all(data.n_bytes(s) > 0 for s in ("train", "val", "test"))
    assert data.train_batch(0, 2, 64, seed=0).shape == (2, 64)


def test_fit_sample_is_bounded_and_seeded(tmp_path):
    """The bpe strategy's fit reads a bounded random sample of the train split, never the
    whole split (which may be many GB), from memory or from a prepared folder alike."""
    from learntok.data.prepare import PrepareOptions, prepare
    from learntok.data.dataset import FIT_BYTES
    from learntok.run.distributed import fit_strategy

    docs = [f"document {i} ".encode() * (i % 7 + 1) for i in range(500)]
    data = ByteData({"train": docs})
    sample = data.sample_documents("train", 1000, seed=3)
    assert sum(map(len, sample)) == 1000 and sample == data.sample_documents("train", 1000, seed=3)
    assert sample != data.sample_documents("train", 1000, seed=4)
    assert all(any(d.startswith(s) for d in docs) for s in sample)
    (tmp_path / "c.txt").write_bytes(b"\n".join(docs))
    prepare([str(tmp_path / "c.txt")], tmp_path / "p", PrepareOptions(piece_bytes=300), progress=False)
    disk = ByteData.from_prepared(str(tmp_path / "p"))
    assert sum(map(len, disk.sample_documents("train", 2000))) == 2000
    assert FIT_BYTES <= 4_000_000 and callable(fit_strategy)


BLOB = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"  # a NUL byte in the first 8 KB: binary


@pytest.mark.parametrize(
    "files, docs, skipped",
    [
        pytest.param({"a.txt": b"one", "b/two.md": b"two"}, [b"one", b"two"], None, id="none-binary"),
        pytest.param({"a.txt": b"one", "b/x.png": BLOB, "c.bin.gz": gzip.compress(BLOB)}, [b"one"], 2, id="some"),
        pytest.param({"x.png": BLOB, "y/z.bin": BLOB, "empty.txt": b""}, None, 2, id="all-binary"),
    ],
)
def test_a_folder_says_how_many_binary_files_it_skipped(tmp_path, capsys, files, docs, skipped):
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    if docs is None:  # nothing left to read: refused in one line naming the count and an example
        with pytest.raises(
            DataError, match=rf"holds no non-empty text files: skipped {skipped} binary files .*e\.g\. x\.png"
        ):
            load_documents(str(tmp_path))
        return
    assert load_documents(str(tmp_path)) == docs
    err = capsys.readouterr().err.splitlines()
    if skipped is None:
        assert err == []
    else:
        example = "b/x.png" if "b/x.png" in files else "x.png"
        assert len(err) == 1 and f"warning: skipped {skipped} binary files" in err[0] and f"e.g. {example}" in err[0]
