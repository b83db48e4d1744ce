"""The four special token ids every attnmt tokenizer, batch, model and search agrees on.

    PAD_ID = 0   <pad>   fills batches; never predicted, never attended to
    UNK_ID = 1   <unk>   a character the tokenizer never saw
    BOS_ID = 2   <s>     first input of the decoder
    EOS_ID = 3   </s>    end of a sentence (appended to sources and targets by batching)

The sentencepiece models of ``attnmt.data.tokenizer`` are trained with exactly these ids.
"""

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
