"""Subword tokenizers: sentencepiece models trained from sentences in memory.

A sentence becomes a list of ids of subword pieces; ``decode`` turns ids back into plain,
detokenized text (sentencepiece marks word starts with ``▁``, so no separate detokenizer is needed).
Every model made here has the four special ids of ``attnmt.data.special_tokens`` (PAD 0, UNK 1,
BOS 2, EOS 3), which the rest of attnmt relies on.

``encode`` returns the pieces of the text only, without BOS or EOS; batching adds them.

A translator needs two tokenizers, one per side, held by ``Tokenizers``: either one *joint*
model trained on both languages (shared vocabulary, so source and target ids mean the same piece),
or one model per language. ``Tokenizers.save(run_dir)`` writes the ``.model`` files and a small
``tokenizers.json`` into a run folder, so a checkpoint and its run folder are self-contained.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from attnmt.data.corpus import ParallelCorpus
from attnmt.data.special_tokens import BOS_ID, EOS_ID, PAD_ID, SPECIAL_PIECES, UNK_ID
from attnmt.errors import DataError
from attnmt.runtime.atomic_files import write_bytes_atomic

logger = logging.getLogger(__name__)

MODEL_TYPES = ("unigram", "bpe", "char", "word")
TOKENIZERS_JSON = "tokenizers.json"


class Tokenizer:
    """One sentencepiece model: text <-> ids.

    ``encode("Ein Hund rennt.") -> [57, 310, 1021, 4]`` (pieces only, no BOS/EOS);
    ``decode(ids) -> "Ein Hund rennt."``.
    """

    pad_id = PAD_ID
    unk_id = UNK_ID
    bos_id = BOS_ID
    eos_id = EOS_ID

    def __init__(self, model_proto: bytes, name: str = "spm", source: str | Path | None = None):
        """model_proto: the serialized sentencepiece model (the bytes of a ``.model`` file)."""
        where = str(source) if source is not None else f"tokenizer {name!r}"
        self._proto = bytes(model_proto)
        self.name = name
        self._processor = spm.SentencePieceProcessor()
        try:
            self._processor.LoadFromSerializedProto(self._proto)
        except (RuntimeError, OSError) as error:
            raise DataError(f"{where}: not a sentencepiece model ({error})") from None
        found = {
            PAD_ID: self._processor.pad_id(),
            UNK_ID: self._processor.unk_id(),
            BOS_ID: self._processor.bos_id(),
            EOS_ID: self._processor.eos_id(),
        }
        if any(found_id != wanted for wanted, found_id in found.items()):
            raise DataError(
                f"{where}: special ids are pad={found[PAD_ID]} unk={found[UNK_ID]} bos={found[BOS_ID]} "
                f"eos={found[EOS_ID]}, attnmt needs pad=0 unk=1 bos=2 eos=3 (train it with train_tokenizer)"
            )

    # ---- text -> ids -------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Ids of the pieces of ``text`` (no BOS, no EOS)."""
        return self._processor.encode(text, out_type=int)

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for every text (one call into sentencepiece, much faster than a loop)."""
        return self._processor.encode(list(texts), out_type=int)

    def nbest_with_scores(self, text: str, nbest: int) -> list[tuple[float, list[int]]]:
        """The ``nbest`` best segmentations of ``text`` as ``(log P, ids)``, best first (a unigram
        model's; for subword regularisation, ``attnmt.data.subword_sampling``)."""
        result = self._processor.nbest_encode_as_proto(text, nbest_size=nbest)
        return [(float(candidate.score), [piece.id for piece in candidate.pieces]) for candidate in result.nbests]

    def encode_pieces(self, text: str) -> list[str]:
        """The pieces of ``text`` as strings, e.g. ``['▁Ein', '▁Hund', '▁renn', 't', '.']``."""
        return self._processor.encode(text, out_type=str)

    # ---- ids -> text -------------------------------------------------------------------------

    def decode(self, ids: Iterable[int]) -> str:
        """Detokenized text of ``ids``.

        A leading BOS and every PAD are skipped, and decoding stops at the first EOS, so the raw
        output of a search (``BOS w1 w2 EOS PAD PAD``) decodes to the sentence ``w1 w2``.
        """
        return self._processor.decode(self._content_ids(ids))

    def decode_many(self, batch: Iterable[Iterable[int]]) -> list[str]:
        """``decode`` for every id list."""
        return [self.decode(ids) for ids in batch]

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """The piece of every id, specials included (``<s>``, ``</s>``, ``<pad>``), for plot labels."""
        ids = self._as_list(ids)
        self._check_range(ids)
        return [self._processor.id_to_piece(i) for i in ids]

    def id_to_piece(self, token_id: int) -> str:
        return self.pieces([token_id])[0]

    def piece_to_id(self, piece: str) -> int:
        """Id of ``piece``; UNK_ID when the vocabulary does not have it."""
        return self._processor.piece_to_id(piece)

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included: ids are ``0 .. vocab_size - 1``."""
        return self._processor.get_piece_size()

    # ---- files -------------------------------------------------------------------------------

    @property
    def model_proto(self) -> bytes:
        """The serialized model; ``Tokenizer(t.model_proto)`` is an identical tokenizer."""
        return self._proto

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self._proto).hexdigest()

    def save(self, directory: str | Path, overwrite: bool = False) -> Path:
        """Write ``<directory>/<name>.model`` atomically and return its path.

        An existing file with the same bytes is left alone; one with other bytes raises DataError
        unless ``overwrite`` is True.
        """
        return _save_model(Path(directory) / f"{self.name}.model", self._proto, overwrite)

    @classmethod
    def load(cls, path: str | Path, name: str | None = None) -> Tokenizer:
        """Load a ``.model`` file, or ``<path>/<name>.model`` when ``path`` is a folder."""
        path = Path(path)
        if path.is_dir():
            if name is None:
                models = sorted(path.glob("*.model"))
                if len(models) != 1:
                    raise DataError(
                        f"{path}: expected one .model file, found {len(models)}; pass the file or a name"
                    )
                path = models[0]
            else:
                path = path / f"{name}.model"
        try:
            proto = path.read_bytes()
        except FileNotFoundError:
            raise DataError(f"{path}: tokenizer model not found") from None
        return cls(proto, name=name or path.stem, source=path)

    # ---- helpers -----------------------------------------------------------------------------

    @staticmethod
    def _as_list(ids: Iterable[int]) -> list[int]:
        if hasattr(ids, "tolist"):  # torch tensors, numpy arrays
            ids = ids.tolist()
        return [int(i) for i in ids]

    def _check_range(self, ids: list[int]) -> None:
        size = self.vocab_size
        bad = [i for i in ids if not 0 <= i < size]
        if bad:
            raise ValueError(f"{self.name}: ids {bad[:5]} are outside the vocabulary 0..{size - 1}")

    def _content_ids(self, ids: Iterable[int]) -> list[int]:
        ids = self._as_list(ids)
        self._check_range(ids)
        content = []
        for position, token_id in enumerate(ids):
            if token_id == EOS_ID:
                break
            if token_id == PAD_ID or (token_id == BOS_ID and position == 0):
                continue
            content.append(token_id)
        return content

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and self._proto == other._proto

    def __hash__(self) -> int:
        return hash(self._proto)

    def __repr__(self) -> str:
        return f"Tokenizer(name={self.name!r}, vocab_size={self.vocab_size}, sha256={self.sha256[:12]})"


def _save_model(path: Path, proto: bytes, overwrite: bool) -> Path:
    if path.exists() and not overwrite:
        if path.read_bytes() == proto:
            return path
        raise DataError(f"{path}: a different tokenizer model is already there; not overwriting it")
    return write_bytes_atomic(path, proto)


def train_tokenizer(  # noqa: PLR0913 (sentencepiece's settings, each a keyword)
    texts: Sequence[str] | Mapping[str, Sequence[str]],
    vocab_size: int = 8000,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    input_sentence_size: int = 0,
    seed: int = 0,
    name: str = "spm",
    save_dir: str | Path | None = None,
    byte_fallback: bool = False,
    num_threads: int = 2,
) -> Tokenizer:
    """Train a sentencepiece model on sentences in memory.

    texts: sentences, or ``{lang: sentences}`` for a joint model over several languages.
    vocab_size: wanted number of ids (specials included). It is a soft limit: on a small text the
        unigram model may come out smaller; check ``Tokenizer.vocab_size``.
    model_type: "unigram" (Kudo 2018) or "bpe" (Sennrich et al. 2016); "char" and "word" too.
    character_coverage: share of characters the vocabulary must cover; 1.0 for small alphabets
        (European languages), ~0.9995 for Chinese or Japanese.
    input_sentence_size: train on this many randomly chosen sentences (0 = all; else > 100).
    seed: fixes that choice; training is deterministic given the texts and the seed.
    save_dir: also write ``<save_dir>/<name>.model``.
    byte_fallback: spell unknown characters as UTF-8 bytes instead of UNK (adds 256 pieces).
    """
    if model_type not in MODEL_TYPES:
        raise DataError(f"unknown tokenizer type {model_type!r}; valid types: {', '.join(MODEL_TYPES)}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= len(SPECIAL_PIECES):
        raise DataError(f"vocab_size must be an integer > {len(SPECIAL_PIECES)}, got {vocab_size!r}")
    sample = input_sentence_size
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0 or 0 < sample <= 100:
        # sentencepiece's own limit: sampling fewer than 101 sentences is refused
        raise DataError(f"input_sentence_size must be 0 (all sentences) or > 100, got {sample!r}")
    if isinstance(texts, str):
        raise TypeError("train_tokenizer: texts must be a list of sentences, not one string")
    sentences = [s for group in texts.values() for s in group] if isinstance(texts, Mapping) else list(texts)
    if not any(s.strip() for s in sentences):
        raise DataError(f"cannot train tokenizer {name!r}: no non-empty sentences")

    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            hard_vocab_limit=False,  # a tiny text gives a smaller vocabulary instead of an error
            byte_fallback=byte_fallback,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece=SPECIAL_PIECES[PAD_ID],
            unk_piece=SPECIAL_PIECES[UNK_ID],
            bos_piece=SPECIAL_PIECES[BOS_ID],
            eos_piece=SPECIAL_PIECES[EOS_ID],
            num_threads=num_threads,
            minloglevel=2,  # errors only: sentencepiece is chatty on stderr otherwise
        )
    except (RuntimeError, ValueError) as error:
        raise DataError(f"sentencepiece could not train tokenizer {name!r}: {error}") from None
    tokenizer = Tokenizer(model.getvalue(), name=name)
    logger.info(
        "trained %s tokenizer %r on %d sentences: %d pieces",
        model_type,
        name,
        len(sentences),
        tokenizer.vocab_size,
    )
    if save_dir is not None:
        tokenizer.save(save_dir)
    return tokenizer


@dataclass
class EncodedCorpus:
    """A corpus as ids: ``src_ids[k]``, ``tgt_ids[k]`` encode pair ``indices[k]`` of the corpus."""

    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    indices: list[int]
    dropped_long: int = 0

    def __len__(self) -> int:
        return len(self.src_ids)


@dataclass
class Tokenizers:
    """The source and target tokenizers of a translator (the same object when ``joint``)."""

    src: Tokenizer
    tgt: Tokenizer
    joint: bool
    src_lang: str = "src"
    tgt_lang: str = "tgt"

    def __post_init__(self) -> None:
        if self.joint and self.src != self.tgt:
            raise ValueError("Tokenizers: joint=True needs the same model for src and tgt")

    def encode_corpus(self, corpus: ParallelCorpus, max_length: int | None = None) -> EncodedCorpus:
        """Encode every pair; with ``max_length``, drop pairs with more subword pieces on a side.

        The limit counts pieces without BOS/EOS. Use it for training only; test sets are never cut.
        """
        if max_length is not None and max_length < 1:
            raise ValueError(f"encode_corpus: max_length must be >= 1 or None, got {max_length}")
        all_src = self.src.encode_many(corpus.src)
        all_tgt = self.tgt.encode_many(corpus.tgt)
        if max_length is None:
            return EncodedCorpus(all_src, all_tgt, list(range(len(all_src))))
        keep = [k for k in range(len(all_src)) if max(len(all_src[k]), len(all_tgt[k])) <= max_length]
        dropped = len(all_src) - len(keep)
        if dropped:
            logger.info(
                "dropped %d of %d pairs longer than %d subword tokens", dropped, len(all_src), max_length
            )
        return EncodedCorpus([all_src[k] for k in keep], [all_tgt[k] for k in keep], keep, dropped)

    # ---- run folder --------------------------------------------------------------------------

    def _file_names(self) -> tuple[str, str]:
        return ("spm.joint.model", "spm.joint.model") if self.joint else ("spm.src.model", "spm.tgt.model")

    def save(self, run_dir: str | Path, overwrite: bool = False) -> list[Path]:
        """Write the model file(s) and ``tokenizers.json`` into ``run_dir``; return the paths.

        Files already there with the same bytes are kept; different ones raise DataError unless
        ``overwrite`` is True.
        """
        run_dir = Path(run_dir)
        src_name, tgt_name = self._file_names()
        paths = [_save_model(run_dir / src_name, self.src.model_proto, overwrite)]
        if not self.joint:
            paths.append(_save_model(run_dir / tgt_name, self.tgt.model_proto, overwrite))
        manifest = {
            "joint": self.joint,
            "src_lang": self.src_lang,
            "tgt_lang": self.tgt_lang,
            "src_model": src_name,
            "tgt_model": tgt_name,
            "src_sha256": self.src.sha256,
            "tgt_sha256": self.tgt.sha256,
        }
        data = (json.dumps(manifest, indent=2) + "\n").encode("utf-8")
        paths.append(_save_model(run_dir / TOKENIZERS_JSON, data, overwrite))
        return paths

    @classmethod
    def load(cls, run_dir: str | Path) -> Tokenizers:
        """Read what ``save`` wrote, checking the model files against the recorded sums."""
        run_dir = Path(run_dir)
        manifest_path = run_dir / TOKENIZERS_JSON
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            joint = bool(manifest["joint"])
            files = {side: manifest[f"{side}_model"] for side in ("src", "tgt")}
        except FileNotFoundError:
            raise DataError(f"{manifest_path}: not found; {run_dir} holds no saved tokenizers") from None
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise DataError(f"{manifest_path}: malformed ({error!r})") from None
        loaded = {}
        for side, file in files.items():
            tokenizer = Tokenizer.load(run_dir / file)
            expected = manifest.get(f"{side}_sha256")
            if expected and tokenizer.sha256 != expected:
                raise DataError(
                    f"{run_dir / file}: SHA-256 {tokenizer.sha256} differs from {expected} recorded in "
                    f"{manifest_path}; the model file was replaced"
                )
            loaded[side] = tokenizer
        if joint:
            loaded["tgt"] = loaded["src"]
        return cls(
            src=loaded["src"],
            tgt=loaded["tgt"],
            joint=joint,
            src_lang=manifest.get("src_lang", "src"),
            tgt_lang=manifest.get("tgt_lang", "tgt"),
        )

    # ---- inside a checkpoint -----------------------------------------------------------------

    def state_dict(self) -> dict:
        """Plain data (bytes and strings) to store inside a checkpoint."""
        return {
            "joint": self.joint,
            "src_lang": self.src_lang,
            "tgt_lang": self.tgt_lang,
            "src_model": self.src.model_proto,
            "tgt_model": self.tgt.model_proto,
        }

    @classmethod
    def from_state_dict(cls, state: Mapping) -> Tokenizers:
        """Inverse of ``state_dict``."""
        try:
            src = Tokenizer(state["src_model"], name="spm.src", source="checkpoint tokenizer (src)")
            joint = bool(state["joint"])
            tgt = src
            if not joint:
                tgt = Tokenizer(state["tgt_model"], name="spm.tgt", source="checkpoint tokenizer (tgt)")
            return cls(src, tgt, joint, state.get("src_lang", "src"), state.get("tgt_lang", "tgt"))
        except (KeyError, TypeError) as error:
            raise DataError(f"checkpoint tokenizer state is malformed ({error!r})") from None


def train_tokenizers(  # noqa: PLR0913 (sentencepiece's settings, each a keyword)
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    vocab_size: int = 8000,
    joint: bool = True,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    input_sentence_size: int = 0,
    seed: int = 0,
    src_lang: str = "src",
    tgt_lang: str = "tgt",
    run_dir: str | Path | None = None,
) -> Tokenizers:
    """Train the tokenizers of a translator: one joint model on both sides, or one per side.

    vocab_size is the size of the joint vocabulary, or of each side's when not ``joint``.
    With ``run_dir``, the result is also saved there (see ``Tokenizers.save``).
    """
    def train(texts: Sequence[str], name: str) -> Tokenizer:
        return train_tokenizer(texts, vocab_size=vocab_size, name=name, model_type=model_type,
                               character_coverage=character_coverage, input_sentence_size=input_sentence_size,
                               seed=seed)

    if joint:
        shared = train(list(src_texts) + list(tgt_texts), "spm.joint")
        tokenizers = Tokenizers(shared, shared, True, src_lang, tgt_lang)
    else:
        src = train(src_texts, "spm.src")
        tgt = train(tgt_texts, "spm.tgt")
        tokenizers = Tokenizers(src, tgt, False, src_lang, tgt_lang)
    if run_dir is not None:
        tokenizers.save(run_dir)
    return tokenizers
