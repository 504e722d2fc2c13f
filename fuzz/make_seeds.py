#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/): a few small valid inputs
of each format, from which libFuzzer's mutations start. Deterministic; rerun after a format
change and check the result in. Usage: fuzz/make_seeds.py"""
import gzip
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """The two inputs of a safetensors file (fuzz::safetensors_file in common.hpp): the file as
    it is after an even byte, and after an odd byte its header, a NUL and its data.
    tensors: (name, dtype, shape, raw bytes) in file order."""
    header, offset, data = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return b"\x00" + struct.pack("<Q", len(head)) + head + data, b"\x01" + head + b"\x00" + data


def write_safetensors(target, name, files):
    write(target, name, files[0])
    write(target, name + "_assembled", files[1])


def i64(v):
    return ("I64", [], struct.pack("<q", v))


# safetensors: every dtype, a 0-dim, an empty and a 2-d tensor, metadata.
write_safetensors("safetensors", "dtypes", safetensors([
    ("f32", "F32", [2], struct.pack("<2f", 1.5, -2)),
    ("f16", "F16", [2], struct.pack("<2H", 0x3C00, 0xC000)),
    ("bf16", "BF16", [1], struct.pack("<H", 0x3F80)),
    ("f64", "F64", [], struct.pack("<d", 0.1)),
    ("i64", "I64", [1], struct.pack("<q", -7)),
    ("i32", "I32", [2], struct.pack("<2i", 3, 4)),
    ("u8", "U8", [3], bytes([0, 128, 255])),
    ("bool", "BOOL", [2], bytes([0, 1])),
]))
write_safetensors("safetensors", "shapes", safetensors([
    ("w", "F32", [2, 3], struct.pack("<6f", *range(6))),
    ("empty", "F32", [0, 4], b""),
    ("scalar", "I64", [], struct.pack("<q", 42)),
], {"format": "pt", "note": "seed"}))

# checkpoint: what save_checkpoint writes for a tiny model.
write_safetensors("checkpoint", "small", safetensors([
    ("model.fc.weight", "F32", [2, 2], struct.pack("<4f", 0.5, -1, 2, 0)),
    ("model.fc.bias", "F32", [2], struct.pack("<2f", 0, 1)),
    ("model.bn.num_batches_tracked", "I64", [], struct.pack("<q", 3)),
    ("optimizer.group.0.lr", "F64", [], struct.pack("<d", 0.1)),
    ("optimizer.state.0.momentum_buffer", "F32", [2, 2], struct.pack("<4f", 0, 0, 0, 0)),
    ("scheduler.last_step", "I64", [], struct.pack("<q", 5)),
    ("train.step",) + i64(12), ("train.epoch",) + i64(1), ("train.batch",) + i64(2),
    ("rng.seed",) + i64(-81985529216486896), ("rng.offset",) + i64(99),
], {"format": "tandem-checkpoint", "version": "1", "model": "resnet20"}))


# idx: the first byte picks the mode (even: the file as is; odd: gzip-compressed by the target).
def idx(shape, fill):
    head = bytes([0, 0, 8, len(shape)]) + b"".join(struct.pack(">I", d) for d in shape)
    n = 1
    for d in shape:
        n *= d
    return head + bytes((fill + i) % 256 for i in range(n))


write("idx", "plain_labels", b"\x00" + idx([6], 3))
write("idx", "plain_images", b"\x00" + idx([2, 4, 4], 0))
write("idx", "compressed_images", b"\x01" + idx([3, 5, 5], 7))
write("idx", "gzip_stream", b"\x00" + gzip.compress(idx([2, 3, 3, 2], 1), mtime=0))

# cifar10: whole records of a label byte and 3072 pixel bytes.
def record(label, fill):
    return bytes([label]) + bytes((fill + i) % 256 for i in range(3072))


write("cifar10", "one_record", record(3, 0))
write("cifar10", "two_records", record(0, 1) + record(9, 2))
