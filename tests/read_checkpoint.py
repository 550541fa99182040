#!/usr/bin/python3
"""Reads a ddplab checkpoint with nothing but json + struct, into torch tensors, and checks it against
PyTorch: the 002 lab saves SimpleLinearModel right after construction from the seed it fixes on every rank,
67280421310721 (the notebook sets none), so the tensors must equal torch's own nn.Linear(10, 10) after
manual_seed(67280421310721) bit for bit. Prints one line per tensor; exit 1 on any
mismatch or format error.

    /usr/bin/python3 tests/read_checkpoint.py FILE
"""
import json
import struct
import sys

import torch


def fnv1a64(data):
    h = 1469598103934665603
    for b in data:
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f'{h:016x}'


def main(path):
    raw = open(path, 'rb').read()
    (n,) = struct.unpack('<Q', raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    assert header['__metadata__']['checksum_fnv1a64'] == fnv1a64(data), 'checksum mismatch'
    tensors = {}
    for name, t in header.items():
        if name == '__metadata__':
            continue
        assert t['dtype'] == 'F32'
        b, e = t['data_offsets']
        vals = struct.unpack(f'<{(e - b) // 4}f', data[b:e])
        tensors[name] = torch.tensor(vals, dtype=torch.float32).reshape(t['shape'])
    torch.manual_seed(67280421310721)
    ref = torch.nn.Linear(10, 10)
    ok = True
    for name, want in [('module.net.weight', ref.weight), ('module.net.bias', ref.bias)]:
        got = tensors[name]
        exact = torch.equal(got, want.detach())
        print(f'{name:20s} shape {list(got.shape)} bitwise equal to torch.nn.Linear(10, 10): {exact}')
        ok = ok and exact
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
