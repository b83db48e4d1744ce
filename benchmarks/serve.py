"""Is ``attnmt serve`` fast enough to feel live? Measured over real HTTP on the loopback address.

``attnmt serve RUN ...`` runs as a user runs it, in its own process (``--port 0``); this script is
the page. The page asks each model in its own request, side by side, and shows each panel as its
answer arrives; so for each of ``--sentences`` sentences of ``--words`` words (test-set sentences
of the first run joined, then cut) the script sends one translation request per model at once and
records when the first and the last answer arrive, at the page's settings (beam 5, its 3 best)
and with greedy search. Then integrated gradients (10 steps) per model, and a translation on one
model sent while another computes saliency. Last, the page: its HTML, two files and
``/api/models``.

Targets (issue: attnmt serve): the first translation within 0.3 s (median), saliency within 3 s,
the page within 1 s, on 2 cores with three models (an RNN, a Transformer and the tiny config's run).

    python benchmarks/serve.py RUN [RUN ...] --json benchmarks/results/speed/serve.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import portable


def post(port: int, path: str, payload: dict) -> tuple[float, int]:
    """(seconds, status) of one POST."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.request("POST", path, body=json.dumps(payload).encode(),
                       headers={"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    connection.close()
    return time.perf_counter() - started, response.status


def get(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status


def sentences_of(examples: list[dict], count: int, words: int) -> list[str]:
    """``count`` sentences of exactly ``words`` words, made of consecutive test sentences."""
    pool = [word for example in examples for word in example["source"].split()]
    if len(pool) < words:
        raise SystemExit("serve.py: the runs' test set is too small for sentences of that length")
    return [" ".join((pool * (1 + count * words // len(pool)))[k * words: (k + 1) * words]) for k in range(count)]


def side_by_side(port: int, names: list[str], sentence: str, beam: int, n_best: int) -> list[float]:
    """Seconds until each model's answer arrived, all asked at once (as the page asks)."""
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        started = time.perf_counter()
        futures = [pool.submit(post, port, "/api/translate", {"sentence": sentence, "beam": beam, "n_best": n_best,
                                                              "models": [name]}) for name in names]
        seconds = []
        for future in futures:
            _, status = future.result()
            if status != 200:
                raise SystemExit(f"serve.py: a translation failed with status {status}")
            seconds.append(time.perf_counter() - started)
    return seconds


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered), 4), "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 4),
            "max": round(ordered[-1], 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--sentences", type=int, default=50)
    parser.add_argument("--words", type=int, default=20)
    parser.add_argument("--saliency-sentences", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-m", "attnmt", "serve", *map(str, args.runs), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    try:
        return measure(server, args)
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)


def measure(server: subprocess.Popen, args: argparse.Namespace) -> int:
    assert server.stdout is not None
    line = server.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if found is None:
        raise SystemExit(f"serve.py: attnmt serve did not start: {line}{server.stderr.read() if server.stderr else ''}")
    port = int(found.group(1))
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", "/api/models", headers={"Host": f"127.0.0.1:{port}"})
    described = json.loads(connection.getresponse().read())
    connection.close()
    names = [model["name"] for model in described["models"]]
    examples = described["examples"]

    page = []
    for _ in range(5):
        started = time.perf_counter()
        assert all(get(port, path) == 200 for path in ("/", "/static/app.js", "/static/app.css", "/api/models"))
        page.append(time.perf_counter() - started)

    sentences = sentences_of(examples, args.sentences + 3, args.words)
    results: dict[str, dict] = {}
    for label, beam, n_best in (("page settings (beam 5, 3 best)", 5, 3), ("greedy", 1, 1)):
        for sentence in sentences[:3]:  # warm-up
            side_by_side(port, names, sentence, beam, n_best)
        arrivals = [side_by_side(port, names, sentence, beam, n_best) for sentence in sentences[3:]]
        results[label] = {"first": summary([min(times) for times in arrivals]),
                          "last": summary([max(times) for times in arrivals]),
                          **{name: summary([times[k] for times in arrivals]) for k, name in enumerate(names)}}
        print(f"{label}: first answer median {results[label]['first']['median']:.3f} s, last "
              f"{results[label]['last']['median']:.3f} s", flush=True)

    saliency = {}
    for name in names:
        seconds = []
        for sentence in sentences[3: 3 + args.saliency_sentences]:
            took, status = post(port, "/api/saliency", {"sentence": sentence, "model": name, "method": "integrated",
                                                        "steps": 10})
            assert status == 200, status
            seconds.append(took)
        saliency[name] = summary(seconds)
        print(f"saliency (integrated, 10 steps) {name}: median {saliency[name]['median']:.3f} s", flush=True)

    # A translation on the last model while the first computes saliency: not blocked by it.
    beside = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for sentence in sentences[3: 3 + args.saliency_sentences]:
            slow = pool.submit(post, port, "/api/saliency", {"sentence": sentence, "model": names[0],
                                                             "method": "integrated", "steps": 10})
            time.sleep(0.05)
            beside.append(post(port, "/api/translate", {"sentence": sentence, "models": [names[-1]]})[0])
            slow.result()

    record = {
        "question": "is attnmt serve fast enough to feel live?",
        "threads": args.threads, "torch": torch.__version__, "machine": platform.machine(),
        "models": [{**model, "origin": Path(model["origin"]).name} for model in described["models"]],
        "sentences": args.sentences, "words": args.words,
        "page_seconds": summary(page), "translation_seconds": results, "saliency_seconds": saliency,
        "translation_beside_saliency_seconds": summary(beside),
        "targets": {"first_translation_median": 0.3, "saliency": 3.0, "page": 1.0},
    }
    rows = [[label, f"{values['first']['median']:.3f}", f"{values['last']['median']:.3f}",
             f"{values['first']['p90']:.3f}"] for label, values in results.items()]
    print(format_table(["settings", "first answer, median s", "last answer, median s", "first, p90 s"], rows))
    print(format_table(["model", "saliency median s", "max s"],
                       [[name, f"{value['median']:.3f}", f"{value['max']:.3f}"] for name, value in saliency.items()]))
    print(f"page (HTML, two files, /api/models): median {record['page_seconds']['median']:.3f} s; a translation "
          f"beside a saliency: median {record['translation_beside_saliency_seconds']['median']:.3f} s")
    write_text_atomic(args.json, json.dumps(portable(record), indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
