#!/usr/bin/env python3
"""shards.py: llm.c token shards (Note [Shard format] in blutrain/include/blutrain/data.h: 256 int32
header words [magic 20240520, version 1, token count], then uint16 tokens), a writer for a
deterministic random shard set, and a reader that yields batches in blutrain's DataLoader order
(Note [Same batches as blutrain] in torch_gpt2_train.py). Pure Python + the array module (numpy
is used when present, for speed); no torch.

  python3 bench/e2e/shards.py write DIR [--tokens N] [--seed S] [--name NAME]
"""
import argparse, array, os, random, struct, sys

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
HEADER_BYTES = HEADER_INTS * 4


def write_shard(path, tokens):
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    body = array.array("H", tokens)
    if sys.byteorder != "little":
        body.byteswap()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(body.tobytes())
    os.replace(tmp, path)


def read_shard(path):
    """The shard's tokens as a sequence of ints (numpy uint16 memmap when numpy is present)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = struct.unpack("<3i", f.read(12))
    if size < HEADER_BYTES:
        raise ValueError(f"token shard '{path}': {size} bytes, shorter than the header")
    if head[0] != MAGIC:
        raise ValueError(f"token shard '{path}': bad magic {head[0]} (expected {MAGIC})")
    if head[1] != VERSION:
        raise ValueError(f"token shard '{path}': unsupported version {head[1]}")
    if size != HEADER_BYTES + 2 * head[2]:
        raise ValueError(f"token shard '{path}': header says {head[2]} tokens but the file has {size} bytes")
    try:
        import numpy as np
        return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(head[2],))
    except ImportError:
        a = array.array("H")
        with open(path, "rb") as f:
            f.seek(HEADER_BYTES)
            a.frombytes(f.read())
        if sys.byteorder != "little":
            a.byteswap()
        return a


def find_train_shards(directory, name=""):
    """blutrain's find_shard_set: the one prefix with *_train_*.bin files (or `name`), sorted by path."""
    files = sorted(os.listdir(directory))
    if not name:
        prefixes = sorted({f[: f.find("_train_")] for f in files if "_train_" in f and f.endswith(".bin")})
        if len(prefixes) != 1:
            raise ValueError(f"data: '{directory}' has {len(prefixes)} shard prefixes; pass --data-name")
        name = prefixes[0]
    pre = name + "_train_"
    paths = sorted(os.path.join(directory, f) for f in files if f.startswith(pre) and f.endswith(".bin"))
    if not paths:
        raise ValueError(f"data: no shards '{pre}*.bin' in '{directory}'")
    return paths


class ShardLoader:
    """DataLoader (world size 1) order: cursor (shard 0, position 0); a batch is tokens[pos, pos+B*T]
    (+1 for the targets); pos += B*T; past pos + B*T + 1 > size the next shard (wrapping)."""

    def __init__(self, directory, name, B, T, vocab):
        self.paths = find_train_shards(directory, name)
        self.n = B * T
        self.vocab = vocab
        self.sizes = []
        for p in self.paths:
            s = len(read_shard(p))
            if s < self.n + 1:
                raise ValueError(f"shard '{p}' has {s} tokens, fewer than one batch needs ({self.n + 1})")
            self.sizes.append(s)
        self.shard, self.pos, self.epoch = 0, 0, 0
        self.tokens = read_shard(self.paths[0])

    def next_batch(self):
        """(inputs, targets) as flat int64 numpy arrays (lists without numpy) of B*T entries."""
        w = self.tokens[self.pos: self.pos + self.n + 1]
        try:
            import numpy as np
            w = np.asarray(w, dtype=np.int64)
            if w.max() >= self.vocab:
                raise ValueError(f"shard '{self.paths[self.shard]}': token id {int(w.max())} >= vocab {self.vocab}")
            x, y = w[:-1].copy(), w[1:].copy()
        except ImportError:
            w = list(w)
            x, y = w[:-1], w[1:]
        self.pos += self.n
        if self.pos + self.n + 1 > self.sizes[self.shard]:
            self.pos = 0
            self.shard += 1
            if self.shard == len(self.paths):
                self.shard, self.epoch = 0, self.epoch + 1
            self.tokens = read_shard(self.paths[self.shard])
        return x, y


def markov_tokens(rng, n, vocab, states=1024, follow=0.75):
    """Learnable random text: 1024 token ids, each followed by its fixed successor with probability
    0.75 (else a uniform pick), so the loss falls over a 200-step fidelity run instead of sitting
    at ln(vocab) as on uniform tokens."""
    ids = rng.sample(range(vocab), states)
    succ = [rng.randrange(states) for _ in range(states)]
    out, s = [], rng.randrange(states)
    for _ in range(n):
        out.append(ids[s])
        s = succ[s] if rng.random() < follow else rng.randrange(states)
    return out


def write_random_shards(directory, tokens, seed=1234, name="rand", vocab=50257, val_tokens=0):
    """A deterministic random shard set: NAME_train_000000.bin (+ NAME_val_000000.bin)."""
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(seed)
    paths = []
    for split, n in (("train", tokens), ("val", val_tokens)):
        if n <= 0:
            continue
        p = os.path.join(directory, f"{name}_{split}_000000.bin")
        write_shard(p, markov_tokens(rng, n, vocab))
        paths.append(p)
    return paths


def main():
    ap = argparse.ArgumentParser(description="write a deterministic random llm.c shard set")
    ap.add_argument("cmd", choices=["write"])
    ap.add_argument("dir")
    ap.add_argument("--tokens", type=int, default=(200 + 1) * 16 * 1024 + 1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--name", default="rand")
    a = ap.parse_args()
    for p in write_random_shards(a.dir, a.tokens, a.seed, a.name):
        print(p)


if __name__ == "__main__":
    main()
