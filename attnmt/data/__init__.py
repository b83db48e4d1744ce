"""Data: parallel text in, padded batches of subword ids out.

    read_parallel / load_multi30k  ->  ParallelCorpus (sentences)
    train_tokenizers / Tokenizers  ->  ids (sentencepiece, PAD=0 UNK=1 BOS=2 EOS=3)
    make_batches                   ->  Batch (src, tgt_in, tgt_out, masks), bucketed by length

``DataConfig`` (``attnmt.data.data_config``) is the ``data:`` section of a training config and
``load_split`` reads a split it names.
"""

from attnmt.data.batching import (
    Batch,
    TokenBatchSampler,
    batch_indices,
    batches_for_inference,
    collate,
    longest_first,
    make_batches,
    restore_order,
    shard,
)
from attnmt.data.corpus import ParallelCorpus, read_lines, read_parallel
from attnmt.data.data_config import DataConfig, load_split
from attnmt.data.multi30k import LANGUAGES as MULTI30K_LANGUAGES
from attnmt.data.multi30k import SPLITS as MULTI30K_SPLITS
from attnmt.data.multi30k import load_multi30k, multi30k_path
from attnmt.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    EncodedCorpus,
    Tokenizer,
    Tokenizers,
    train_tokenizer,
    train_tokenizers,
)
from attnmt.errors import DataError

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "Batch",
    "DataConfig",
    "DataError",
    "EncodedCorpus",
    "MULTI30K_LANGUAGES",
    "MULTI30K_SPLITS",
    "ParallelCorpus",
    "TokenBatchSampler",
    "Tokenizer",
    "Tokenizers",
    "batch_indices",
    "batches_for_inference",
    "collate",
    "longest_first",
    "load_multi30k",
    "load_split",
    "make_batches",
    "multi30k_path",
    "read_lines",
    "read_parallel",
    "restore_order",
    "shard",
    "train_tokenizer",
    "train_tokenizers",
]
