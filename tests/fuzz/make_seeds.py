#!/usr/bin/env python3
"""Writes the binary seeds of corpus/cache_entry/ and corpus/c_api/ (the JSON seeds are plain files).

An entry in the format of jit/cubin_cache.cpp for the harness's key A, then damaged copies of it. Byte 0 of
every seed is the harness's mode byte: 0 = the rest is the file as is, 1 = the rest drives the structured mode.
The c_api harness reads its input through a FuzzedDataProvider: the empty input is a valid call (an exhausted
provider picks the well-formed choice everywhere); a few fixed pseudo-random inputs start it elsewhere.
Run once after a format change:  python3 tests/fuzz/make_seeds.py
"""
import hashlib
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
KEY_A = hashlib.sha256(b"fa3jit fuzz key A").hexdigest().encode()
KEY_B = hashlib.sha256(b"fa3jit fuzz key B").hexdigest().encode()


def s(b):
    return struct.pack("<Q", len(b)) + b


def payload(name=b"fa3jit_attention_fwd_bf16_d128_full_0123abcd", entries=None):
    """The unit's name, its entry points (each a name and six int32 report fields), cubin, PTX, log, compile ms."""
    entries = [name] if entries is None else entries
    p = s(name) + struct.pack("<I", len(entries))
    for e in entries:
        p += s(e) + struct.pack("<6I", 168, 0, 0, 0, 0, 1)
    p += s(b"\x7fELF cubin bytes") + s(b".version 9.0\n" + b"".join(b".entry " + e + b"\n" for e in entries))
    p += s(b"ptxas info    : Used 168 registers") + struct.pack("<d", 812.5)
    return p


def entry(key, body, version=3):
    return b"FA3JITC1" + struct.pack("<I", version) + s(key) + hashlib.sha256(key + body).digest() \
        + struct.pack("<Q", len(body)) + body


def main():
    out = os.path.join(HERE, "corpus", "cache_entry")
    os.makedirs(out, exist_ok=True)
    good = entry(KEY_A, payload())
    seeds = {
        "valid": good,
        "torn_header": good[:40],
        "torn_payload": good[:-7],
        "relabelled": good.replace(KEY_A, KEY_B),
        "foreign_key": entry(KEY_B, payload()),
        "old_version": entry(KEY_A, payload(), version=2),
        "three_entries": entry(KEY_A, payload(b"fa3jit_quantize_fp8_x", [b"fa3jit_quantize_fp8_x_qk",
                                                                         b"fa3jit_quantize_fp8_x_v_amax",
                                                                         b"fa3jit_quantize_fp8_x_v_quant"])),
        "no_entries": entry(KEY_A, payload(entries=[])),
        "bad_checksum": good[:-1] + bytes([good[-1] ^ 1]),
        "empty_name_signed": entry(KEY_A, payload(name=b"")),
        "huge_lengths": b"FA3JITC1" + struct.pack("<IQ", 3, 2**63) + KEY_A,
        "empty": b"",
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b"\x00" + data)
    # Structured mode: any bytes are a valid input; these pick each damage kind once.
    for damage in range(7):
        with open(os.path.join(out, f"structured_{damage}"), "wb") as f:
            f.write(b"\x01" + bytes([damage, 3, 0x41, 0x42, 0x43]) * 8)

    out = os.path.join(HERE, "corpus", "c_api")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "exhausted_is_valid"), "wb") as f:
        f.write(b"")
    for i in range(6):
        with open(os.path.join(out, f"random_{i}"), "wb") as f:
            f.write(random.Random(i).randbytes(96))


if __name__ == "__main__":
    main()
