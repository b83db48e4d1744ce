"""Word vectors: .vec and pickle + npz loading, malformed files, lookup of unknown words."""

from __future__ import annotations

import gzip
import os
import pickle

import numpy as np
import pytest

from attnmt.alignment import (
    WordVectors,
    load_pickle_npz_vectors,
    load_vec,
    load_vector_dir,
    load_word_vectors,
    save_vec,
    save_vector_dir,
    tokenize,
)
from attnmt.errors import DataError


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_tokenize_lowercases_and_splits_on_spaces_without_empty_tokens():
    assert tokenize("L accord  a été Signé . ") == ["l", "accord", "a", "été", "signé", "."]
    assert tokenize("   ") == []


def test_load_vec_reads_words_and_float32_matrix(tmp_path):
    path = write(tmp_path / "v.vec", "3 2\nthe 0.5 -1\nété 2 3e-1\n. 0 0 \n")
    vectors = load_vec(path)
    assert vectors.words == ["the", "été", "."]
    assert vectors.matrix.dtype == np.float32
    np.testing.assert_array_equal(vectors.matrix, np.array([[0.5, -1], [2, 0.3], [0, 0]], np.float32))
    assert vectors.dim == 2 and len(vectors) == 3 and "été" in vectors


def test_load_vec_reads_gzip_and_stops_at_max_words(tmp_path):
    path = tmp_path / "v.vec.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("3 2\na 1 2\nb 3 4\nc 5 6\n")
    assert load_vec(path).words == ["a", "b", "c"]
    assert load_vec(path, max_words=2).words == ["a", "b"]


def test_save_vec_then_load_vec_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    vectors = WordVectors(["a", "b", "é"], rng.standard_normal((3, 5)))
    path = save_vec(vectors, tmp_path / "out.vec")
    loaded = load_vec(path)
    assert loaded.words == vectors.words
    np.testing.assert_allclose(loaded.matrix, vectors.matrix, rtol=1e-5, atol=1e-7)
    with pytest.raises(DataError, match="refusing to overwrite"):
        save_vec(vectors, path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2 2\na 1 2\nb 1\n", r"v\.vec:3: expected the word and 2 numbers, found 1 numbers after 'b'"),
        ("2 2\na 1 2\nb 1 x2\n", r"v\.vec:3: 'x2' is not a number"),
        ("2 2\na 1 2\nb 1 2 3\n", r"v\.vec:3: expected the word and 2 numbers, found 3"),
        ("two 2\na 1 2\n", r"v\.vec:1: the header must be two positive integers"),
        ("3 2\na 1 2\nb 1 2\n", r"v\.vec: the header announces 3 words but the file ends after 2"),
        ("1 2\na 1 2\nb 1 2\n", r"v\.vec:3: more words than the 1 the header announces"),
        ("2 2\na 1 2\na 3 4\n", r"v\.vec:3: the word 'a' already appeared on line 2"),
        ("1 2\n 1 2\n", r"v\.vec:2: the line does not start with a word"),
    ],
)
def test_load_vec_names_file_and_line_of_malformed_input(tmp_path, text, message):
    path = write(tmp_path / "v.vec", text)
    with pytest.raises(DataError, match=message):
        load_vec(path)


def test_load_vec_missing_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_vec(tmp_path / "absent.vec")


def make_pickle_npz_files(tmp_path, mapping, embeddings, key="embeddings"):
    pkl, npz = tmp_path / "word2int_en.pkl", tmp_path / "embeddings_en.npz"
    with open(pkl, "wb") as handle:
        pickle.dump(mapping, handle)
    np.savez(npz, **{key: embeddings})
    return pkl, npz


def test_load_pickle_npz_vectors_follows_the_dictionary_indices(tmp_path):
    embeddings = np.arange(12, dtype=np.float64).reshape(4, 3)
    pkl, npz = make_pickle_npz_files(tmp_path, {"accord": 2, "the": 0, "signed": 3}, embeddings)
    vectors = load_pickle_npz_vectors(pkl, npz)
    assert vectors.words == ["the", "accord", "signed"]  # in row order; row 1 has no word
    np.testing.assert_array_equal(vectors.vector("accord"), embeddings[2].astype(np.float32))
    both_orders = load_word_vectors([npz, pkl])
    assert both_orders.words == vectors.words


