"""Tokenization throughput on the embedded corpus: the shard writer vs a plain `encode_batch` loop.

    .venv/bin/python benchmarks/tokenize_shards.py [--workers 2] [--repeats 3] [--scales 1,4]

Trains the default BPE (vocab 8192) once, then times, on the same documents (the 2,378 chapters of
the embedded corpus, repeated `scale` times to show how fixed start-up costs amortise):

* ``encode_batch`` loop -- one process, batches of 256 documents, ``tokenizers``' own Rust thread
  pool on (its default) and off (``TOKENIZERS_PARALLELISM=false``);
* `write_shards` with workers=1 (in process) and workers=N (spawned processes, one Rust thread
  each): tokenize, append EOS, split by document, write shards + offsets, sha256 everything.

Tokens count EOS (one per document) in every row. Times are the median of --repeats rounds, each
round running every method once; worker start-up is inside the timed region, as it is in
`atlas data prepare`. CPU seconds (all threads of this process plus the reaped worker processes)
are reported too: unlike wall time they barely move when other jobs share the machine. Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from atlas_data import Document, SourceConfig, TokenizerConfig, TokenizerInfo, iter_documents
from atlas_data.shards import write_shards
from atlas_data.tokenizer import build_tokenizer


def _cpu_seconds() -> float:
    """CPU time of this process (all threads) plus its reaped children (the spawned workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _interleaved_medians(fns: list[Callable[[], int]], repeats: int) -> list[tuple[float, float, int]]:
    """Median wall seconds, median CPU seconds and token count per function. Each round runs every
    function once, so load from other processes on the machine hits all rows alike."""
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    tokens = [0] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start, cpu_start = time.perf_counter(), _cpu_seconds()
            tokens[i] = fn()
            wall[i].append(time.perf_counter() - start)
            cpu[i].append(_cpu_seconds() - cpu_start)
    return [(statistics.median(w), statistics.median(c), n) for w, c, n in zip(wall, cpu, tokens)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scales", default="1,4", help="comma-separated corpus repetitions")
    args = parser.parse_args()

    corpus = list(iter_documents(SourceConfig(versions=("kjv", "asv"))))
    work = Path(tempfile.mkdtemp(prefix="atlas-bench-"))
    info = build_tokenizer(TokenizerConfig(vocab_size=8192), [d.text for d in corpus], work)
    print(f"{len(corpus):,} documents, {sum(len(d.text) for d in corpus) / 1e6:.2f} M characters, ", end="")
    print(f"BPE vocab {info.vocab_size}; {platform.machine()}, {os.cpu_count()} CPUs, median of {args.repeats}\n")
    print("| corpus | method | tokens | wall s | tokens/s | vs `encode_batch` loop | CPU s | tokens/CPU-s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for scale in (int(s) for s in args.scales.split(",")):
        _run(corpus * scale, f"x{scale}", work, info, args.workers, args.repeats)
    shutil.rmtree(work, ignore_errors=True)


def _run(docs: list[Document], label: str, work: Path, info: TokenizerInfo, workers: int, repeats: int) -> None:
    from tokenizers import Tokenizer

    texts = [d.text for d in docs]
    tokenizer_file = work / info.file
    tok = Tokenizer.from_file(str(tokenizer_file))

    def encode_loop() -> int:
        n = 0
        for i in range(0, len(texts), 256):
            n += sum(len(e.ids) + 1 for e in tok.encode_batch(texts[i : i + 256], add_special_tokens=False))
        return n

    def encode_loop_one_thread() -> int:
        # tokenizers reads this variable on every call, so it can be flipped per row.
        previous = os.environ.get("TOKENIZERS_PARALLELISM")
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        try:
            return encode_loop()
        finally:
            os.environ.pop("TOKENIZERS_PARALLELISM")
            if previous is not None:
                os.environ["TOKENIZERS_PARALLELISM"] = previous

    def writer(n_workers: int) -> Callable[[], int]:
        def run() -> int:
            with tempfile.TemporaryDirectory(dir=work) as out:
                splits = write_shards(
                    docs,
                    Path(out),
                    tokenizer_file=tokenizer_file,
                    eos_id=info.eos_id,
                    vocab_size=info.vocab_size,
                    shard_tokens=1 << 20,
                    validation_fraction=0.02,
                    seed=1234,
                    workers=n_workers,
                    progress=False,
                )
            return sum(s.n_tokens for s in splits.values())

        return run

    rows = [
        ("`encode_batch` loop, 1 process, tokenizers threads on (default)", encode_loop),
        ("`encode_batch` loop, 1 process, 1 thread", encode_loop_one_thread),
        ("shard writer, workers=1 (in process, tokenizers threads on)", writer(1)),
        (f"shard writer, workers={workers} (spawned processes, 1 thread each)", writer(workers)),
    ]
    results = [(name, *r) for (name, _), r in zip(rows, _interleaved_medians([fn for _, fn in rows], repeats))]
    base = results[0][3] / results[0][1]
    for name, seconds, cpu, tokens in results:
        rate = tokens / seconds
        print(
            f"| {label} | {name} | {tokens:,} | {seconds:.2f} | {rate / 1e6:.2f} M | {rate / base:.2f}x "
            f"| {cpu:.2f} | {tokens / cpu / 1e6:.2f} M |"
        )


if __name__ == "__main__":
    main()
