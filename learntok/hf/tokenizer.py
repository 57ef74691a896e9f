"""`LearntokByteTokenizer`: learntok's byte vocabulary as a `transformers` tokenizer.

Ids 0-255 are the UTF-8 bytes themselves, then BOS 256, EOS 257 and PAD 258
(learntok.data.vocab): the vocabulary of ByT5 (Xue et al., 2022, "ByT5: Towards a token-free
future with pre-trained byte-to-byte models"), with learntok's order, so ids are the model's
own. A text is encoded as its bytes alone (learntok.data.encode(text, bos=False)), as ByT5's and
GPT-2's tokenizers add no BOS: LearntokForCausalLM reads every row after a BOS, as learntok reads
one, so ids with or without it give the same logits (and lm-evaluation-harness, which puts its
own prefix token in front of a rolling window, scores what learntok's adapter scores).
`add_bos_token=True` puts BOS in the ids. No EOS is added. Special tokens are never read out of the text ("<s>" in a text is its four bytes), so
`decode(encode(text), skip_special_tokens=True) == text` for every str that is UTF-8.

This is the model's input vocabulary, not its tokenization: the chunks the model cuts a text
into are learntok.Tokenizer's (docs/tokenizer.md).
"""

from __future__ import annotations

import json
import operator
from pathlib import Path

from transformers import PreTrainedTokenizer

from learntok.data.vocab import BOS, EOS, PAD
from learntok.run.folder import is_run_folder
from learntok.util.files import check_name, check_parents

SPECIAL = {BOS: "<s>", EOS: "</s>", PAD: "<pad>"}  # learntok.data.vocab's ids, ByT5's names


def checked_id(index) -> int:
    """`index`, when it is an id of the vocabulary (an int 0..PAD, a 0-d integer tensor or numpy
    integer included); else one ValueError naming it and the vocabulary's range. Every id this
    tokenizer reads (decode, convert_ids_to_tokens) comes through here, before `transformers`
    converts it (which would read 65.0 or 1.5 or True as an int)."""
    if getattr(index, "ndim", None) == 0:  # a 0-d tensor or numpy scalar: its one value
        index = index.item()
    try:
        if type(index) is bool:
            raise TypeError
        value = operator.index(index)
    except TypeError:
        raise ValueError(
            f"LearntokByteTokenizer: id {index!r} is not an integer (ids are 0-{PAD}: bytes 0-255, BOS, EOS, PAD)"
        ) from None
    if not 0 <= value <= PAD:
        raise ValueError(
            f"LearntokByteTokenizer: id {index!r} is outside the vocabulary 0-{PAD} (bytes 0-255, BOS, EOS, PAD)"
        )
    return value


def flat_ids(ids) -> list:
    """The ids of one id, a sequence, a nested sequence, a tensor or an array, as a flat list (for checking)."""
    if hasattr(ids, "tolist") and not isinstance(ids, (list, tuple)):
        ids = ids.tolist()
    if isinstance(ids, (list, tuple)):
        return [i for item in ids for i in flat_ids(item)]
    return [ids]