def test_load_pickle_npz_vectors_rejects_missing_array_and_bad_index(tmp_path):
    pkl, npz = make_pickle_npz_files(tmp_path, {"a": 0}, np.zeros((1, 2)), key="vectors")
    with pytest.raises(DataError, match="no 'embeddings' array"):
        load_pickle_npz_vectors(pkl, npz)
    pkl, npz = make_pickle_npz_files(tmp_path, {"a": 0, "b": 5}, np.zeros((2, 2)))
    with pytest.raises(DataError, match="'b' has index 5, outside the 2 rows"):
        load_pickle_npz_vectors(pkl, npz)
    with open(pkl, "wb") as handle:
        pickle.dump(["not", "a", "dict"], handle)
    with pytest.raises(DataError, match="expected a pickled dict"):
        load_pickle_npz_vectors(pkl, npz)


def test_lookup_gives_unknown_words_zero_vectors_and_lists_them_once():
    vectors = WordVectors(["signed", "."], np.array([[1.0, 2.0], [3.0, 4.0]]))
    matrix, unknown = vectors.lookup(["signed", "zorglub", ".", "zorglub", "xyz"])
    assert matrix.shape == (5, 2) and matrix.dtype == np.float32
    np.testing.assert_array_equal(matrix[1], [0, 0])
    np.testing.assert_array_equal(matrix[3], [0, 0])
    np.testing.assert_array_equal(matrix[2], [3, 4])
    assert unknown == ["zorglub", "xyz"]


def test_word_vectors_reject_duplicates_and_mismatched_rows():
    with pytest.raises(ValueError, match="'a' appears more than once"):
        WordVectors(["a", "b", "a"], np.zeros((3, 2)))
    with pytest.raises(ValueError, match="2 words but the matrix has 3 rows"):
        WordVectors(["a", "b"], np.zeros((3, 2)))


def test_vector_dir_round_trip_keeps_languages_and_refuses_to_overwrite(tmp_path):
    src = WordVectors(["the"], np.ones((1, 2)))
    tgt = WordVectors(["la", "le"], np.ones((2, 2)))
    paths = save_vector_dir(tmp_path, src, tgt, {"method": "test"}, src_lang="en", tgt_lang="fr")
    assert paths["src"].name == "en.vec" and paths["tgt"].name == "fr.vec"
    loaded_src, loaded_tgt, info = load_vector_dir(tmp_path)
    assert loaded_src.words == ["the"] and loaded_tgt.words == ["la", "le"]
    assert info["method"] == "test" and info["src_lang"] == "en"
    with pytest.raises(DataError, match="refusing to overwrite"):
        save_vector_dir(tmp_path, src, tgt, {})


class _RunsCode:
    """Pickles as a call of os.system: what a hostile word -> index file holds."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("hostile", ["whole file", "one value", "numpy index"])
def test_a_pickle_that_names_code_is_refused_before_anything_is_built(tmp_path, hostile, attnmt_cli):
    marker = tmp_path / "ran"
    mapping = {"whole file": _RunsCode(marker), "one value": {"the": _RunsCode(marker)},
               "numpy index": {"the": np.int64(0)}}[hostile]
    pkl, npz = make_pickle_npz_files(tmp_path, mapping, np.zeros((2, 3)))
    with pytest.raises(DataError, match="refused to read it.*nothing of the file was built"):
        load_pickle_npz_vectors(pkl, npz)
    assert not marker.exists()
    # the command in this process: an exception that escaped it would fail the test
    done = attnmt_cli("align-words", "--src-vectors", pkl, npz, "--tgt-vectors", pkl, npz, "--src", "the",
                      "--tgt", "the")
    assert done.returncode == 2 and "refused to read it" in done.stderr
    assert not marker.exists()


def test_npz_vectors_are_read_without_pickle(tmp_path):
    pkl, npz = make_pickle_npz_files(tmp_path, {"the": 0}, np.zeros((1, 3)))
    np.savez(npz, embeddings=np.array([[_RunsCode(tmp_path / "ran")]], dtype=object))
    with pytest.raises(DataError):
        load_pickle_npz_vectors(pkl, npz)
    assert not (tmp_path / "ran").exists()
