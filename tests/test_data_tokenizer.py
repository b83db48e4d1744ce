"""Sentencepiece tokenizers: fixed special ids, round trips, save/load, determinism."""

from __future__ import annotations

import io
import json

import pytest
import sentencepiece as spm

from attnmt.data import DataError, Tokenizer, Tokenizers, train_tokenizer, train_tokenizers
from attnmt.data.corpus import ParallelCorpus

GERMAN = [
    "ein hund rennt über die wiese",
    "zwei kinder spielen im park",
    "eine frau liest ein buch",
    "der mann fährt mit dem fahrrad",
    "ein kleines mädchen lacht",
    "die katze schläft auf dem sofa",
    "ein junge wirft einen ball",
    "zwei hunde spielen im schnee",
] * 4
ENGLISH = [
    "a dog runs across the meadow",
    "two children play in the park",
    "a woman reads a book",
    "the man rides the bicycle",
    "a little girl laughs",
    "the cat sleeps on the sofa",
    "a boy throws a ball",
    "two dogs play in the snow",
] * 4


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(ENGLISH, vocab_size=40, name="en")


def test_special_ids_are_fixed(tokenizer):
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    assert tokenizer.pieces([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert 4 < tokenizer.vocab_size <= 40


def test_encode_decode_round_trip(tokenizer):
    for sentence in ENGLISH[:8] + ["the dog reads a ball in the snow"]:
        ids = tokenizer.encode(sentence)
        assert all(4 <= i < tokenizer.vocab_size for i in ids)  # no specials, no unknowns
        assert tokenizer.decode(ids) == sentence
        pieces = tokenizer.encode_pieces(sentence)
        assert tokenizer.pieces(ids) == pieces
        assert "".join(pieces).replace("▁", " ").strip() == sentence
    assert tokenizer.encode_many(ENGLISH[:3]) == [tokenizer.encode(s) for s in ENGLISH[:3]]


def test_decode_skips_bos_and_pad_and_stops_at_eos(tokenizer):
    ids = tokenizer.encode("a boy reads")
    raw = [tokenizer.bos_id, *ids, tokenizer.eos_id, *tokenizer.encode("the cat"), 0, 0]
    assert tokenizer.decode(raw) == "a boy reads"
    assert tokenizer.decode([0, *ids, 0]) == "a boy reads"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode([tokenizer.vocab_size])


def test_unknown_characters_become_unk(tokenizer):
    assert tokenizer.unk_id in tokenizer.encode("a dog ☃")


def test_decode_accepts_tensors(tokenizer):
    torch = pytest.importorskip("torch")
    ids = tokenizer.encode("two dogs play")
    assert tokenizer.decode(torch.tensor(ids)) == "two dogs play"


def test_training_is_deterministic():
    first = train_tokenizer(GERMAN + ENGLISH, vocab_size=60, seed=3)
    second = train_tokenizer(GERMAN + ENGLISH, vocab_size=60, seed=3)
    assert first.model_proto == second.model_proto
    many = [f"{s} {k}" for k in range(5) for s in GERMAN + ENGLISH]  # 320 sentences
    sampled = [train_tokenizer(many, vocab_size=60, input_sentence_size=150, seed=5) for _ in range(2)]
    assert sampled[0].model_proto == sampled[1].model_proto


def test_bpe_and_mapping_input():
    tokenizer = train_tokenizer({"de": GERMAN, "en": ENGLISH}, vocab_size=80, model_type="bpe")
    for sentence in ("ein hund", "the cat sleeps"):
        assert tokenizer.decode(tokenizer.encode(sentence)) == sentence


def test_bad_arguments_raise_data_error():
    with pytest.raises(DataError, match="unknown tokenizer type"):
        train_tokenizer(ENGLISH, model_type="wordpiece")
    with pytest.raises(DataError, match="vocab_size"):
        train_tokenizer(ENGLISH, vocab_size=3)
    with pytest.raises(DataError, match="input_sentence_size"):
        train_tokenizer(ENGLISH, input_sentence_size=50)
    with pytest.raises(DataError, match="no non-empty sentences"):
        train_tokenizer(["", "  "], vocab_size=10)


def test_save_load_round_trip(tokenizer, tmp_path):
    path = tokenizer.save(tmp_path)
    assert path == tmp_path / "en.model"
    loaded = Tokenizer.load(path)
    assert loaded == tokenizer and loaded.name == "en"
    assert Tokenizer.load(tmp_path) == tokenizer  # the only .model in the folder
    assert loaded.encode("a dog") == tokenizer.encode("a dog")
    assert tokenizer.save(tmp_path) == path  # same bytes: nothing to do
    other = train_tokenizer(GERMAN, vocab_size=40, name="en")
    with pytest.raises(DataError, match="already there"):
        other.save(tmp_path)
    assert Tokenizer.load(path) == tokenizer
    other.save(tmp_path, overwrite=True)
    assert Tokenizer.load(path) == other


def test_load_refuses_foreign_and_broken_models(tmp_path):
    model = io.BytesIO()
    # sentencepiece's default ids (unk=0, bos=1, eos=2, no pad) are not attnmt's
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(ENGLISH),
        model_writer=model,
        vocab_size=30,
        minloglevel=2,
        hard_vocab_limit=False,
    )
    foreign = tmp_path / "foreign.model"
    foreign.write_bytes(model.getvalue())
    with pytest.raises(DataError, match="attnmt needs pad=0 unk=1 bos=2 eos=3"):
        Tokenizer.load(foreign)
    broken = tmp_path / "broken.model"
    broken.write_bytes(b"not a model")
    with pytest.raises(DataError, match="not a sentencepiece model"):
        Tokenizer.load(broken)
    with pytest.raises(DataError, match="not found"):
        Tokenizer.load(tmp_path / "absent.model")


@pytest.mark.parametrize("joint", [True, False])
def test_tokenizers_save_load_and_state_dict(tmp_path, joint):
    tokenizers = train_tokenizers(GERMAN, ENGLISH, vocab_size=50, joint=joint, src_lang="de", tgt_lang="en")
    assert (tokenizers.src is tokenizers.tgt) == joint
    written = tokenizers.save(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    expected = ["spm.joint.model"] if joint else ["spm.src.model", "spm.tgt.model"]
    assert names == sorted(expected + ["tokenizers.json"]) and len(written) == len(names)
    manifest = json.loads((tmp_path / "tokenizers.json").read_text())
    assert manifest["joint"] is joint and manifest["src_lang"] == "de"

    loaded = Tokenizers.load(tmp_path)
    assert loaded == tokenizers
    assert loaded.joint == joint and (loaded.src_lang, loaded.tgt_lang) == ("de", "en")
    assert loaded.tgt.decode(loaded.tgt.encode("two dogs play")) == "two dogs play"
    assert Tokenizers.from_state_dict(tokenizers.state_dict()) == tokenizers


def test_tokenizers_load_detects_replaced_model(tmp_path):
    tokenizers = train_tokenizers(GERMAN, ENGLISH, vocab_size=50, joint=False)
    tokenizers.save(tmp_path)
    (tmp_path / "spm.tgt.model").write_bytes(tokenizers.src.model_proto)
    with pytest.raises(DataError, match="SHA-256"):
        Tokenizers.load(tmp_path)
    with pytest.raises(DataError, match="holds no saved tokenizers"):
        Tokenizers.load(tmp_path / "elsewhere")


def test_encode_corpus_limits_subword_length():
    tokenizers = train_tokenizers(GERMAN, ENGLISH, vocab_size=60)
    corpus = ParallelCorpus(src=["ein hund", "zwei kinder spielen im park"], tgt=["a dog", "two children"])
    full = tokenizers.encode_corpus(corpus)
    assert full.indices == [0, 1] and full.dropped_long == 0
    assert full.src_ids[1] == tokenizers.src.encode("zwei kinder spielen im park")
    limit = len(full.src_ids[0])
    assert len(full.src_ids[1]) > limit  # the test needs the second source to be longer
    cut = tokenizers.encode_corpus(corpus, max_length=max(limit, len(full.tgt_ids[0])))
    assert cut.indices == [0] and cut.dropped_long == 1 and len(cut) == 1
    assert cut.tgt_ids == [full.tgt_ids[0]]
