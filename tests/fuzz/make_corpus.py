#!/usr/bin/env python3
# make_corpus.py: writes the seed corpora in corpus/<target>/ (committed; rerun only to change
# them). Small valid files of each format, built here to the formats' definitions (safetensors,
# llm.c shards, GPT-2 tokenizer files, blutrain config / checkpoint metadata, store requests),
# plus a few near-misses, so the fuzzers start from inside the parsers. A few KB in all.
import json, os, struct, zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

# --- safetensors: 8-byte header length, JSON header padded to 8, data
def safetensors(entries, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, payload) in entries.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data

put("safetensors_fuzz", "two_tensors", safetensors({
    "w": ("F32", [2, 3], struct.pack("<6f", *range(6))),
    "b": ("BF16", [3], b"\x80\x3f\x00\x40\x40\x40")}, {"format": "pt"}))
put("safetensors_fuzz", "all_dtypes", safetensors({
    "a": ("F64", [1], struct.pack("<d", 1.5)), "b": ("F16", [2], b"\x00\x3c\x00\x40"),
    "c": ("I32", [2], struct.pack("<2i", -1, 7)), "d": ("I64", [1], struct.pack("<q", 5)),
    "e": ("U16", [1, 1], b"\x01\x00"), "z": ("F32", [0, 4], b"")}))
# blutrain's checksummed form (Note [Safetensors checksums]): CRC keys the reader verifies (the
# values here are deliberately wrong so the mismatch paths run; the writer's real ones come from
# blutrain checkpoints).
put("safetensors_fuzz", "checksum_keys", safetensors({"x": ("F32", [1], b"\x00\x00\x80\x3f")},
    {"blu.crc32c.x": "00000000", "blu.header_crc32c": "deadbeef"}))
put("safetensors_fuzz", "lying_length", struct.pack("<Q", 1 << 40) + b'{"a":{}}')

# --- llm.c token shards: 256 int32 header words (magic, version, count), uint16 tokens
def shard(tokens, magic=20240520, version=1, count=None):
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = magic, version, len(tokens) if count is None else count
    return struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(tokens), *tokens)

put("token_shard_fuzz", "five_tokens", shard([50256, 15496, 11, 995, 0]))
put("token_shard_fuzz", "empty", shard([]))
put("token_shard_fuzz", "count_lies", shard([1, 2], count=1000))
put("token_shard_fuzz", "id_past_vocab", shard([65535]))

# --- tokenizer files: encoder.json NUL vocab.bpe (GPT-2's byte alphabet)
def spell(b):
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = [c for c in range(256) if c not in printable]
    return chr(b) if b in printable else chr(256 + extra.index(b))

vocab = {spell(b): b for b in range(256)}
for i, t in enumerate(["\u0120t", "he", "\u0120the", "in"]):
    vocab[t] = 256 + i
merges = "#version: 0.2\n\u0120 t\nh e\n\u0120t he\ni n\n"
enc = json.dumps(vocab, ensure_ascii=False, separators=(",", ":"))
put("tokenizer_files_fuzz", "bytes_and_4_merges", enc + "\0" + merges)

# --- tokenizer encoder: text
put("tokenizer_encode_fuzz", "english", "Hello, world! It's the 2nd test -- isn't it?\n\n  ok")
put("tokenizer_encode_fuzz", "unicode", "caf\u00e9 \u65e5\u672c\u8a9e \U0001F600 123\u0661\u0662 \u00a0x\r\n")
put("tokenizer_encode_fuzz", "invalid_utf8", b"ab\xff\xfe\xc3(\xe2\x82 \xf0\x9f\x98 ok")

# --- config files (blutrain --config)
put("config_file_fuzz", "cpu_run", "# a CPU run\nmodel = tiny\ndevice = cpu\nbatch_size = 4\nseq-len = 64\n"
    "lr = 2e-3\nmax-steps = 10\nseed = 42\nplot = false\nprompt = \"Once upon\"\n")
put("config_file_fuzz", "dp_and_batch", "dp = 2\nzero = 1\nengine = autograd\ntotal-batch-tokens = 1024\n"
    "block-size = 256\nwarmup-steps = -1\ntime-limit = 1.5\nval-every = -1\n")

# --- checkpoint metadata: checksums.crc32c NUL state.json
state = ('{\n  "blutrain_version": "0.1.0",\n  "model": "tiny",\n  "step": 10,\n  "adamw_step": 10,\n'
         '  "data_cursor": {"shard": 0, "position": 2560, "epoch": 0},\n  "sample_rng": "12345",\n'
         '  "train_losses": [[1,10.9],[10,7.25]],\n  "val_losses": [[10,7.5]],\n  "config": "model = \\"tiny\\"\\n"\n}\n')
head = "# blutrain checkpoint manifest v1: crc32c bytes name\n"
# CRC-32C (Castagnoli), as blutensor/crc32c.h computes it.
def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
good = head + "%08x %d state.json\n" % (crc32c(state.encode()), len(state))
put("checkpoint_fuzz", "verified_state", good + "\0" + state)
put("checkpoint_fuzz", "no_manifest_entry", head + "00000000 3 model.safetensors\n" + "\0" + state)

# --- token shards with a checksum (Note [Shard checksums]): word 3 "C32C", word 4 the tokens' CRC-32C
def shard_crc(tokens, crc=None):
    body = struct.pack("<%dH" % len(tokens), *tokens)
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = 20240520, 1, len(tokens)
    hdr[3] = struct.unpack("<i", b"C32C")[0]
    hdr[4] = struct.unpack("<i", struct.pack("<I", crc32c(body) if crc is None else crc))[0]
    return struct.pack("<256i", *hdr) + body
put("token_shard_fuzz", "checksummed", shard_crc([50256, 15496, 11, 995, 0]))
put("token_shard_fuzz", "checksum_mismatch", shard_crc([50256, 15496, 11, 995, 0], crc=0xdeadbeef))

# --- store requests: command byte, int64 lengths, bytes (Note [Store protocol])
def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<q", len(b)) + b
q = lambda v: struct.pack("<q", v)
put("store_protocol_fuzz", "session",
    b"\x01" + s("rank0/addr") + s(b"127.0.0.1:1234") + b"\x03" + s("count") + q(1) + b"\x03" + s("count") + q(-3)
    + b"\x02" + s("rank0/addr") + q(100) + b"\x04" + q(2) + s("a") + s("count") + q(50)
    + b"\x05" + q(1) + s("count") + b"\x06" + s("count"))
put("store_protocol_fuzz", "add_to_text", b"\x01" + s("k") + s("abc") + b"\x03" + s("k") + q(1))
put("store_protocol_fuzz", "lying_length", b"\x01" + s("k") + q(1 << 31) + b"xy")
