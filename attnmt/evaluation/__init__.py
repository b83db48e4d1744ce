"""Evaluation: how good a translator is.

- ``scores``: perplexity (teacher forced), BLEU and chrF (sacrebleu): what validation, ``attnmt
  evaluate``, ``attnmt compare`` and the benchmarks all report.
- ``evaluate``: a run on a split at one beam size or several, and the files it writes.
- ``summary``: the runs of a comparison of mechanisms, their mean and variance, and its summary files.

Public names load from their module on first use.
"""

from attnmt.runtime.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    **dict.fromkeys(["PerplexityResult", "Scores", "bleu", "corpus_scores", "likelihood_sums", "perplexity",
                     "perplexity_from_sums"], "scores"),
    **dict.fromkeys(["BeamEvaluation", "BeamResult", "CorpusEvaluation", "RunEvaluation", "beam_table",
                     "compare_beam_sizes", "corpus_perplexity", "data_of_run", "evaluate_beam_sizes",
                     "evaluate_corpus", "evaluate_run"], "evaluate"),
    **dict.fromkeys(["Comparison", "RunOutcome", "Statistics", "write_summary"], "summary"),
})
