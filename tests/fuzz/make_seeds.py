"""Writes the committed seed corpora of the fuzz targets (tests/fuzz/seeds/<target>/) from the test
fixtures in tests/data and a few hand-made files; deterministic, so rerunning it changes nothing.

    python3 tests/fuzz/make_seeds.py
"""
import glob
import json
import os
import random
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
SEEDS = os.path.join(HERE, "seeds")


def put(target, name, payload):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(payload)


def escaped(b):
    """A string as FuzzedDataProvider.ConsumeRandomLengthString reads it: backslashes doubled, ended by
    a backslash and another byte."""
    return b.replace(b"\\", b"\\\\") + b"\\;"


def read(path):
    with open(path, "rb") as f:
        return f.read()


def safetensors(tensors, metadata=None):
    header, offset, body = {}, 0, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        body += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + body


def gguf(metadata, tensors, alignment=32):
    """A GGUF v3 file: metadata [(key, type id, packed value bytes)], tensors [(name, dims innermost first,
    ggml type, raw bytes)], each tensor at the next multiple of the alignment."""
    def s(text):
        b = text.encode()
        return struct.pack("<Q", len(b)) + b
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, vtype, raw in metadata:
        head += s(key) + struct.pack("<I", vtype) + raw
    body, offset = b"", 0
    for name, dims, ttype, raw in tensors:
        head += s(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        head += struct.pack("<IQ", ttype, offset)
        pad = -(len(body) + len(raw)) % alignment
        body += raw + bytes(pad)
        offset = len(body)
    head += bytes(-len(head) % alignment)
    return head + body


def main():
    rng = random.Random(7)
    # safetensors: the small fixtures whole, and hand-made files of every float dtype.
    for path in sorted(glob.glob(os.path.join(DATA, "hf", "*", "model.safetensors"))):
        if os.path.getsize(path) <= 64 * 1024:
            put("safetensors", os.path.basename(os.path.dirname(path)), read(path))
    floats = [rng.gauss(0, 1) for _ in range(12)]
    put("safetensors", "dtypes", safetensors({
        "a": ("F32", [3, 4], struct.pack("<12f", *floats)),
        "b": ("F64", [2, 2], struct.pack("<4d", *floats[:4])),
        "c": ("F16", [4], struct.pack("<4e", *floats[:4])),
        "d": ("BF16", [2], struct.pack("<2f", *floats[:2])[2:4] + struct.pack("<2f", *floats[:2])[6:8]),
        "e": ("I64", [2], struct.pack("<2q", 1, 2)),
        "s": ("F32", [], struct.pack("<f", 1.5)),
    }, {"format": "pt"}))
    # GGUF: metadata of every scalar type and a string array, and F32, F16, BF16, Q8_0 and Q4_0 tensors.
    def gs(text):
        b = text.encode()
        return struct.pack("<Q", len(b)) + b
    meta = [("general.architecture", 8, gs("llama")), ("u8", 0, b"\x07"), ("i16", 3, struct.pack("<h", -3)),
            ("u32", 4, struct.pack("<I", 64)), ("f32", 6, struct.pack("<f", 1e-6)), ("yes", 7, b"\x01"),
            ("u64", 10, struct.pack("<Q", 1 << 40)), ("f64", 12, struct.pack("<d", 0.5)),
            ("tokens", 9, struct.pack("<IQ", 8, 3) + gs("a") + gs("b") + gs("ab")),
            ("heads", 9, struct.pack("<IQ", 5, 2) + struct.pack("<2i", 4, 2))]
    q8 = struct.pack("<e", 0.5) + bytes((j * 7) & 0xFF for j in range(32))
    q4 = struct.pack("<e", 0.25) + bytes(range(16))
    put("gguf", "every_type", gguf(meta, [
        ("f32", [3, 2], 0, struct.pack("<6f", 0.5, -1.25, 3.0, 0.0, -0.0, 1e-3)),
        ("f16", [4], 1, struct.pack("<4e", 1.0, -2.0, 0.5, 65504.0)),
        ("bf16", [2], 30, struct.pack("<2H", 0x3FC0, 0xC000)),
        ("q8_0", [32, 2], 8, q8 + q8),
        ("q4_0", [64], 2, q4 + q4)]))
    # config.json of every family.
    for path in sorted(glob.glob(os.path.join(DATA, "**", "config.json"), recursive=True)):
        name = os.path.relpath(os.path.dirname(path), DATA).replace(os.sep, "_")
        put("hf_config", name, read(path))
    per_layer = json.loads(read(os.path.join(DATA, "hf", "llama", "config.json")))
    per_layer.update({"model_type": "lwcl", "lwcl_family": "llama",
                      "lwcl_layers": [{"n_heads": 2, "n_kv_heads": 1, "ffn": 8}] * per_layer["num_hidden_layers"]})
    put("hf_config", "lwcl_form", json.dumps(per_layer).encode())
    # Tokenizers: (kind byte last) vocab.json + merges.txt, tokenizer.json, vocab.txt, each with a text.
    text = "The mill, and the river; 3 Fish-ponds \u00e9t\u00e9 \u3000 ok".encode()
    tok = os.path.join(DATA, "tokenizer")
    put("tokenizers", "bpe_files", escaped(read(os.path.join(tok, "bpe", "vocab.json"))) +
        escaped(read(os.path.join(tok, "bpe", "merges.txt"))) + text + bytes([0]))
    put("tokenizers", "tokenizer_json", escaped(read(os.path.join(tok, "bpe", "tokenizer.json"))) + text + bytes([1]))
    put("tokenizers", "wordpiece", escaped(read(os.path.join(tok, "wordpiece", "vocab.txt"))) + text + bytes([2]))
    # Token shards: the layout of data/shards.hpp (magic, version, token width, vocab, count), 2- and
    # 4-byte tokens.
    for width, vocab in ((2, 1024), (4, 70000)):
        ids = [rng.randrange(vocab) for _ in range(40)]
        fmt = "<40H" if width == 2 else "<40I"
        header = b"LWCLTOK1" + struct.pack("<IIQQ", 1, width, vocab, len(ids))
        put("shards", "width%d" % width, header + struct.pack(fmt, *ids))
    # Codecs: (codec, dtype, raw size taken from the end) raw normal floats, with the specials.
    specials = struct.pack("<6f", 0.0, -0.0, float("inf"), float("-inf"), 1e-40, -3e-39) + \
        struct.pack("<I", 0x7fc01234) + struct.pack("<I", 0xff800001)
    for codec in (0, 1):
        for bf16 in (0, 1):
            raw = struct.pack("<256f", *[rng.gauss(0, 0.05) for _ in range(256)]) + specials
            put("codecs", "codec%d_bf16_%d" % (codec, bf16), raw + struct.pack("<H", 264) + bytes([bf16, codec]))
    run_files(rng)


def feature_record(boundary, src, batch, dtype, shape, payload, version=0, enc=0, raw_bytes=None):
    """A disk cache record as docs/feature-cache.md lays it out (format 2, CRC-32s as zlib computes them)."""
    extents = list(shape) + [0] * (6 - len(shape))
    if raw_bytes is None:
        raw_bytes = len(payload)
    head = b"LWCLFEA1" + struct.pack("<IIqqBBBBIQ6qQQ", 2, 128, boundary, batch, src, dtype, enc, len(shape), 0, version,
                                     *extents, raw_bytes, len(payload))
    head += struct.pack("<I", zlib.crc32(payload)) + bytes(8)
    head += struct.pack("<I", zlib.crc32(head))
    assert len(head) == 128
    return head + payload


def run_files(rng):
    """Seeds of fuzz_run_files: the first byte picks the reader (tests/fuzz/fuzz_run_files.cpp)."""
    f32 = struct.pack("<32f", *[rng.gauss(0, 1) for _ in range(32)])
    put("run_files", "record_teacher_f32", bytes([0]) + feature_record(0, 0, 0, 0, [2, 16], f32))
    put("run_files", "record_student_f32", bytes([1]) + feature_record(3, 1, 5, 0, [1, 2, 16], f32, version=7))
    bf16 = b"".join(struct.pack("<f", rng.gauss(0, 1))[2:] for _ in range(32))
    put("run_files", "record_bf16", bytes([0]) + feature_record(1, 0, 2, 2, [32], bf16))
    # A checkpoint's state.json with every field write_checkpoint writes (tests/data/pipeline_checkpoint_state.json;
    # tests/distill/test_checkpoint.cpp reads it back), made to belong to the target's 16-parameter student.
    state = json.loads(read(os.path.join(DATA, "pipeline_checkpoint_state.json")))
    state["student_parameters"] = 16
    state["fingerprint"] = {"lr": 0.004}
    put("run_files", "pipeline_state", bytes([2]) + json.dumps(state, sort_keys=True).encode())
    put("run_files", "pipeline_student", bytes([3]) + struct.pack("<16d", *([0.25] * 16)))
    moments = struct.pack("<48f", *[abs(rng.gauss(0, 1e-3)) for _ in range(48)])
    put("run_files", "adamw_f32", bytes([4]) + b"LWCLADW1" + struct.pack("<IIqq", 1, 0, 24, 3) + moments)
    put("run_files", "teacher_state", bytes([5]) + b'{"step": 40}\n')

    # GeLaCo's search checkpoint for fuzz_search_checkpoint's searcher (two layers, 8 genes each,
    # population 8, seed 1, residual+kl, layers): genes drawn here, terms made up (the reader does not
    # measure them again).
    rng = random.Random(11)
    genes = lambda: [round(rng.random(), 6) for _ in range(8)]
    archive = [{"genes": genes(), "terms": [round(rng.uniform(-1, 1), 6), 1.0, round(rng.uniform(0, 2), 6), 0.0]}
               for _ in range(5)]
    state = {"format": "lwcl-gelaco-search", "version": 1, "seed": 1, "teacher_layers": 2, "multi_objective": True,
             "fitness": "residual+kl", "compression": "layers", "fixed_alpha": None, "generation": 3,
             "evaluations": 5, "cache_hits": 19, "population": [genes() for _ in range(8)], "archive": archive}
    h = 1469598103934665603  # FNV-1a over the harness's calibration ids, as searcher::settings_json hashes them
    for i in (1, 5, 9, 13):
        for b in range(4):
            h = ((h ^ ((i >> (8 * b)) & 0xFF)) * 1099511628211) % (1 << 64)
    state["settings"] = {"needs": 5, "probe_quality": 0.375, "top_k": 16,
                         "calibration": {"B": 1, "T": 4, "tokens": 4, "fnv1a": h}, "target_removed": 0,
                         "crossover": 0.9, "eta_c": 20.0, "mutation": 1.0 / 6.0, "eta_m": 20.0}
    put("search_checkpoint", "search_state", json.dumps(state).encode() + b"\n")


if __name__ == "__main__":
    main()
