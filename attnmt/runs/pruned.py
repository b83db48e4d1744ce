"""``attnmt prune``: a new run folder whose Transformer no longer holds some heads.

    write_pruned_run(run, spec, out) -> (out, pruned_heads)

reads a run's checkpoint (``best`` by default), removes the heads ``spec`` names
(``attnmt.models.pruning``) and writes ``out/`` as a run every command reads: ``best.pt`` (the
pruned weights, with the run's tokenizers and its config recording ``model.pruned_heads``),
``config.yaml`` (the run's own, its data paths made absolute, with the same record) and
``pruned.json`` (where it came from and which heads went). It has no ``last.pt``: a pruned run
translates, evaluates and is served, and is not trained further. ``out`` must not exist; the folder
is written beside it under a temporary name and renamed into place at the end, so an interrupted
prune leaves nothing half-written.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path

from attnmt.data.tokenizer import Tokenizers
from attnmt.errors import ConfigError
from attnmt.models import build_model
from attnmt.models.head_gates import parse_heads
from attnmt.models.pruning import pruned_model_state
from attnmt.runs.checkpoint import load_checkpoint, load_model_state, make_checkpoint, save_checkpoint
from attnmt.runs.folder import BEST, CONFIG_FILE, checkpoint_path, read_saved_config
from attnmt.runs.run_config import RunConfig

__all__ = ["PRUNED_FILE", "write_pruned_run"]

#: the record of a pruned run: the run and checkpoint it came from, and the heads it lost
PRUNED_FILE = "pruned.json"


def write_pruned_run(run: str | Path, spec: str, out: str | Path, checkpoint: str = "best") -> tuple[Path, list[str]]:
    """Write ``out`` (module docstring); returns it and the new model's ``pruned_heads``. ConfigError
    in one line for a model that cannot lose heads, a SPEC that names none, or an ``out`` that exists."""
    out = Path(out)
    if out.exists():
        raise ConfigError(f"--out {out} exists; prune writes a new run folder and never over one")
    path = checkpoint_path(run, checkpoint)
    state = load_checkpoint(path)
    config = RunConfig.from_dict(state["config"])
    if config.model.type != "transformer" or config.model.attention != "scaled_dot":
        raise ConfigError(f"{path}: prune removes heads of attnmt's Transformer with scaled dot-product attention; "
                          f"this run is a {config.model.type} with {config.model.attention!r}")
    tokenizers = Tokenizers.from_state_dict(state["tokenizers"])
    model = build_model(config.model, tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
    load_model_state(model, state, path)
    heads = parse_heads(spec, model, "--heads")
    if not heads:
        raise ConfigError("--heads names no head; give PART:LAYER:HEAD,... (attnmt heads ranks them)")
    labels, weights = pruned_model_state(model, heads)
    config_dict = copy.deepcopy(state["config"])
    config_dict["model"]["pruned_heads"] = labels
    pruned = build_model(config_dict["model"], tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
    pruned.load_state_dict(weights)  # strict: every shape of the pruned config, nothing left over
    saved = read_saved_config(path.parent)
    own = RunConfig.from_dict(saved, base_dir=path.parent).to_dict() if saved is not None else config_dict
    own["model"]["pruned_heads"] = labels
    out.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        save_checkpoint(make_checkpoint(config=config_dict, model_state=weights, tokenizers=state["tokenizers"],
                                        progress=state.get("progress", {})), folder / BEST)
        (folder / CONFIG_FILE).write_text(RunConfig.from_dict(own).to_yaml(), encoding="utf-8")
        record = {"from": str(path.resolve()), "heads_removed": [head.label() for head in heads],
                  "pruned_heads": labels}
        (folder / PRUNED_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.rename(folder, out)  # fails, and nothing is replaced, if out appeared meanwhile
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return out, labels
