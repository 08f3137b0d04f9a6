"""A stand-in `torch` module: fa3jit's Python call paths without torch and without a GPU.

The tensors are shapes, strides, dtypes and devices over fake addresses (allocations are recorded in
ALLOCATIONS); install() puts the module in sys.modules before fa3jit is imported. Used by serving_stub_run.py
(what the serving calls hand the library) and bench/serving_host_cost_stub.py (their Python work per call).

Tensor.count_accesses() counts the attribute reads and method calls the code under test makes on tensors (shape,
stride, dtype, device, data_ptr, ...; the stand-in's own reads are not counted): ACCESSES, by name.
"""

import collections
import itertools
import math
import sys
import types

torch = types.ModuleType("torch")
ACCESSES = collections.Counter()  # attribute name -> reads by code outside this module (while counting)
ALLOCATIONS = []


class DType:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return "torch." + self.name


for _name, _size in (("float16", 2), ("bfloat16", 2), ("float32", 4), ("float64", 8), ("float8_e4m3fn", 1),
                     ("int32", 4), ("int64", 8), ("uint8", 1)):
    setattr(torch, _name, DType(_name, _size))


class Device:
    def __init__(self, spec):
        if isinstance(spec, Device):
            self.type, self.index = spec.type, spec.index
            return
        self.type, _, index = str(spec).partition(":")
        self.index = int(index) if index else (0 if self.type == "cuda" else None)

    def __eq__(self, other):
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


_addresses = itertools.count(0x7F0000000000, 1 << 24)


def _counting_getattribute(self, name):
    if name[0] != "_" and sys._getframe(1).f_globals is not _HERE:
        ACCESSES[name] += 1
    return object.__getattribute__(self, name)


class Tensor:
    def __init__(self, shape, dtype, device="cuda:0", strides=None):
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.dtype, self.device = dtype, Device(device)
        contiguous, n = [], 1
        for extent in reversed(self.shape):
            contiguous.append(n)
            n *= extent
        self._strides = tuple(strides) if strides is not None else tuple(reversed(contiguous))
        self._ptr = next(_addresses)
        self.is_cuda = self.device.type == "cuda"
        self.filled = None

    @staticmethod
    def count_accesses(on=True):
        """Count (on) or stop counting the accesses of code outside this module to tensors' attributes."""
        if on:
            Tensor.__getattribute__ = _counting_getattribute
        elif "__getattribute__" in Tensor.__dict__:
            del Tensor.__getattribute__

    def stride(self, i=None):
        return self._strides if i is None else self._strides[i]

    def dim(self):
        return len(self.shape)

    def numel(self):
        return math.prod(self.shape)

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return self.device.index if self.is_cuda else -1

    def new_empty(self, shape, dtype=None):
        return _empty(shape, self.dtype if dtype is None else dtype, self.device)

    def zero_(self):
        self.filled = 0.0
        return self

    def fill_(self, value):
        self.filled = value
        return self

    def __getitem__(self, index):  # a slice of a filled one-dimensional tensor (the metadata's head)
        assert isinstance(index, slice) and isinstance(self.filled, list), index
        return tensor_of(self.filled[index], self.dtype, self.device)

    def tolist(self):
        return list(self.filled)


_HERE = globals()


def _empty(shape, dtype, device):
    t = Tensor(shape, dtype, device)
    ALLOCATIONS.append(t)
    return t


def _full(shape, value, dtype, device):
    t = _empty(shape, dtype, device)
    t.filled = value
    return t


def _empty_like(t, memory_format=None):
    return _empty(t.shape, t.dtype, t.device)


def tensor_of(values, dtype=None, device="cpu"):
    t = _empty((len(values),), dtype, device)
    t.filled = list(values)
    return t


torch.Tensor = Tensor
torch.empty = _empty
torch.empty_like = _empty_like
torch.full = _full
torch.ones = lambda shape, dtype, device: _full(shape, 1.0, dtype, device)
torch.tensor = tensor_of
torch.contiguous_format = object()
# CAPTURING[0]: what torch._C._cuda_isCurrentStreamCapturing() answers (a test sets it to stand for CUDA-graph capture);
# STREAM[0]: the raw stream _cuda_getCurrentRawStream() answers (a test sets it to stand for another current stream).
CAPTURING = [False]
STREAM = [0x5151]
torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: STREAM[0],
                                 _cuda_isCurrentStreamCapturing=lambda: CAPTURING[0])
torch.cuda = types.SimpleNamespace(device_count=lambda: 1)


def install(root):
    """Makes this the `torch` module and puts <root>/tools/python first on sys.path; returns the module."""
    sys.modules["torch"] = torch
    sys.path.insert(0, str(root) + "/tools/python")
    return torch
