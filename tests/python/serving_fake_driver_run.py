"""The serving calls' workspace against the library's own size check, without torch or a GPU (run by
test_serving.py in a subprocess with the fake CUDA driver first on LD_LIBRARY_PATH): the stand-in tensors of
torch_standin.py live in the fake driver's allocations, so the library checks real pointers and sizes and launches
on the fake driver; no value is computed.

A warm call passes the stream's kept workspace without asking the call's size; the library refuses one too small,
and only then is the size asked, a larger workspace taken and the call made again. Prints "ok" at the end.

    python3 serving_fake_driver_run.py <repository root> <fake libcuda.so.1>
"""

import ctypes
import math
import os
import sys

ROOT, FAKE = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_standin  # noqa: E402
from torch_standin import Tensor  # noqa: E402

torch = torch_standin.install(ROOT)
fake = ctypes.CDLL(FAKE)
fake.fake_cuda_alloc.restype = ctypes.c_uint64
fake.fake_cuda_alloc.argtypes = [ctypes.c_uint64]
_standin_init = Tensor.__init__


def _in_fake_memory(self, shape, dtype, device="cuda:0", strides=None):
    _standin_init(self, shape, dtype, device, strides)
    if self.is_cuda:  # exactly its bytes: the library's allocation checks see the tensor's real extent
        self._ptr = fake.fake_cuda_alloc(max(1, math.prod(self.shape)) * dtype.itemsize)


Tensor.__init__ = _in_fake_memory

import fa3jit  # noqa: E402
from fa3jit import serving  # noqa: E402

SIZES = []  # bytes answered by each size query (fa3jit_attention_workspace_size)
_size = serving._workspace_size


def _counted(*args):
    SIZES.append(_size(*args))
    return SIZES[-1]


serving._workspace_size = _counted


def decode(batch, seqlen_k, num_splits):
    bf, i32 = torch.bfloat16, torch.int32
    q = Tensor((batch, 1, 32, 128), bf)
    k, v = Tensor((batch, seqlen_k, 8, 128), bf), Tensor((batch, seqlen_k, 8, 128), bf)
    fa3jit.flash_attn_with_kvcache(q, k, v, Tensor((batch,), i32), causal=True, num_splits=num_splits)
    return [kept[2] for kept in serving._local.params[4].values()]  # the bytes of each kept workspace


MIB = 1 << 20
assert decode(2, 1024, 4) == [MIB] and len(SIZES) == 1 and 0 < SIZES[0] <= MIB  # first call: asked, kept 1 MiB
assert decode(2, 1024, 4) == [MIB] and len(SIZES) == 1  # warm: no size query
# A call needing more: the library refuses the kept 1 MiB, the size is asked, a larger one is kept and used.
kept = decode(64, 4096, 16)
assert len(SIZES) == 2 and SIZES[1] > MIB and kept == [-(-SIZES[1] // MIB) * MIB], (SIZES, kept)
assert decode(64, 4096, 16) == kept and len(SIZES) == 2
# A call the library refuses for another reason raises the call's own error, without a second try.
try:
    fa3jit.flash_attn_with_kvcache(Tensor((2, 1, 32, 128), torch.bfloat16), Tensor((2, 1024, 8, 128), torch.bfloat16),
                                   Tensor((2, 1024, 8, 128), torch.bfloat16), Tensor((2,), torch.int32), causal=True,
                                   num_splits=300)
except ValueError as error:
    assert "fa3jit_attention_forward" in str(error) and "num_splits" in str(error), str(error)
else:
    raise AssertionError("num_splits 300 was accepted")
print("ok")
