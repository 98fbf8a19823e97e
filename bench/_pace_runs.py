"""The runs of ``bench.embed_pace``, each in a process of its own so that its peak RSS is its own.

    python -m bench._pace_runs RUN CORPUS_JSON MODEL_DIR   # prints one JSON object

Every run embeds the same texts: the chunk texts Coffer embeds for the corpus's documents
(``"{title}\\n\\n{chunk}"``), or the corpus's long texts. Timing starts after the model is loaded
and has embedded one short text, in every run alike. CPU seconds are this process's, plus the
shared model service's when the run goes through it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench._measure import proc_cpu_seconds, proc_memory
from bench._vectors import MINILM

__all__ = ["RUNS", "plan_batches"]

KB = "pace"
QUERIES = [
    "how do I configure the embedding model",
    "what does a hybrid search return",
    "start the server over HTTP",
    "where are documents stored",
]
MAX_TOKENS = 512  # the model's context: the tokenizer truncates there, as fastembed's does
Corpus = dict[str, Any]


def plan_batches(lengths: Sequence[int], max_tokens: int, max_texts: int) -> list[list[int]]:
    """Indices into ``lengths`` cut into batches, shortest texts first: a batch is padded to its
    longest text, and its padded tokens (texts x longest) stay within ``max_tokens`` (a text
    longer than that goes alone), with at most ``max_texts`` texts."""
    batches: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        batch = batches[-1] if batches else None
        if batch and len(batch) < max_texts and (len(batch) + 1) * lengths[index] <= max_tokens:
            batch.append(index)
        else:
            batches.append([index])
    return batches


@contextlib.contextmanager
def timed(service: int | None = None) -> Iterator[dict[str, Any]]:
    """Wall and CPU seconds of the block (this process's, and the service process's if given)."""
    figures: dict[str, Any] = {}
    cpu, service_cpu = _own_cpu(), proc_cpu_seconds(service) if service else None
    started = time.perf_counter()
    yield figures
    figures["seconds"] = time.perf_counter() - started
    figures["cpu_seconds"] = _own_cpu() - cpu
    if service and service_cpu is not None:
        figures["service_cpu_seconds"] = (proc_cpu_seconds(service) or 0.0) - service_cpu
        figures["cpu_seconds"] += figures["service_cpu_seconds"]


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


# -- fastembed, called directly ---------------------------------------------------------------------


def _fastembed(model_dir: Path) -> Any:
    from fastembed import TextEmbedding

    model = TextEmbedding(MINILM, specific_model_path=str(model_dir))
    list(model.embed(["warm up"]))
    return model


def fastembed_defaults(corpus: Corpus, model_dir: Path) -> dict[str, Any]:
    """``TextEmbedding.embed(texts)`` as documented: batches of 256 in the given order."""
    model, texts = _fastembed(model_dir), _texts(corpus)
    with timed() as figures:
        vectors = list(model.embed(texts))
    return {**figures, "chunks": len(vectors)}


def fastembed_by_document(corpus: Corpus, model_dir: Path) -> dict[str, Any]:
    """What Coffer did before: each document's texts in batches of 16, in document order."""
    model = _fastembed(model_dir)
    with timed() as figures:
        count = sum(len(list(model.embed(doc["texts"], batch_size=16))) for doc in corpus["documents"])
    return {**figures, "chunks": count}


def fastembed_parallel(corpus: Corpus, model_dir: Path) -> dict[str, Any]:
    """fastembed's data parallelism: one worker process (and model) per core, texts sorted by length.
    The workers start within the timing (they start on every call); their CPU is not counted."""
    model, texts = _fastembed(model_dir), sorted(_texts(corpus), key=len)
    with timed() as figures:
        vectors = list(model.embed(texts, batch_size=8, parallel=0))
    figures.pop("cpu_seconds")
    return {**figures, "chunks": len(vectors), "workers": os.cpu_count()}


def fastembed_one_per_call(corpus: Corpus, model_dir: Path) -> dict[str, Any]:
    """One text per call, as Coffer now calls it, but in fastembed's own session (spinning threads)."""
    model, texts = _fastembed(model_dir), _texts(corpus)
    with timed() as figures:
        count = sum(len(list(model.embed([text]))) for text in texts)
    return {**figures, "chunks": count}


