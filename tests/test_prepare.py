"""`learntok prepare`: sources -> shards + document index + index.json; training reads them."""

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from learntok.cli import main
from learntok.data import ByteData, DataConfig, small_split_warnings
from learntok.data.prepare import PrepareOptions, prepare
from learntok.data.shards import ShardedBytes, open_split, read_index
from learntok.util.errors import DataError

from conftest import write_jsonl


def _texts(n, seed=0):
    rng = np.random.default_rng(seed)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "é", "日本"]
    return [" ".join(rng.choice(words, rng.integers(1, 200))) + f" #{i}" for i in range(n)]


def _read_all(root):
    index = read_index(root)
    out = {}
    for split in ("train", "val", "test"):
        data, offsets = open_split(root, split, index)
        out[split] = [bytes(data[a:b]) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    return index, out


def test_jsonl_gz_parquet_text_and_folder_round_trip(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = _texts(300)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    with gzip.open(src / "a.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"body": t, "id": i}) + "\n" for i, t in enumerate(texts[:100]))
    pq.write_table(pa.table({"body": texts[100:200]}), src / "b.parquet", row_group_size=17)
    (src / "sub" / "c.jsonl").write_text("".join(json.dumps({"body": t}) + "\n\n" for t in texts[200:299]))
    (src / "sub" / "d.txt").write_text(texts[299])
    (src / "sub" / "e.bin").write_bytes(b"\0binary")  # skipped
    index = prepare(
        [str(src)],
        tmp_path / "out",
        PrepareOptions(text_field="body", shard_bytes=4096, val_fraction=0.1, test_fraction=0.1),
        progress=False,
    )
    index2, splits = _read_all(tmp_path / "out")
    assert index == index2 and index["format"] == "learntok-shards" and index["documents"]["read"] == 300
    # the split training on the folder itself uses: the same documents, in order, in each split
    raw = ByteData.from_config(DataConfig(source=str(src), text_field="body", val_fraction=0.1, test_fraction=0.1))
    assert splits == {s: list(raw.documents(s)) for s in splits}
    assert sorted(d for docs in splits.values() for d in docs) == sorted(t.encode() for t in texts)
    assert len(splits["val"]) == len(splits["test"]) == 30 and index["split"]["rule"] == "permutation"
    assert len(index["splits"]["train"]["shards"]) > 1  # rolled over at 4 KB
    assert all(size <= 4096 or size == max(map(len, splits["train"])) for _, size in index["splits"]["train"]["shards"])


def test_filters_truncate_drop_and_pieces(tmp_path):
    lens = [5, 50, 5000, 9000] + [100] * 60  # enough documents not to be cut first
    write_jsonl(tmp_path / "a.jsonl", [{"text": "x" * n} for n in lens])
    opts = dict(min_doc_bytes=10, max_doc_bytes=4096, val_fraction=0.0, test_fraction=0.0)
    index = prepare(
        [str(tmp_path / "a.jsonl")], tmp_path / "cut", PrepareOptions(**opts, truncate=True), progress=False
    )
    assert [len(d) for d in _read_all(tmp_path / "cut")[1]["train"]] == [50, 4096, 4096] + [100] * 60
    assert index["documents"] == {"read": 64, "dropped_short": 1, "dropped_long": 0, "truncated": 2}
    prepare([str(tmp_path / "a.jsonl")], tmp_path / "drop", PrepareOptions(**opts), progress=False)
    assert [len(d) for d in _read_all(tmp_path / "drop")[1]["train"]] == [50] + [100] * 60
    big = b"".join(b"line %d\n" % i for i in range(3000))  # a big text file: pieces at newlines
    (tmp_path / "big.txt").write_bytes(big)
    prepare(
        [str(tmp_path / "big.txt")],
        tmp_path / "pieces",
        PrepareOptions(piece_bytes=1000, val_fraction=0, test_fraction=0),
        progress=False,
    )
    docs = _read_all(tmp_path / "pieces")[1]["train"]
    assert b"".join(docs) == big and all(d.endswith(b"\n") and len(d) <= 1000 for d in docs)


def test_errors(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "hi"}\n{"other": 1}\n')
    with pytest.raises(DataError, match="line 2"):
        prepare([str(tmp_path / "a.jsonl")], tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()  # nothing half-written left
    with pytest.raises(DataError, match="does not exist"):
        prepare([str(tmp_path / "nope")], tmp_path / "out", progress=False)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("x")
    (tmp_path / "b.txt").write_text("hello")
    with pytest.raises(DataError, match="not empty"):
        prepare([str(tmp_path / "b.txt")], tmp_path / "out", progress=False)


@pytest.mark.parametrize("size", [500, 40_000, 1_300_000])
def test_a_prepared_file_splits_as_training_on_the_raw_file_does(tmp_path, size):
    """Few pieces (cut further, as training cuts them) or many: the same documents in each split."""
    text = b"".join(b"line %d of a text file, with some words.\n" % i for i in range(size // 40))
    (tmp_path / "a.txt").write_bytes(text)
    prepare([str(tmp_path / "a.txt")], tmp_path / "d", progress=False)
    _, splits = _read_all(tmp_path / "d")
    raw = ByteData.from_config(DataConfig(source=str(tmp_path / "a.txt")))
    assert splits == {s: list(raw.documents(s)) for s in splits}
    assert all(splits.values()) and sum(len(d) for docs in splits.values() for d in docs) == len(text)


def test_small_held_out_splits_are_warned_about_once(tmp_path, capsys):
    from learntok.data.split import MIN_SPLIT_BYTES

    (tmp_path / "a.txt").write_bytes(b"a short line of text\n" * 5000)  # 105 KB: ~5 KB per held-out split
    assert main(["prepare", str(tmp_path / "a.txt"), "--out", str(tmp_path / "d")]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]
    assert len(warnings) == 2 and all(f"{MIN_SPLIT_BYTES:,} bytes" in w for w in warnings)
    assert "the val split holds" in warnings[0] and "the test split holds" in warnings[1]
    data = ByteData.from_config(DataConfig(source="kjv"))
    assert small_split_warnings(data) == []  # a built-in corpus is big enough


def test_sharded_bytes_indexing_matches_one_array():
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 256, n, dtype=np.uint8) for n in (7, 1, 30, 12)]
    whole, sharded = np.concatenate(parts), ShardedBytes(parts)
    idx = rng.integers(0, len(whole), (5, 9))
    assert len(sharded) == len(whole) and np.array_equal(sharded[idx], whole[idx])
    for a, b in [(0, 50), (5, 9), (7, 8), (3, 3), (20, 38)]:
        assert np.array_equal(sharded[a:b], whole[a:b])


def test_bytedata_from_prepared_folder_matches_in_memory(tmp_path):
    texts = _texts(200, seed=1)
    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in texts])
    # bad size
    assert main(["prepare", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "d"), "--shard-mb", "0"]) == 2
    prepare([str(tmp_path / "a.jsonl")], tmp_path / "d", PrepareOptions(shard_bytes=2000), progress=False)
    for packed in (False, True):
        disk = ByteData.from_config(DataConfig(source=str(tmp_path / "d"), packed=packed))
        _, splits = _read_all(tmp_path / "d")
        mem = ByteData(splits, packed=packed)
        for step in range(3):
            for rank in range(2):
                a = disk.train_batch(step, 4, 64, seed=3, rank=rank, world=2)
                assert torch.equal(a, mem.train_batch(step, 4, 64, seed=3, rank=rank, world=2))
        ev = lambda d: [x for x, _ in d.eval_batches("val", 4, 64)]  # noqa: E731
        assert all(torch.equal(a, b) for a, b in zip(ev(disk), ev(mem)))
        assert list(disk.documents("val", limit=2)) == splits["val"][:2]


def test_cli_prepare_writes_json(tmp_path):
    (tmp_path / "a.txt").write_text("hello world\n" * 100)
    rc = main(
        [
            "prepare",
            str(tmp_path / "a.txt"),
            "--out",
            str(tmp_path / "d"),
            "--json",
            str(tmp_path / "i.json"),
            "--val-fraction",
            "0",
            "--test-fraction",
            "0",
        ]
    )
    assert rc == 0 and json.loads((tmp_path / "i.json").read_text())["splits"]["train"]["bytes"] == 1200


def test_memory_stays_bounded_on_a_larger_input(tmp_path):
    """About 24 MB of JSONL streamed in a child process: its peak RSS grows far less than the input."""
    line = json.dumps({"text": "abcdefgh " * 400}) + "\n"
    with open(tmp_path / "big.jsonl", "w") as f:
        for _ in range(24_000_000 // len(line)):
            f.write(line)
    code = (
        "import resource, sys; from learntok.data.prepare import prepare, PrepareOptions; "
        "import learntok.data.shards, tqdm, numpy; base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; "
        f"prepare([{str(tmp_path / 'big.jsonl')!r}], {str(tmp_path / 'd')!r}, "
        "PrepareOptions(shard_bytes=4 << 20), progress=False); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)"
    )
    grew_kb = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert grew_kb < 8_000, f"peak RSS grew {grew_kb} KB while preparing 24 MB"
