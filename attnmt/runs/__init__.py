"""Runs: what a training run is, in memory and on disk.

- ``run_config``: ``RunConfig``, the typed config of a run: its ``data``, ``model``, ``training``
  and ``search`` sections (``TrainingConfig``, ``SearchConfig`` here; the data and model sections
  with their layers), read from YAML with command-line overrides.
- ``folder``: a run folder's file names, starting and resuming, the writer lock, metrics.jsonl.
- ``checkpoint``: one file with everything needed to translate with, or continue, a run; it loads
  without running code (``torch.load(weights_only=True)``).

Public names load from their module on first use.
"""

from attnmt.runtime.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    **dict.fromkeys(["MAX_LEN_A", "MAX_LEN_B", "RunConfig", "SearchConfig", "TrainingConfig", "apply_overrides",
                     "load_config", "yaml_load"], "run_config"),
    **dict.fromkeys(["BEST", "CONFIG_FILE", "LAST", "LOCK", "METRICS", "RESUMABLE_CHANGES", "append_metrics",
                     "beam_table_path", "check_run_dir", "checkpoint_path", "config_differences", "eval_json_path",
                     "hyps_path", "read_saved_config", "resolve_resume_config", "training_finished",
                     "write_metrics", "writer_lock"], "folder"),
    **dict.fromkeys(["load_checkpoint", "load_model_state", "make_checkpoint", "save_checkpoint"], "checkpoint"),
})
