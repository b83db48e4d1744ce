"""Every range check at its edge: the last valid position passes, one past it is refused (or cut).

Links and gold files (Pharaoh 0- and 1-based, NAACL), guide targets, padding masks, the subword
length limit of training pairs, the output length limit of search, and learned positions."""

from __future__ import annotations

import pytest
import torch

from attnmt.attention.functional import padding_mask
from attnmt.data.link_files import (
    check_link_range,
    piece_targets,
    read_naacl_alignments,
    read_pharaoh_alignments,
)
from attnmt.decoding.search import _max_lengths, beam_search, greedy_search
from attnmt.errors import DataError
from attnmt.models import build_model

from helpers import BigramToy


def test_link_range_check_at_the_last_word_and_one_past():
    check_link_range([{(2, 3)}], [3], [4])  # source word 2 of 3, target word 3 of 4: the last ones
    with pytest.raises(DataError, match="sentence 1: link 3-3 is outside"):
        check_link_range([{(3, 3)}], [3], [4])
    with pytest.raises(DataError, match="sentence 1: link 2-4 is outside"):
        check_link_range([{(2, 4)}], [3], [4])
    with pytest.raises(DataError, match=r"link 4-5 is outside .*count from 1"):  # written 1-based
        check_link_range([{(3, 4)}], [3], [5], one_based=True)


@pytest.mark.parametrize("one_based", [False, True])
def test_pharaoh_file_at_the_last_word_and_one_past(tmp_path, one_based):
    shift = 1 if one_based else 0
    path = tmp_path / "links.txt"
    path.write_text(f"{2 + shift}-{3 + shift} {0 + shift}p{0 + shift}\n")
    gold = read_pharaoh_alignments(path, one_based=one_based, src_lengths=[3], tgt_lengths=[4])
    assert gold.sure == [{(2, 3)}] and gold.possible == [{(2, 3), (0, 0)}]
    for bad in (f"{3 + shift}-{3 + shift}", f"{2 + shift}-{4 + shift}", f"{0 + shift}p{4 + shift}"):
        path.write_text(bad + "\n")
        with pytest.raises(DataError, match=rf"{path}: sentence 1: link .* is outside"):
            read_pharaoh_alignments(path, one_based=one_based, src_lengths=[3], tgt_lengths=[4])
    if one_based:
        path.write_text("0-1\n")  # position 0 does not exist when counting from 1
        with pytest.raises(DataError, match=rf"{path}:1: '0-1' is not a link"):
            read_pharaoh_alignments(path, one_based=True)


def test_naacl_file_at_the_last_word_and_sentence_and_one_past(tmp_path):
    path = tmp_path / "gold.naacl"
    path.write_text("2 3 4 S\n2 0 1 P\n")  # sentence 2 of 2, its last words (1-based); 0 = NULL
    gold = read_naacl_alignments(path, src_lengths=[1, 3], tgt_lengths=[1, 4])
    assert gold.sure == [set(), {(2, 3)}]
    path.write_text("2 4 4 S\n")
    with pytest.raises(DataError, match="sentence 2: link 4-4 is outside"):
        read_naacl_alignments(path, src_lengths=[1, 3], tgt_lengths=[1, 4])
    path.write_text("2 3 5 S\n")
    with pytest.raises(DataError, match="sentence 2: link 3-5 is outside"):
        read_naacl_alignments(path, src_lengths=[1, 3], tgt_lengths=[1, 4])
    path.write_text("3 1 1 S\n")
    with pytest.raises(DataError, match=rf"{path}:1: sentence 3 does not exist: there are 2 sentences"):
        read_naacl_alignments(path, src_lengths=[1, 3], tgt_lengths=[1, 4])


def test_guide_targets_at_the_last_word_and_one_past():
    spans = [(0, 1), (1, 3)]  # two words, the second of two pieces
    rows, cols, values = piece_targets({(1, 1)}, spans, spans)
    assert rows.tolist() == [1, 1, 2, 2] and cols.tolist() == [1, 2, 1, 2] and values.tolist() == [0.5] * 4
    for link in ((2, 1), (1, 2)):
        with pytest.raises(ValueError, match=f"link {link[0]}-{link[1]} is outside a pair of 2 x 2 words"):
            piece_targets({link}, spans, spans)


def test_padding_mask_at_the_longest_length_and_one_short():
    mask = padding_mask(torch.tensor([3, 1, 0]), max_len=3)
    assert mask.tolist() == [[True, True, True], [True, False, False], [False, False, False]]
    with pytest.raises(ValueError, match="max_len=2 is smaller than the longest length 3"):
        padding_mask(torch.tensor([3, 1]), max_len=2)
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        padding_mask(torch.tensor([-1]))


def test_training_pairs_at_the_length_limit_are_kept_one_piece_longer_dropped(tmp_path):
    from attnmt.data import ParallelCorpus
    from attnmt.data.tokenizer import train_tokenizers

    tokenizers = train_tokenizers(["a b c d e f g"] * 20, ["a b c d e f g"] * 20, vocab_size=12, model_type="word")
    pieces = len(tokenizers.src.encode("a b c"))
    corpus = ParallelCorpus(["a b c", "a b c d"], ["a b", "a b"], "src", "tgt")
    encoded = tokenizers.encode_corpus(corpus, max_length=pieces)
    assert len(tokenizers.src.encode("a b c d")) == pieces + 1
    assert encoded.indices == [0] and encoded.dropped_long == 1


def test_search_output_reaches_its_length_limit_and_not_one_more():
    src = torch.tensor([[5, 3]])  # two real tokens
    mask = torch.ones_like(src, dtype=torch.bool)
    assert _max_lengths(torch.tensor([2]), 1.5, 1) == [4]  # ⌊1.5 · 2 + 1⌋
    # The toy's greedy path (A, A, A, ...) never chooses EOS: it stops only at the limit, exactly there.
    assert len(greedy_search(BigramToy(), src, mask, max_len_a=1.5, max_len_b=1)[0].tokens) == 4
    assert len(greedy_search(BigramToy(), src, mask, max_len_a=0.0, max_len_b=3)[0].tokens) == 3
    beams = beam_search(BigramToy(), src, mask, beam=2, max_len_a=1.5, max_len_b=1, n_best=2)[0]
    assert max(len(h.tokens) for h in beams) <= 4


def test_learned_positions_at_the_last_one_and_one_past():
    model = build_model({"type": "transformer", "d_model": 8, "num_heads": 2, "ffn_dim": 16, "encoder_layers": 1,
                         "decoder_layers": 1, "positions": "learned", "max_positions": 4}, 20, 20).eval()
    fits = torch.full((1, 4), 5)
    model(fits, torch.ones_like(fits, dtype=torch.bool), fits)
    too_long = torch.full((1, 5), 5)
    with pytest.raises(ValueError, match="position 4 is beyond the 4 learned positions"):
        model(too_long, torch.ones_like(too_long, dtype=torch.bool), fits)
