"""Reading parallel text: plain and gzip files, errors that name the file and line, dropped pairs."""

from __future__ import annotations

import gzip
import logging

import pytest

from attnmt.data import DataError, ParallelCorpus, read_lines, read_parallel


def write(path, text: str, compress: bool = False):
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def test_reads_plain_files(tmp_path):
    src = write(tmp_path / "a.de", "Ein Hund.\nZwei Katzen.\n")
    tgt = write(tmp_path / "a.en", "A dog.\nTwo cats.\n")
    corpus = read_parallel(src, tgt)
    assert corpus.src == ["Ein Hund.", "Zwei Katzen."]
    assert corpus.tgt == ["A dog.", "Two cats."]
    assert list(corpus) == [("Ein Hund.", "A dog."), ("Zwei Katzen.", "Two cats.")]
    assert (corpus.dropped_empty, corpus.dropped_long) == (0, 0)
    assert (corpus.src_path, corpus.tgt_path) == (src, tgt)


@pytest.mark.parametrize("suffix", [".gz", ".txt"])
def test_reads_gzip_by_magic_bytes_whatever_the_suffix(tmp_path, suffix):
    src = write(tmp_path / f"a.de{suffix}", "Grüße aus Köln\n", compress=True)
    tgt = write(tmp_path / "a.en", "Greetings from Cologne\n")
    corpus = read_parallel(src, tgt)
    assert corpus.src == ["Grüße aus Köln"] and corpus.tgt == ["Greetings from Cologne"]


def test_last_line_without_newline_crlf_and_bom(tmp_path):
    src = write(tmp_path / "a.de", "\ufeffeins\r\nzwei\r\ndrei")
    assert read_lines(src) == ["eins", "zwei", "drei"]


def test_lines_split_only_on_newline(tmp_path):
    # U+2028 and U+0085 are line breaks to str.splitlines; in a corpus they are inside a sentence.
    src = write(tmp_path / "a.de", "eins\u2028zwei\nx\u0085y\n")
    assert read_lines(src) == ["eins\u2028zwei", "x\u0085y"]


def test_different_line_counts_name_both_files_and_counts(tmp_path):
    src = write(tmp_path / "train.de", "a\nb\nc\n")
    tgt = write(tmp_path / "train.en", "a\nb\n")
    with pytest.raises(DataError) as error:
        read_parallel(src, tgt)
    message = str(error.value)
    assert str(src) in message and str(tgt) in message
    assert "3 lines" in message and "2 lines" in message


def test_invalid_utf8_names_file_and_line(tmp_path):
    src = write(tmp_path / "a.de", "gut\nauch gut\n")
    bad = tmp_path / "a.en"
    bad.write_bytes(b"fine\nbroken \xff here\n")
    with pytest.raises(DataError) as error:
        read_parallel(src, bad)
    message = str(error.value)
    assert str(bad) in message and "line 2" in message and "UTF-8" in message


def test_invalid_utf8_inside_gzip_names_line(tmp_path):
    bad = tmp_path / "a.gz"
    bad.write_bytes(gzip.compress(b"one\ntwo\nthree \xc3\x28\n"))
    with pytest.raises(DataError, match="line 3"):
        read_lines(bad)


def test_missing_file_and_corrupt_gzip(tmp_path):
    with pytest.raises(DataError, match="not found"):
        read_lines(tmp_path / "nope.de")
    corrupt = tmp_path / "c.gz"
    corrupt.write_bytes(gzip.compress(b"hello\n" * 100)[:30])
    with pytest.raises(DataError, match="corrupt gzip"):
        read_lines(corrupt)


def test_pairs_with_an_empty_side_are_dropped_and_counted(tmp_path, caplog):
    src = write(tmp_path / "a.de", "eins\n\n  \ndrei\nvier\n")
    tgt = write(tmp_path / "a.en", "one\ntwo\nthree\n\t\nfour\n")
    with caplog.at_level(logging.WARNING, logger="attnmt.data.corpus"):
        corpus = read_parallel(src, tgt)
    assert corpus.src == ["eins", "vier"] and corpus.tgt == ["one", "four"]
    assert corpus.dropped_empty == 3
    assert corpus.line_numbers == [1, 5]
    assert "3 pairs with an empty side" in caplog.text


def test_max_length_counts_whitespace_tokens_on_either_side(tmp_path):
    src = write(tmp_path / "a.de", "a b c\na b c d\na\na b\n")
    tgt = write(tmp_path / "a.en", "x\ny\nx y z w\nx  y   z\n")
    corpus = read_parallel(src, tgt, max_length=3)
    assert corpus.src == ["a b c", "a b"]
    assert corpus.dropped_long == 2 and corpus.dropped_empty == 0
    assert corpus.line_numbers == [1, 4]
    assert len(read_parallel(src, tgt)) == 4  # max_length=None keeps everything


def test_nothing_left_is_an_error(tmp_path):
    src = write(tmp_path / "a.de", "\n\n")
    tgt = write(tmp_path / "a.en", "x\ny\n")
    with pytest.raises(DataError, match="no sentence pairs"):
        read_parallel(src, tgt)


def test_parallel_corpus_checks_its_sides():
    with pytest.raises(ValueError):
        ParallelCorpus(src=["a"], tgt=[])
    corpus = ParallelCorpus(src=["a", "b"], tgt=["x", "y"])
    assert corpus.line_numbers == [1, 2] and corpus[1] == ("b", "y") and len(corpus) == 2
