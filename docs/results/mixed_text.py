"""The mixed-script text of docs/rate.md ("What control costs"): paragraphs from the last tenth
of the Chinese Debian Reference (`debref-zh`), each followed by Python docs text (`python-rst`)
in a code fence and a shell command line, to about 150 KB. Usage: python docs/results/mixed_text.py OUT.txt"""

import gzip
import json
import sys
from pathlib import Path

CORPORA = Path(__file__).resolve().parents[2] / "learntok" / "corpora"


def documents(name: str) -> list[str]:
    with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    return docs[-len(docs) // 10 :]


zh, rst = documents("debref-zh"), documents("python-rst")
pieces, n, i = [], 0, 0
while n < 150_000:
    piece = (
        zh[i % len(zh)][:1500]
        + "\n\n```python\n"
        + rst[i % len(rst)][:800]
        + "\n```\n\n$ sudo apt-get install -y python3-venv && ls -la /etc/apt\n\n"
    )
    pieces.append(piece)
    n, i = n + len(piece.encode()), i + 1
Path(sys.argv[1]).write_text("".join(pieces), encoding="utf-8")
