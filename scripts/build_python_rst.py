"""Rebuild learntok/corpora/python-rst.jsonl.gz (the `python-rst` built-in corpus) from Debian's
python3.11-doc package: the reStructuredText sources of the Python Library Reference.

    apt-get download python3.11-doc && dpkg-deb -x python3.11-doc_*.deb root/
    python scripts/build_python_rst.py root/usr/share/doc/python3.11/html/_sources

One JSON line per page of library/, in sorted file order: {"title": "library/os", "text": ...}.
The gzip header carries no time stamp, so the same package gives the same bytes.
"""

import gzip
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "learntok" / "corpora" / "python-rst.jsonl.gz"


def main(sources: Path) -> None:
    pages = sorted((sources / "library").glob("*.rst.txt"))
    if not pages:
        sys.exit(f"build_python_rst: no library/*.rst.txt under {sources}")
    with gzip.GzipFile(OUT, "wb", compresslevel=9, mtime=0) as out:
        for page in pages:
            record = {
                "title": "library/" + page.name.removesuffix(".rst.txt"),
                "text": page.read_bytes().decode("utf-8"),
            }
            out.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    print(f"{OUT}: {len(pages)} pages")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