class LearntokByteTokenizer(PreTrainedTokenizer):
    model_input_names = ["input_ids", "attention_mask"]
    vocab_files_names: dict[str, str] = {}  # nothing to read: the vocabulary is the bytes

    def __init__(self, add_bos_token: bool = False, **kwargs):
        self.add_bos_token = add_bos_token
        for name, i in (("bos_token", BOS), ("eos_token", EOS), ("pad_token", PAD)):
            kwargs.setdefault(name, SPECIAL[i])
        kwargs.setdefault("split_special_tokens", True)  # "<s>" in a text is text
        kwargs.setdefault("clean_up_tokenization_spaces", False)  # spaces are bytes like any other
        kwargs.setdefault("model_max_length", int(1e30))
        kwargs.setdefault("padding_side", "left")  # generate() appends after the last id: pad before the first
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return 256

    def __len__(self) -> int:
        return PAD + 1

    def get_vocab(self) -> dict[str, int]:
        return {**{chr(i): i for i in range(256)}, **{t: i for i, t in SPECIAL.items()}}

    def _tokenize(self, text, **kwargs) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"LearntokByteTokenizer: text must be a str, got {type(text).__name__}")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"LearntokByteTokenizer: the text is not UTF-8 (a lone surrogate at character {e.start})"
            ) from None
        return [chr(b) for b in data]  # one token per byte, named by the character of its value

    def decode(self, token_ids, *args, **kwargs) -> str:
        """transformers' decode, every id checked first (`checked_id`)."""
        for i in flat_ids(token_ids):
            checked_id(i)
        return super().decode(token_ids, *args, **kwargs)

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        """transformers' convert_ids_to_tokens, every id checked first (`checked_id`)."""
        for i in flat_ids(ids):
            checked_id(i)
        if getattr(ids, "ndim", None) == 0:  # a 0-d tensor or array: one id
            ids = ids.item()
        return super().convert_ids_to_tokens(ids, skip_special_tokens=skip_special_tokens)

    def _convert_token_to_id(self, token: str) -> int:
        special = {t: i for i, t in SPECIAL.items()}
        if token in special:
            return special[token]
        if not isinstance(token, str) or len(token) != 1 or ord(token) > 255:
            raise ValueError(
                f"LearntokByteTokenizer: token {token!r} is not in the vocabulary (one character U+0000-U+00FF "
                f"for each byte, or {', '.join(SPECIAL.values())})"
            )
        return ord(token)

    def _convert_id_to_token(self, index: int) -> str:
        return SPECIAL.get(checked_id(index)) or chr(index)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        """Bytes joined and read as UTF-8 (a byte sequence that is not UTF-8, as a generation cut
        inside a character ends, shows U+FFFD); special tokens by their names."""
        out, data = [], bytearray()
        for t in tokens:
            if t in SPECIAL.values():
                out.append(data.decode("utf-8", "replace") + t)
                data = bytearray()
            else:
                data.append(ord(t))
        return "".join(out) + data.decode("utf-8", "replace")

    def build_inputs_with_special_tokens(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ) -> list[int]:
        """BOS first when add_bos_token; a pair is joined as one text."""
        ids = token_ids_0 + (token_ids_1 or [])
        return ([BOS] if self.add_bos_token else []) + ids

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None, already_has_special_tokens=False) -> list[int]:
        if already_has_special_tokens:
            return [int(i in SPECIAL) for i in token_ids_0 + (token_ids_1 or [])]
        return [1] * self.add_bos_token + [0] * (len(token_ids_0) + len(token_ids_1 or []))

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' save, refused (one ValueError, nothing written) into a run folder or a
        checkpoint, which belong to their run, as the model's save_pretrained refuses them."""
        folder = Path(save_directory)
        check_name(folder, "LearntokByteTokenizer.save_pretrained:")
        check_parents(folder, "LearntokByteTokenizer.save_pretrained:", ValueError)
        if folder.exists() and not folder.is_dir():
            raise ValueError(
                f"LearntokByteTokenizer.save_pretrained: {folder} is a file, not a folder (nothing was written)"
            )
        for where in (folder, *folder.parents):
            if is_run_folder(where, by_lock=where == folder) or (where / "state.pt").is_file():
                raise ValueError(
                    f"LearntokByteTokenizer.save_pretrained: {folder} is inside the run or checkpoint {where}, "
                    f"which belongs to its run: give another folder (nothing was written)"
                )
        return super().save_pretrained(save_directory, *args, **kwargs)

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        """transformers' own, with `add_bos_token` written into tokenizer_config.json
        (`transformers` 5 leaves it out, its fast tokenizers keeping it elsewhere), so that
        AutoTokenizer.from_pretrained gives back the tokenizer that was saved."""
        for name in file_names:
            if Path(name).name.endswith("tokenizer_config.json"):
                config = json.loads(Path(name).read_text(encoding="utf-8"))
                config["add_bos_token"] = self.add_bos_token
                Path(name).write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n", "utf-8")
        return super()._save_pretrained(save_directory, file_names, legacy_format, filename_prefix)

    def add_special_tokens(self, special_tokens_dict: dict, *args, **kwargs) -> int:
        """transformers' add_special_tokens, checked first: BOS, EOS and PAD keep their tokens
        and no other token is added (`_add_tokens`); anything else is one ValueError, before
        anything changes."""
        roles = {"bos_token": SPECIAL[BOS], "eos_token": SPECIAL[EOS], "pad_token": SPECIAL[PAD]}
        for key, value in dict(special_tokens_dict).items():
            values = [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
            allowed = {roles[key]} if key in roles else set(SPECIAL.values())
            for v in values:
                if v not in allowed:
                    raise ValueError(
                        f"LearntokByteTokenizer: cannot set {key} to {v!r}: the byte vocabulary is fixed (bytes "
                        f"0-255, {', '.join(f'{r} {t}' for r, t in roles.items())}); nothing was changed"
                    )
        return super().add_special_tokens(special_tokens_dict, *args, **kwargs)

    def _add_tokens(self, new_tokens, special_tokens: bool = False) -> int:
        """The vocabulary is the 256 bytes and BOS, EOS, PAD, which the model's embedding holds:
        its own special tokens are accepted (transformers adds them so), any other token is
        refused (one ValueError, nothing added), as `LearntokForCausalLM.resize_token_embeddings`
        refuses a new size: a token added here would have an id the model cannot read."""
        known = set(SPECIAL.values())
        other = [str(t) for t in new_tokens if str(t) not in known]
        if other:
            raise ValueError(
                f"LearntokByteTokenizer: cannot add {other[0]!r}: the byte vocabulary is fixed (bytes 0-255, "
                f"{', '.join(SPECIAL.values())}); a text is read as its bytes, so nothing was added"
            )
        return super()._add_tokens(new_tokens, special_tokens=special_tokens)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple:
        return ()  # the vocabulary is the bytes: no file
