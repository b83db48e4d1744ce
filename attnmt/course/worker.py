"""The process that grades one submission: ``python -m attnmt.course.worker REQUEST_JSON ANSWER_FD``.

It contains itself first (``attnmt.course.containment``), then imports the submission from its
scratch folder, runs ``attnmt check``'s properties on it, draws the weights it gives on one fixed
input, with a ``training`` request trains the handout's model with it (seeded, into the scratch
folder) and measures its validation BLEU, and writes one JSON object to the file descriptor
ANSWER_FD:

    {"containment": str, "loaded": bool, "reason": str, "report": CheckReport.to_dict() | None,
     "diagram": {"weights": [[...]], "source": [...], "steps": [...]} | None,
     "training": {"bleu", "perplexity", "steps", "seconds", "stop_reason"} | {"error": str} | None}

Anything the submission prints goes to the worker's stdout and stderr, which the grader keeps in
the scratch folder. The request (``attnmt.course.grading._run_worker``) names the submission's
spec, the scratch folder, the folders it may read, the private ones, and the limits.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from attnmt.course.containment import forbid_outside, limit_resources, restrict_files

#: the fixed input of the diagram: 5 decoding steps over 7 source positions, the last 2 padding
DIAGRAM_STEPS, DIAGRAM_SOURCE, DIAGRAM_LENGTH = 5, 7, 5


def _contain(request: dict[str, Any]) -> str:
    limit_resources(int(request["memory_bytes"]), int(request["cpu_seconds"]))
    scratch = Path(request["scratch"])
    landlock = restrict_files([scratch], [Path(folder) for folder in request["readable"]])
    forbid_outside(scratch, [Path(folder) for folder in request["private"]])
    return landlock or "an audit hook only (this kernel has no Landlock): Python's own opens are checked"


def _diagram(spec: str, seconds: float) -> dict[str, Any]:
    """The submission's weights [steps, source] at initialisation (seed 0) on one fixed input."""
    import torch

    from attnmt.attention import build_attention
    from attnmt.attention.conformance import time_limit

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    with time_limit(seconds), torch.no_grad():
        attention = build_attention(spec, 16, 16, 16).eval()
        keys = torch.randn(1, DIAGRAM_SOURCE, 16, generator=generator)
        mask = torch.arange(DIAGRAM_SOURCE)[None, :] < DIAGRAM_LENGTH
        queries = torch.randn(1, DIAGRAM_STEPS, 16, generator=generator)
        prepared = attention.prepare(keys, keys, mask)
        weights = torch.stack([attention.attend(queries[:, step], prepared)[1][0] for step in range(DIAGRAM_STEPS)])
    return {"weights": [[round(float(w), 4) for w in row] for row in weights.float()],
            "source": [f"h̄{j + 1}" for j in range(DIAGRAM_LENGTH)] + ["pad"] * (DIAGRAM_SOURCE - DIAGRAM_LENGTH),
            "steps": [f"h{i + 1}" for i in range(DIAGRAM_STEPS)]}


def _train(spec: str, training: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Train ``training["config"]`` with the submission's class as its attention (seed
    ``training["seed"]``, at most ``training["minutes"]``, the ``--set`` options) into
    ``scratch/run``; its best validation BLEU (greedy, the config's ``bleu_max_sentences``) and
    perplexity, or {"error": why} in one line."""
    from attnmt.errors import AttnmtError

    overrides = {"attention": spec, "seed": training["seed"], "max_minutes": training["minutes"]}
    try:  # imported before the process was contained (``grade``): here they are only looked up
        from attnmt.runs.run_config import load_config
        from attnmt.training.trainer import train

        config = load_config(training["config"], overrides, list(training["set"]))
        result = train(config, scratch / "run", show_progress=False, verbose=False, named_attention=spec)
    except AttnmtError as error:
        return {"error": str(error)}
    except (Exception, SystemExit) as error:  # noqa: BLE001 - whatever the submission does is its reason
        return {"error": f"{type(error).__name__}: {error}"}
    if result.best_val_bleu is None:
        return {"error": f"it trained {result.step} steps but was never validated ({result.stop_reason})"}
    return {"bleu": round(float(result.best_val_bleu), 2), "perplexity": round(float(result.best_val_ppl), 2),
            "steps": int(result.step), "seconds": round(float(result.elapsed_seconds), 1),
            "stop_reason": str(result.stop_reason)}


def grade(request: dict[str, Any]) -> dict[str, Any]:
    """The answer for one request: torch and attnmt are imported, then the process is contained, then
    the submission is imported and checked."""
    from attnmt.attention.conformance import check_mechanism
    from attnmt.errors import AttnmtError

    if request.get("training"):  # what a training imports, while memory and files are not yet limited
        import sacrebleu  # noqa: F401

        import attnmt.runs.run_config
        import attnmt.training.trainer  # noqa: F401

    answer: dict[str, Any] = {"containment": _contain(request), "loaded": False, "reason": "", "report": None,
                              "diagram": None, "training": None}
    seconds = float(request["property_seconds"])
    try:
        report = check_mechanism(request["spec"], speed=False, seconds=seconds, expect=request.get("expect"))
    except AttnmtError as error:
        answer["reason"] = str(error)
        return answer
    except (Exception, SystemExit) as error:  # noqa: BLE001 - whatever the submission does is its row's reason
        answer["reason"] = f"{type(error).__name__}: {error}"
        return answer
    answer["loaded"], answer["report"] = True, report.to_dict()
    if any(result.detail.startswith("did not return within") for result in report.results):
        return answer
    try:
        answer["diagram"] = _diagram(request["spec"], seconds)
    except BaseException as error:  # noqa: BLE001 - a submission's fault or a time limit: no diagram, and why
        answer["diagram_error"] = f"{type(error).__name__}: {error}"
    if request.get("training"):
        answer["training"] = _train(request["spec"], request["training"], Path(request["scratch"]))
    return answer


def main() -> int:
    request = json.loads(sys.argv[1])
    answer_fd = int(sys.argv[2])
    answer = grade(request)
    with os.fdopen(answer_fd, "w", encoding="utf-8") as channel:
        channel.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
