"""The files JoeyNMT 2.3 reads, made from the Multi30k files and the sentencepiece model attnmt uses.

Both toolkits then see the same sentences cut into the same pieces, so their tokens/s count the same
target tokens: the pieces of each reference sentence and its end-of-sentence token.

Writes into ``--out``: ``{train,val,test_2016_flickr}.{de,en}`` (plain text, one sentence a line,
from ``$ATTNMT_DATA_DIR/multi30k/*.gz``), ``spm.joint.model`` (a copy of ``--tokenizer``) and
``vocab.txt`` (the model's pieces without its four special tokens, which JoeyNMT adds itself).

    python benchmarks/peers/joeynmt/prepare.py --tokenizer runs/tok/spm.joint.model --out runs/peer/data
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

import sentencepiece

SPLITS = ("train", "val", "test_2016_flickr")
LANGUAGES = ("de", "en")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="attnmt's sentencepiece model (a run's spm.joint.model)")
    parser.add_argument("--out", required=True, help="folder to write; it must not exist")
    parser.add_argument("--data", default=os.path.join(os.environ.get("ATTNMT_DATA_DIR", "../shared/data"), "multi30k"),
                        help="folder of the Multi30k .gz files (default $ATTNMT_DATA_DIR/multi30k)")
    args = parser.parse_args(argv)
    out, data = Path(args.out), Path(args.data)
    if out.exists():
        parser.error(f"--out {out} exists: give a new folder")
    missing = [f"{s}.{lang}.gz" for s in SPLITS for lang in LANGUAGES if not (data / f"{s}.{lang}.gz").is_file()]
    if missing:
        parser.error(f"--data {data}: missing {', '.join(missing)}")
    try:
        model = sentencepiece.SentencePieceProcessor(model_file=args.tokenizer)
    except (OSError, RuntimeError) as error:
        parser.error(f"--tokenizer {args.tokenizer}: not a sentencepiece model ({error})")
    specials = {model.pad_id(), model.unk_id(), model.bos_id(), model.eos_id()}

    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # renamed to --out when whole
    try:
        for split in SPLITS:
            for lang in LANGUAGES:
                with gzip.open(data / f"{split}.{lang}.gz", "rt", encoding="utf-8") as source:
                    (partial / f"{split}.{lang}").write_text(source.read(), encoding="utf-8")
        shutil.copyfile(args.tokenizer, partial / "spm.joint.model")
        pieces = [model.id_to_piece(i) for i in range(model.get_piece_size()) if i not in specials]
        (partial / "vocab.txt").write_text("".join(f"{piece}\n" for piece in pieces), encoding="utf-8")
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    print(f"wrote {out}: {len(SPLITS) * len(LANGUAGES)} text files, vocab.txt of {len(pieces)} pieces")
    return 0


if __name__ == "__main__":
    sys.exit(main())
