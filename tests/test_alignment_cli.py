"""`attnmt embed`, `attnmt align-words` and `attnmt align` end to end on tiny data."""

from __future__ import annotations

import gzip
import pickle
import re

import numpy as np
import pytest

from attnmt.alignment import (
    VectorAligner,
    VectorScoring,
    WordVectors,
    load_vec,
    load_vector_dir,
    save_vec,
    threshold_links,
)
from attnmt.cli import main

LEXICON = {"cat": "chat", "dog": "chien", "house": "maison", "red": "rouge", "big": "grand",
           "sees": "voit", "the": "le", "small": "petit"}


@pytest.fixture
def tiny_vectors(tmp_path):
    """Hand-made 4-d vectors: each English word and its translation share a direction."""
    english = ["the", "cat", "sees", "dog", "."]
    french = ["le", "chat", "voit", "chien", "."]
    rng = np.random.default_rng(0)
    base = rng.standard_normal((5, 4))
    src = save_vec(WordVectors(english, base), tmp_path / "en.vec")
    tgt = save_vec(WordVectors(french, base + 0.05 * rng.standard_normal((5, 4))), tmp_path / "fr.vec")
    return src, tgt


def test_align_words_prints_shape_links_and_unknown_words_and_plots(tiny_vectors, tmp_path, capsys):
    src, tgt = tiny_vectors
    plot = tmp_path / "pair.png"
    code = main(["align-words", "--src-vectors", str(src), "--tgt-vectors", str(tgt),
                 "--src", "The cat sees the zebra .", "--tgt", "Le chat voit le zèbre .",
                 "--plot", str(plot), "--method", "intersect"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "weights: 6 x 6 (target words x source words)" in captured.out
    assert re.search(r"^  1-1  cat +chat +0\.\d\d$", captured.out, re.MULTILINE)
    assert re.search(r"^  2-2  sees +voit +0\.\d\d$", captured.out, re.MULTILINE)
    assert "unknown words: source zebra; target zèbre" in captured.out
    assert "warning: 1 unknown source word(s) got a zero vector: zebra" in captured.err
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the plot is not overwritten silently
    assert main(["align-words", "--src-vectors", str(src), "--tgt-vectors", str(tgt),
                 "--src", "the cat", "--tgt", "le chat", "--plot", str(plot)]) == 2
    assert "exists" in capsys.readouterr().err


def test_align_words_reads_the_seed_format_and_scores_like_the_seed(tiny_vectors, tmp_path, capsys):
    src, tgt = tiny_vectors
    english = load_vec(src)
    with open(tmp_path / "word2int_en.pkl", "wb") as handle:
        pickle.dump(english.index, handle)
    np.savez(tmp_path / "embeddings_en.npz", embeddings=english.matrix)
    assert main(["align-words", "--src-vectors", str(tmp_path / "word2int_en.pkl"), str(tmp_path / "embeddings_en.npz"),
                 "--tgt-vectors", str(tgt), "--src", "the cat", "--tgt", "le chat", "--scoring", "scaled_dot",
                 "--method", "match"]) == 0
    out = capsys.readouterr().out
    assert "raw dot product, τ=2, κ=0" in out
    assert re.search(r"^  1-1  cat +chat", out, re.MULTILINE)


def test_align_words_names_a_malformed_vector_file(tiny_vectors, tmp_path, capsys):
    src, tgt = tiny_vectors
    broken = tmp_path / "broken.vec"
    broken.write_text("1 4\nthe 1 2 3\n", encoding="utf-8")
    assert main(["align-words", "--src-vectors", str(broken), "--tgt-vectors", str(tgt),
                 "--src", "the", "--tgt", "le"]) == 2
    assert "broken.vec:2: expected the word and 4 numbers, found 3" in capsys.readouterr().err


def write_corpus(folder, pairs=300, seed=0):
    rng = np.random.default_rng(seed)
    english = list(LEXICON)
    src_lines, tgt_lines = [], []
    for _ in range(pairs):
        words = list(rng.choice(english, size=rng.integers(3, 6), replace=False))
        src_lines.append(" ".join(words))
        tgt_lines.append(" ".join(LEXICON[word] for word in words))  # same order: a diagonal alignment
    src_path, tgt_path = folder / "train.en.gz", folder / "train.fr"
    with gzip.open(src_path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(src_lines) + "\n")
    tgt_path.write_text("\n".join(tgt_lines) + "\n", encoding="utf-8")
    return src_path, tgt_path


def test_embed_then_align_files_with_gold(tmp_path, capsys):
    src_path, tgt_path = write_corpus(tmp_path)
    vectors = tmp_path / "vectors"
    assert main(["embed", "--src", str(src_path), "--tgt", str(tgt_path), "--out", str(vectors),
                 "--dim", "6", "--min-count", "1", "--max-lines", "250"]) == 0
    out = capsys.readouterr().out
    assert "8 en and 8 fr words, 6 dimensions" in out
    src_vectors, tgt_vectors, info = load_vector_dir(vectors)
    assert info["pairs"] == 250 and info["method"] == "sentence-cooccurrence-ochiai-svd"
    assert tgt_vectors.nearest(src_vectors.vector("house"), 1)[0][0] == "maison"
    # a second run does not overwrite the vectors silently
    assert main(["embed", "--src", str(src_path), "--tgt", str(tgt_path), "--out", str(vectors),
                 "--dim", "6", "--min-count", "1"]) == 2
    assert "--overwrite" in capsys.readouterr().err

    test_src, test_tgt, gold = tmp_path / "test.en", tmp_path / "test.fr", tmp_path / "gold.txt"
    test_src.write_text("the cat sees the dog\nbig red house\n", encoding="utf-8")
    test_tgt.write_text("le chat voit le chien\ngrand rouge maison\n", encoding="utf-8")
    gold.write_text("0-0 1-1 2-2 3-3 4-4\n0-0 1-1 2-2\n", encoding="utf-8")
    links = tmp_path / "links.txt"
    code = main(["align", "--vectors", str(vectors), "--src", str(test_src), "--tgt", str(test_tgt),
                 "--out", str(links), "--gold", str(gold), "--gold-format", "pharaoh"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert links.read_text(encoding="utf-8") == "0-0 1-1 2-2 3-3 4-4\n0-0 1-1 2-2\n"
    assert "aligned 2 pairs with intersect: 8 links" in captured.out
    assert "AER 0.0000  precision 1.0000  recall 1.0000  F1 1.0000" in captured.out
    assert "AER 95% interval 0.0000-0.0000 (the " in captured.out

    # a missing run is named, also when combined with vectors (before any work)
    for extra in ([], ["--vectors", str(vectors)]):
        assert main(["align", "--model", "runs/x", *extra, "--src", str(test_src), "--tgt", str(test_tgt),
                     "--out", str(tmp_path / "other.txt")]) == 2
        assert "runs/x: no such run folder" in capsys.readouterr().err
    assert not (tmp_path / "other.txt").exists()
    # an existing --out is kept, and a gold link outside a sentence is named
    gold.write_text("0-0\n0-9\n", encoding="utf-8")
    assert main(["align", "--vectors", str(vectors), "--src", str(test_src), "--tgt", str(test_tgt),
                 "--out", str(links), "--overwrite", "--gold", str(gold)]) == 2
    assert "sentence 2: link 0-9 is outside the sentence lengths" in capsys.readouterr().err
    assert main(["align", "--vectors", str(vectors), "--src", str(test_src), "--tgt", str(test_tgt),
                 "--out", str(links)]) == 2
    assert "exists" in capsys.readouterr().err


@pytest.fixture
def vector_folder(tmp_path, tiny_vectors):
    """A vector folder for `attnmt align --vectors` holding the tiny vectors."""
    src, tgt = tiny_vectors
    folder = tmp_path / "vectors"
    folder.mkdir()
    (folder / "en.vec").write_bytes(src.read_bytes())
    (folder / "fr.vec").write_bytes(tgt.read_bytes())
    return folder


def test_align_rejects_files_of_different_lengths(tmp_path, vector_folder, capsys):
    folder = vector_folder
    (tmp_path / "a.en").write_text("the cat\nthe dog\n", encoding="utf-8")
    (tmp_path / "a.fr").write_text("le chat\n", encoding="utf-8")
    assert main(["align", "--vectors", str(folder), "--src", str(tmp_path / "a.en"), "--tgt",
                 str(tmp_path / "a.fr"), "--out", str(tmp_path / "links.txt")]) == 2
    assert "different line counts" in capsys.readouterr().err


def test_align_threshold_links_every_pair_whose_weight_reaches_it(tmp_path, vector_folder, capsys):
    folder = vector_folder
    (tmp_path / "a.en").write_text("the cat sees the dog\n", encoding="utf-8")
    (tmp_path / "a.fr").write_text("le chat voit le chien\n", encoding="utf-8")
    out = tmp_path / "links.txt"
    code = main(["align", "--vectors", str(folder), "--src", str(tmp_path / "a.en"), "--tgt", str(tmp_path / "a.fr"),
                 "--threshold", "0.3", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "with threshold 0.3:" in captured.out
    src_vectors, tgt_vectors, _ = load_vector_dir(folder)
    aligner = VectorAligner(src_vectors, tgt_vectors, VectorScoring(), lowercase=True)
    weights = aligner("the cat sees the dog".split(), "le chat voit le chien".split())
    expected = threshold_links(weights, 0.3)
    assert 0 < len(expected) < weights.size
    assert out.read_text(encoding="utf-8") == " ".join(f"{i}-{j}" for i, j in sorted(expected)) + "\n"
