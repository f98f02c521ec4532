#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/fuzz_llama2c.c into fuzz/seeds/llama2c (each file under 4 KB):
tiny v0 / v1 checkpoints (shared and separate classifier), a version-2 header,
a split tokenizer input (2-byte length, tokenizer.bin image, text), and structured recipes
('S', 8 bytes choosing a consistent header, then bytes that fill the weights cyclically)."""
import os
import struct

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "llama2c")
os.makedirs(here, exist_ok=True)


def floats(dim, hid, L, H, KV, V, S, shared, v1):
    hd = dim // H
    kv = hd * KV
    n = V * dim + L * (2 * dim + 2 * dim * dim + 2 * kv * dim + 3 * hid * dim) + dim
    if not v1:
        n += S * hd
    if not shared:
        n += V * dim
    return struct.pack("<%df" % n, *[((i * 37) % 101 - 50) / 64.0 for i in range(n)])


def ckpt(dims, shared, v1):
    dim, hid, L, H, KV, V, S = dims
    if v1:
        head = struct.pack("<Ii7iB", 0x616B3432, 1, dim, hid, L, H, KV, V, S, int(shared))
        head += b"\0" * (256 - len(head))
    else:
        head = struct.pack("<7i", dim, hid, L, H, KV, V if shared else -V, S)
    return head + floats(dim, hid, L, H, KV, V, S, shared, v1)


def tokenizer():
    pieces = [(0.0, b"<unk>"), (0.0, b"<s>"), (0.0, b"</s>")]
    pieces += [(0.0, b"<0x%02X>" % i) for i in range(256)]
    pieces += [(-1.0, b" "), (-2.0, b"a"), (-3.0, b"b"), (-1.0, b"ab"), (-1.0, b" a"), (-4.0, b"\xc3\xa9")]
    out = struct.pack("<I", 6)
    for score, p in pieces:
        out += struct.pack("<fI", score, len(p)) + p
    return out


seeds = {
    "v0_separate.bin": ckpt((4, 6, 1, 2, 1, 5, 2), False, False),
    "v0_shared_gqa.bin": ckpt((8, 4, 1, 4, 2, 6, 2), True, False),
    "v1_separate.bin": ckpt((4, 6, 1, 2, 1, 5, 2), False, True),
    "v1_shared.bin": ckpt((4, 4, 1, 1, 1, 3, 2), True, True),
    "v2_header.bin": struct.pack("<Ii7iBi", 0x616B3432, 2, 64, 172, 5, 8, 4, 512, 512, 1, 64).ljust(256, b"\0"),
}
tok = tokenizer()
seeds["tokenizer_text.bin"] = struct.pack("<H", len(tok)) + tok + "ab a\u00e9\u00e9 ba\xff".encode("utf-8", "surrogateescape") + b"\xff\x80"
# 'S', dim, heads, hidden, layers, GQA, vocab, flags (bit 0: own classifier, bit 1: v1, bit 2: other format,
# bit 3: f16/bf16), context (bit 7: bf16)
weights = struct.pack("<8f", 1.0, -0.5, 0.25, 2.0, -3.0, 0.125, 1e-3, -7.0)
seeds["structured_v0_shared"] = b"S\x01\x01\x05\x01\x00\x10\x0c\x05" + weights
seeds["structured_v0_separate_gqa"] = b"S\x03\x02\x07\x02\x01\x21\x05\x0b" + weights
seeds["structured_v1_shared"] = b"S\x02\x01\x09\x02\x00\x07\x0a\x83" + weights
seeds["structured_v1_separate"] = b"S\x00\x02\x04\x00\x01\x05\x0f\x02" + weights + b"\x00\x00\xc0\x7f\x00\x00\x80\x7f"
for name, data in seeds.items():
    assert len(data) < 4096, name
    with open(os.path.join(here, name), "wb") as f:
        f.write(data)
    print("%-22s %5d bytes" % (name, len(data)))
