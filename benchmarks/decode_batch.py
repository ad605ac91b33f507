"""What one llama.cpp decode of n tokens costs on the embedded model, against one token: the figure that decides whether
speculative decoding (drafting tokens and verifying them in one batch) can save time on this machine.

    python benchmarks/decode_batch.py [--size 0.5b] [--context 900] [--repeats 5]

After a context of ``--context`` tokens, it decodes batches of 1, 2, 3, 5, 8 and 11 tokens at the same position (the
memory after the context removed between tries), with the logits of the last token only and of every token (what
verifying drafts needs), and prints the best time of ``--repeats`` tries next to the time of one token. Speculative
decoding pays only where a batch of n + 1 tokens with all logits costs less than the tokens it accepts, one at a time.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import llama_cpp

from sb3_r2po.llm.embedded import EmbeddedBackend

SIZES = (1, 2, 3, 5, 8, 11)


def fill(batch: Any, tokens: list[int], position: int, logits_all: bool) -> None:
    """Put ``tokens`` into ``batch`` (one sequence, from ``position``), with the logits of the last or of every token."""
    batch.n_tokens = len(tokens)
    for i, token in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, position + i, 1, logits_all
        batch.seq_id[i][0] = 0
    batch.logits[len(tokens) - 1] = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="0.5b")
    parser.add_argument("--context", type=int, default=900)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    backend = EmbeddedBackend(size=args.size)
    llm = backend.load()
    tokens = llm.tokenize(" ".join(str(i) for i in range(4000)).encode())[: args.context + max(SIZES)]
    llm.reset()
    llm.eval(tokens[: args.context])
    memory = llama_cpp.llama_get_memory(llm.ctx)
    batch = llama_cpp.llama_batch_init(max(SIZES), 0, 1)
    print(f"{backend.spec.model}, {backend.threads} threads, after {args.context} tokens; best of {args.repeats}")
    print("| tokens | last logits only ms | x one token | all logits ms | x one token |")
    print("|---|---|---|---|---|")
    one = None
    for n in SIZES:
        best = {}
        for logits_all in (False, True):
            times = []
            for _ in range(args.repeats):
                llama_cpp.llama_memory_seq_rm(memory, -1, args.context, -1)  # the batch of the last try forgotten
                start = time.perf_counter()
                fill(batch, tokens[args.context : args.context + n], args.context, logits_all)
                if llama_cpp.llama_decode(llm.ctx, batch) != 0:
                    raise RuntimeError(f"llama_decode failed for {n} tokens")
                times.append(time.perf_counter() - start)
            best[logits_all] = min(times) * 1000
        one = one or best[False]
        print(f"| {n} | {best[False]:.1f} | {best[False] / one:.2f} | {best[True]:.1f} | {best[True] / one:.2f} |")
    llama_cpp.llama_batch_free(batch)
    backend.close()


if __name__ == "__main__":
    main()