def fastembed_long(corpus: Corpus, model_dir: Path) -> dict[str, Any]:
    """The long texts as Coffer embedded them before: batches of 16, padded to 512 tokens."""
    model = _fastembed(model_dir)
    with timed() as figures:
        vectors = list(model.embed(corpus["long"], batch_size=16))
    return {**figures, "chunks": len(vectors)}


# -- onnxruntime, called directly -------------------------------------------------------------------


class _Direct:
    """The model's ONNX graph and tokenizer, run with our own batch shape and session options."""

    def __init__(self, model_dir: Path, *, spinning: bool) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = os.cpu_count() or 1
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(model_dir / "model.onnx"), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.run([[101, 102]])

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.tokenizer.encode_batch(list(texts))]

    def run(self, ids: Sequence[Sequence[int]]) -> Any:
        """Mean-pooled, L2-normalized vectors of one batch, padded to its longest text."""
        import numpy as np

        width = max(len(row) for row in ids)
        tokens = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros_like(tokens)
        for row, text in enumerate(ids):
            tokens[row, : len(text)], mask[row, : len(text)] = text, 1
        feed = {"input_ids": tokens, "attention_mask": mask, "token_type_ids": np.zeros_like(tokens)}
        hidden = self.session.run(None, feed)[0]
        pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def _onnx_batched(max_tokens: int) -> Callable[[Corpus, Path], dict[str, Any]]:
    def run(corpus: Corpus, model_dir: Path) -> dict[str, Any]:
        model, texts = _Direct(model_dir, spinning=False), _texts(corpus)
        with timed() as figures:
            ids = model.encode(texts)
            batches = plan_batches([len(row) for row in ids], max_tokens, 64)
            count = sum(len(model.run([ids[i] for i in batch])) for batch in batches)
        return {**figures, "chunks": count, "batches": len(batches)}

    run.__doc__ = f"onnxruntime: texts sorted by tokens, batches of at most {max_tokens} padded tokens, quiet threads."
    return run


def _onnx_one_per_call(spinning: bool) -> Callable[[Corpus, Path], dict[str, Any]]:
    def run(corpus: Corpus, model_dir: Path) -> dict[str, Any]:
        model, texts = _Direct(model_dir, spinning=spinning), _texts(corpus)
        with timed() as figures:
            count = sum(len(model.run(model.encode([text]))) for text in texts)
        return {**figures, "chunks": count}

    run.__doc__ = f"onnxruntime: one text per call, {'spinning' if spinning else 'quiet'} threads."
    return run


# -- Coffer -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _coffer(model_dir: Path, *, service: bool) -> Iterator[tuple[Any, Any, int | None]]:
    """A Coffer home with an empty vector knowledge base, its model loaded; the service's pid, if any."""
    from coffer_mcp import Coffer, load_settings

    root = Path(tempfile.mkdtemp(prefix="cf-pace-", dir="/tmp"))  # short: socket paths are limited
    os.environ["XDG_RUNTIME_DIR"] = str(root / "run")
    (root / "run").mkdir(mode=0o700)
    env = {"COFFER_EMBEDDING_MODEL": MINILM, "COFFER_EMBEDDING_MODEL_PATH": str(model_dir)}
    pid = None
    try:
        with Coffer(load_settings(env, home=root / "home", embedding_service="auto" if service else "off")) as coffer:
            coffer.create_kb(KB, "embedding pace", vector=True)
            embedder, _ = coffer.providers.models.configured()
            embedder.embed_query("warm up")
            pid = embedder.provider.status()["pid"] if service else None
            yield coffer, embedder, pid
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        shutil.rmtree(root, ignore_errors=True)


def _ingest(coffer: Any, corpus: Corpus) -> int:
    """Add the corpus's documents; the chunks embedded (every document must be)."""
    for doc in corpus["documents"]:
        coffer.add_document(KB, doc["name"], doc["markdown"])
    embedder, _ = coffer.providers.models.configured()
    pending = coffer.index.pending_documents(KB, embedder.identity)
    assert not pending, f"{len(pending)} documents were left unembedded"
    return int(coffer.index.chunk_count(kb=KB))


def _coffer_ingest(service: bool) -> Callable[[Corpus, Path], dict[str, Any]]:
    def run(corpus: Corpus, model_dir: Path) -> dict[str, Any]:
        with _coffer(model_dir, service=service) as (coffer, _, pid):
            with timed(pid) as figures:
                figures["chunks"] = _ingest(coffer, corpus)
            return {**figures, **_service_memory(pid)}

    run.__doc__ = f"Coffer: add_document into a vector knowledge base, {'shared service' if service else 'in-process'}."
    return run


