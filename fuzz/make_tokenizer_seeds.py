#!/usr/bin/env python3
"""Writes small seeds for fuzz_tokenizer_json and fuzz_gguf_tokenizer (run from the repository root):
a byte-level BPE and a SentencePiece BPE vocabulary of a few dozen tokens, as tokenizer.json (with a
text after a NUL byte) and as vocab-only GGUF files, plus a few broken variants."""
import json, os, struct

def b2u():
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    m, n = {}, 0
    for b in range(256):
        if b in keep: m[b] = chr(b)
        else: m[b] = chr(256 + n); n += 1
    return m

def bpe_vocab():
    m = b2u()
    toks = [m[b] for b in range(256)]
    merges = [("t", "h"), ("th", "e"), ("\u0120", "t"), ("\u0120", "a"), ("i", "n"), ("e", "r"), ("\u0120t", "he")]
    for a, b in merges:
        if a + b not in toks: toks.append(a + b)
    if "he" not in toks: toks.append("he")
    merges.insert(0, ("h", "e"))
    toks.append("<|endoftext|>")
    return toks, merges

def spm_vocab():
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    pieces = ["\u2581", "h", "e", "l", "o", "w", "r", "d", "\u2581h", "he", "ll", "llo", "\u2581he", "\u2581hello", "\u2581w", "or", "\u2581wor", "ld", "\u2581world"]
    return toks + pieces

def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f: f.write(data)

def gguf(kvs):
    out = bytearray(b"GGUF") + struct.pack("<IQQ", 3, 0, len(kvs))
    def s(x):
        x = x.encode() if isinstance(x, str) else x
        return struct.pack("<Q", len(x)) + x
    for k, t, v in kvs:
        out += s(k)
        if t == "str": out += struct.pack("<I", 8) + s(v)
        elif t == "u32": out += struct.pack("<II", 4, v)
        elif t == "bool": out += struct.pack("<IB", 7, v)
        elif t == "strs": out += struct.pack("<IIQ", 9, 8, len(v)) + b"".join(s(x) for x in v)
        elif t == "f32s": out += struct.pack("<IIQ", 9, 6, len(v)) + b"".join(struct.pack("<f", x) for x in v)
        elif t == "i32s": out += struct.pack("<IIQ", 9, 5, len(v)) + b"".join(struct.pack("<i", x) for x in v)
    return bytes(out)

toks, merges = bpe_vocab()
tj = {"added_tokens": [{"id": len(toks) - 1, "content": "<|endoftext|>", "special": True}],
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
      "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(toks)}, "merges": ["%s %s" % m for m in merges]}}
write("fuzz/seeds/tokenizer_json/bytelevel.json", json.dumps(tj).encode() + b"\0the thin other <|endoftext|> 123")
tj2 = dict(tj); tj2["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
tj2["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}
write("fuzz/seeds/tokenizer_json/llama3.json", json.dumps(tj2).encode() + b"\0I've 12345 \n\n  x")
sp = spm_vocab()
mg = []
for p in sp[259:]:
    for k in range(1, len(p)):
        if p[:k] in sp and p[k:] in sp: mg.append([p[:k], p[k:]])
tj3 = {"added_tokens": [{"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True}],
       "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
       "pre_tokenizer": None,
       "model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>", "vocab": {t: i for i, t in enumerate(sp)}, "merges": mg}}
write("fuzz/seeds/tokenizer_json/spm.json", json.dumps(tj3).encode() + b"\0hello world \xc3\xa9")
tj4 = dict(tj3); tj4["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}; del tj4["normalizer"]
write("fuzz/seeds/tokenizer_json/metaspace.json", json.dumps(tj4).encode())
write("fuzz/seeds/tokenizer_json/bad_merge.json", b'{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a q"]}}')

bt = [m for m in toks]
write("fuzz/seeds/gguf_tokenizer/gpt2.gguf", gguf([("tokenizer.ggml.model", "str", "gpt2"), ("tokenizer.ggml.pre", "str", "gpt-2"),
      ("tokenizer.ggml.tokens", "strs", bt), ("tokenizer.ggml.token_type", "i32s", [1] * (len(bt) - 1) + [3]),
      ("tokenizer.ggml.merges", "strs", ["%s %s" % m for m in merges]), ("tokenizer.ggml.eos_token_id", "u32", len(bt) - 1)]))
write("fuzz/seeds/gguf_tokenizer/deepseek.gguf", gguf([("tokenizer.ggml.model", "str", "gpt2"), ("tokenizer.ggml.pre", "str", "deepseek-llm"),
      ("tokenizer.ggml.tokens", "strs", bt), ("tokenizer.ggml.merges", "strs", ["%s %s" % m for m in merges]),
      ("tokenizer.ggml.add_bos_token", "bool", 1), ("tokenizer.ggml.bos_token_id", "u32", len(bt) - 1)]))
types = [2, 3, 3] + [6] * 256 + [1] * (len(sp) - 259)
scores = [0.0] * 259 + [-float(i) for i in range(len(sp) - 259)]
write("fuzz/seeds/gguf_tokenizer/llama.gguf", gguf([("tokenizer.ggml.model", "str", "llama"), ("tokenizer.ggml.tokens", "strs", sp),
      ("tokenizer.ggml.scores", "f32s", scores), ("tokenizer.ggml.token_type", "i32s", types), ("tokenizer.ggml.add_bos_token", "bool", 1)]))
write("fuzz/seeds/gguf_tokenizer/mismatch.gguf", gguf([("tokenizer.ggml.model", "str", "llama"), ("tokenizer.ggml.tokens", "strs", sp),
      ("tokenizer.ggml.scores", "f32s", scores[:-1])]))
