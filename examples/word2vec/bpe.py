"""GPT-2 byte-level BPE in pure Python, from the original `encoder.json` + `vocab.bpe` files.

The project's own tokenizer is tiktoken's `r50k_base` (datasets/src/tokens.rs). This is the same
algorithm (bytes -> printable unicode stand-ins -> lowest-rank merges first) with one difference:
the pre-tokenizer uses Python's `re`, which has no `\\p{L}` / `\\p{N}`, so letters are `[^\\W\\d_]`
and numbers `\\d`. On English text (WikiText) that matches GPT-2's pattern except for rare Unicode
numerals (superscripts, fractions), which are grouped with letters here. "Hello world" ->
[15496, 995] either way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# GPT-2's split: contractions, letters, digits, other symbols (with an optional leading space),
# trailing whitespace, whitespace. `_` belongs to the symbols (it is \w for `re`).
_SPLIT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def _byte_symbols() -> dict[int, str]:
    """Each byte -> a printable character: printable Latin-1 bytes stand for themselves, the rest
    map to 256, 257, ... in byte order (GPT-2's table)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class GPT2BPE:
    def __init__(self, directory: Path):
        directory = Path(directory)
        self.encoder: dict[str, int] = json.loads((directory / "encoder.json").read_text(encoding="utf-8"))
        lines = (directory / "vocab.bpe").read_text(encoding="utf-8").split("\n")
        merges = [tuple(line.split()) for line in lines[1:] if line.strip()]  # line 0: "#version"
        self.ranks: dict[tuple[str, str], int] = {m: i for i, m in enumerate(merges)}
        self.bytes = _byte_symbols()
        self.cache: dict[str, list[int]] = {}

    def _merge(self, word: str) -> list[int]:
        parts = list(word)
        while len(parts) > 1:
            best, best_rank = None, None
            for pair in zip(parts, parts[1:]):
                r = self.ranks.get(pair)
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = pair, r
            if best is None:
                break
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return [self.encoder[p] for p in parts]

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in _SPLIT.findall(text):
            word = "".join(self.bytes[b] for b in piece.encode("utf-8"))
            got = self.cache.get(word)
            if got is None:
                got = self.cache[word] = self._merge(word)
            ids.extend(got)
        return ids