def _coffer_queries(service: bool) -> Callable[[Corpus, Path], dict[str, Any]]:
    def run(corpus: Corpus, model_dir: Path) -> dict[str, Any]:
        with _coffer(model_dir, service=service) as (coffer, embedder, pid):
            idle = [_ms(functools.partial(embedder.embed_query, query)) for query in QUERIES]
            done = threading.Event()
            bulk = threading.Thread(target=lambda: (_ingest(coffer, corpus), done.set()))
            bulk.start()
            vectors, searches = _query_while(done, embedder, coffer)
            bulk.join()
            return {
                "idle_query_ms": statistics.median(idle),
                "during_query_ms": _summary(vectors),
                "during_search_ms": _summary(searches),
                **_service_memory(pid),
            }

    run.__doc__ = "A query's vector, and a whole search, asked every 0.25 s while the corpus is ingested."
    return run


def _query_while(done: threading.Event, embedder: Any, coffer: Any) -> tuple[list[tuple[float, bool]], ...]:
    vectors: list[tuple[float, bool]] = []
    searches: list[tuple[float, bool]] = []
    turn = 0
    while not done.wait(0.25):
        query = QUERIES[turn % len(QUERIES)]
        turn += 1
        vectors.append((_ms(functools.partial(embedder.embed_query, query)), not done.is_set()))
        searches.append((_ms(functools.partial(coffer.search, KB, query, 5)), not done.is_set()))
    return vectors, searches


def _summary(samples: list[tuple[float, bool]]) -> dict[str, Any]:
    timings = [ms for ms, _ in samples]
    return {
        "n": len(samples),
        "before_the_bulk_finished": sum(early for _, early in samples),
        "p50": statistics.median(timings) if timings else None,
        "max": max(timings, default=None),
    }


def _coffer_long(service: bool) -> Callable[[Corpus, Path], dict[str, Any]]:
    def run(corpus: Corpus, model_dir: Path) -> dict[str, Any]:
        with _coffer(model_dir, service=service) as (_, embedder, pid):
            with timed(pid) as figures:
                figures["chunks"] = len(embedder.embed_documents(corpus["long"]))
            return {**figures, **_service_memory(pid)}

    run.__doc__ = f"Coffer's embedder ({'shared service' if service else 'in-process'}) on the long texts."
    return run


def _service_memory(pid: int | None) -> dict[str, Any]:
    memory = proc_memory(pid) if pid else None
    return {"service_peak_rss_mb": memory["hwm_mb"], "service_rss_mb": memory["rss_mb"]} if memory else {}


def _ms(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def _texts(corpus: Corpus) -> list[str]:
    return [text for doc in corpus["documents"] for text in doc["texts"]]


RUNS: dict[str, Callable[[Corpus, Path], dict[str, Any]]] = {
    "fastembed embed() defaults": fastembed_defaults,
    "fastembed, batches of 16 per document (Coffer before)": fastembed_by_document,
    "fastembed parallel (a worker per core)": fastembed_parallel,
    "fastembed, one text per call": fastembed_one_per_call,
    "onnxruntime, sorted, 1,024-token batches": _onnx_batched(1024),
    "onnxruntime, sorted, 4,096-token batches": _onnx_batched(4096),
    "onnxruntime, one text per call": _onnx_one_per_call(spinning=False),
    "onnxruntime, one text per call, spinning threads": _onnx_one_per_call(spinning=True),
    "Coffer ingest, in-process": _coffer_ingest(service=False),
    "Coffer ingest, shared service": _coffer_ingest(service=True),
    "queries during an ingest, in-process": _coffer_queries(service=False),
    "queries during an ingest, shared service": _coffer_queries(service=True),
    "long texts: fastembed, batches of 16 (Coffer before)": fastembed_long,
    "long texts: Coffer in-process": _coffer_long(service=False),
    "long texts: Coffer shared service": _coffer_long(service=True),
}


def main(argv: Sequence[str]) -> None:
    name, corpus_path, model_dir = argv
    corpus = json.loads(Path(corpus_path).read_text(encoding="utf-8"))
    figures = RUNS[name](corpus, Path(model_dir))
    memory = proc_memory(os.getpid())
    if memory:
        figures |= {"peak_rss_mb": memory["hwm_mb"], "rss_mb": memory["rss_mb"]}
    print(json.dumps(figures))


if __name__ == "__main__":
    main(sys.argv[1:])
