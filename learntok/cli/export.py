"""`learntok export RUN --out OUT`: a model as a folder `transformers` loads (learntok.hf.export; the `hf` extra)."""

from __future__ import annotations

from learntok.cli.options import add_model, check_run
from learntok.util.errors import ConfigError
from learntok.util.files import output_folder


def add_export(sub) -> None:
    p = sub.add_parser(
        "export", help="write a folder transformers' AutoModelForCausalLM loads (and learntok reads back)"
    )
    add_model(p)
    p.add_argument(
        "--out", required=True, type=output_folder, metavar="OUT", help="the folder to write (new, empty, or an export)"
    )
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> None:
    check_run(args.model)
    try:
        from learntok.hf import export
    except ImportError as e:
        raise ConfigError(f"export needs transformers ({e}): pip install -e '.[hf]'") from None
    print(
        f"wrote {export(args.model, args.out)} (transformers: AutoModelForCausalLM.from_pretrained after import learntok.hf)"
    )
