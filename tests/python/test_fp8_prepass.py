"""The FP8 pre-pass: fa3jit_quantize_fp8 (C ABI), fa3jit.quantize_fp8 and fa3jit.flash_attn_fp8_func.

Without a GPU: the ctypes struct against fa3jit.h compiled by C, the Python splitmix64 of the host model against
kernels/quantize_fp8/params.h (hadamard_sign) compiled by C++, the C ABI's checks that come before any device
(enums read as integers, flags, block rows, NULL pointers), the Python checks that need no torch (quant, seed,
flags) and, with torch, those before the device check (dtypes, float8 inputs, shapes, rope tables).
On an sm_90 GPU: quantize_fp8 against a float64 host model of the method (FA3 paper §3.3: RoPE, x -> H.D.x /
sqrt(head_dim), descale = amax / 448 per block, 1 for amax 0, e4m3 rounding), Q.K^T kept by the rotation, and
flash_attn_fp8_func against float64 attention on the original 16-bit inputs with the RMSE bound of FA3's Table 3
data (N(0, 1) plus N(0, 10^2) outliers with probability 0.001), causal and not, GQA, seqlens 1, 113, 1023."""

import ctypes
import json
import math
import shutil
import subprocess

import pytest

import fa3jit
from fa3jit import _capi
from support import ROOT, needs_cc, needs_gpu, needs_library, needs_torch

E4M3_MAX = 448.0
_MASK64 = (1 << 64) - 1
needs_cxx = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler (c++) on PATH")


def hadamard_sign(seed, index):
    """kernels/quantize_fp8/params.h: hadamard_sign, splitmix64 of (seed, index); its lowest bit picks -1."""
    z = (seed + 0x9E3779B97F4A7C15 * (index + 1)) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    z ^= z >> 31
    return -1.0 if z & 1 else 1.0


SIGN_SEEDS = (0, 1, 0x1234567890ABCDEF, _MASK64)


# ---- without a GPU -------------------------------------------------------------------------------------------

@needs_cxx
def test_hadamard_sign_matches_the_kernels_definition(tmp_path):
    source = tmp_path / "signs.cpp"
    seeds = ", ".join(f"{s:#x}ULL" for s in SIGN_SEEDS)
    source.write_text('#include <cstdio>\n#include "kernels/quantize_fp8/params.h"\n'
                      "int main() {\n"
                      f"  const unsigned long long seeds[] = {{{seeds}}};\n"
                      "  for (unsigned long long s : seeds)\n"
                      "    for (int i = 0; i < 256; ++i)\n"
                      "      std::printf(\"%d\\n\", (int)fa3jit::quantize_fp8::hadamard_sign(s, i));\n"
                      "}\n")
    binary = tmp_path / "signs"
    subprocess.run(["c++", "-std=c++17", "-I", str(ROOT), str(source), "-o", str(binary)], check=True)
    got = [int(line) for line in subprocess.run([str(binary)], check=True, capture_output=True,
                                                text=True).stdout.split()]
    expected = [int(hadamard_sign(s, i)) for s in SIGN_SEEDS for i in range(256)]
    assert got == expected
    assert 0 < expected.count(-1) < len(expected)


@needs_cc
def test_quantize_params_match_the_c_header(tmp_path):
    fields = [name for name, _ in _capi.QuantizeParams._fields_]
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <fa3jit/fa3jit.h>", "int main(void) {",
             "  fa3jit_quantize_params p;", "  fa3jit_quantize_params_init(&p);",
             '  printf("{\\"sizeof\\": %zu", sizeof(fa3jit_quantize_params));']
    lines += [f'  printf(",\\"{f}\\": %zu", (size_t)offsetof(fa3jit_quantize_params, {f}));' for f in fields]
    for name in ("FA3JIT_ROPE_NONE", "FA3JIT_ROPE_NEOX", "FA3JIT_ROPE_INTERLEAVED"):
        lines.append(f'  printf(",\\"{name}\\": %d", (int)({name}));')
    lines += ['  printf(",\\"init_struct_size\\": %zu, \\"init_hadamard\\": %d, \\"init_rows\\": %d}\\n", '
              "p.struct_size, (int)p.hadamard, (int)(p.q_block_rows + p.k_block_rows));", "  return 0;", "}"]
    source = tmp_path / "quantize_layout.c"
    source.write_text("\n".join(lines) + "\n")
    binary = tmp_path / "quantize_layout"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", "-I", str(ROOT / "runtime" / "include"), str(source),
                    "-o", str(binary)], check=True)
    c = json.loads(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)
    assert c["sizeof"] == ctypes.sizeof(_capi.QuantizeParams)
    for name in fields:
        assert c[name] == getattr(_capi.QuantizeParams, name).offset, name
    assert (c["FA3JIT_ROPE_NONE"], c["FA3JIT_ROPE_NEOX"], c["FA3JIT_ROPE_INTERLEAVED"]) == (
        _capi.ROPE_NONE, _capi.ROPE_NEOX, _capi.ROPE_INTERLEAVED)
    params = _capi.QuantizeParams()
    assert (c["init_struct_size"], c["init_hadamard"], c["init_rows"]) == (params.struct_size, params.hadamard, 0)


def _call_c(params):
    return _capi.library().fa3jit_quantize_fp8(_capi.runtime().handle, ctypes.addressof(params), None)


def _c_params(**fields):
    fields.setdefault("dtype", _capi.DTYPE_BF16)
    fields.setdefault("q_block_rows", 128)
    fields.setdefault("k_block_rows", 128)
    return _capi.QuantizeParams(**fields)


@needs_library
@pytest.mark.parametrize("fields, needle", [
    (dict(rope=3), "params.rope is 3; expected FA3JIT_ROPE_NONE (0)"),
    (dict(rope=-1), "params.rope is -1"),
    (dict(rope=2**31 - 1), f"params.rope is {2**31 - 1}"),
    (dict(dtype=7), "params.dtype is 7"),
    (dict(dtype=-1), "params.dtype is -1"),
    (dict(hadamard=2), "params.hadamard is 2; expected 0 or 1"),
    (dict(q_block_rows=0), "fa3jit_attention_quant_blocks"),
    (dict(rotary_dim=-8), "params.rotary_dim is -8"),
    (dict(), "params.q.data is NULL"),
    (dict(struct_size=8), "fa3jit_quantize_params.struct_size is 8"),
])
def test_c_abi_refuses_before_any_device(fields, needle):
    status = _call_c(_c_params(**fields))
    assert _capi.STATUS_NAMES[status] == "invalid_argument"
    assert needle in _capi.library().fa3jit_last_error().decode()


@needs_library
def test_c_abi_refuses_null_arguments():
    lib = _capi.library()
    assert _capi.STATUS_NAMES[lib.fa3jit_quantize_fp8(_capi.runtime().handle, None, None)] == "invalid_argument"
    assert "params is NULL" in lib.fa3jit_last_error().decode()
    params = _c_params()
    assert _capi.STATUS_NAMES[lib.fa3jit_quantize_fp8(None, ctypes.addressof(params), None)] == "invalid_argument"
    assert "runtime is NULL" in lib.fa3jit_last_error().decode()


@pytest.mark.parametrize("quant", ["per_head", "per_tensor", None])
def test_quant_other_than_per_block_is_refused(quant):
    with pytest.raises(ValueError) as info:
        fa3jit.quantize_fp8(None, None, None, quant=quant)
    assert f"quant is {quant!r}" in str(info.value) and "per_block" in str(info.value)


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(seed=-1), ValueError, "seed is -1; expected an int in [0, 2**64)"),
    (dict(seed=1 << 64), ValueError, "seed is 18446744073709551616"),
    (dict(seed="7"), TypeError, "seed: expected an int"),
    (dict(hadamard=2), TypeError, "hadamard: expected a bool"),
    (dict(rotary_interleaved="yes"), TypeError, "rotary_interleaved: expected a bool"),
])
def test_scalar_arguments_are_checked_first(kwargs, error, needle):
    with pytest.raises(error) as info:
        fa3jit.quantize_fp8(None, None, None, **kwargs)
    assert needle in str(info.value)


def test_public_api():
    assert "quantize_fp8" in fa3jit.__all__ and "flash_attn_fp8_func" in fa3jit.__all__
    for function in (fa3jit.quantize_fp8, fa3jit.flash_attn_fp8_func):
        assert "§3.3" in function.__doc__ and "Raises" in function.__doc__


# ---- the Python path through the C ABI, without torch or a GPU -----------------------------------------------

# A stand-in for the few torch functions fa3jit.fp8 and flash_attn_func use, whose tensors live in the fake
# driver's allocations (tests/fake_driver): the argument plumbing, the library's checks of the shapes and
# pointers Python passes, and the launches are real; no value is computed.
_STUB_RUN = r'''
import ctypes, math, sys, types
ROOT, FAKE = sys.argv[1], sys.argv[2]
fake = ctypes.CDLL(FAKE)
fake.fake_cuda_alloc.restype = ctypes.c_uint64
fake.fake_cuda_alloc.argtypes = [ctypes.c_uint64]
fake.fake_cuda_last_launch.restype = ctypes.c_int
fake.fake_cuda_last_launch.argtypes = [ctypes.c_void_p]

torch = types.ModuleType("torch")
class DType:
    def __init__(self, name, size): self.name, self.itemsize = name, size
    def __repr__(self): return "torch." + self.name
for n, s in (("float16", 2), ("bfloat16", 2), ("float32", 4), ("float8_e4m3fn", 1), ("float64", 8), ("uint8", 1)):
    setattr(torch, n, DType(n, s))
class Device:
    def __init__(self, spec):
        self.type, _, idx = str(spec).partition(":")
        self.index = int(idx) if idx else (0 if self.type == "cuda" else None)
    def __eq__(self, o): return (self.type, self.index) == (o.type, o.index)
    def __repr__(self): return self.type if self.index is None else f"{self.type}:{self.index}"
class Tensor:
    def __init__(self, shape, dtype, device="cuda:0", strides=None):
        self.shape, self.dtype, self.device = tuple(shape), dtype, Device(device)
        n = 1
        st = []
        for d in reversed(self.shape): st.append(n); n *= d
        self._strides = tuple(strides or reversed(st))
        on_device = self.device.type == "cuda"
        self._ptr = fake.fake_cuda_alloc(max(n * dtype.itemsize, 16)) if on_device else 0x1000
        self.is_cuda = self.device.type == "cuda"
    def stride(self, i=None): return self._strides if i is None else self._strides[i]
    def dim(self): return len(self.shape)
    def data_ptr(self): return self._ptr
    def get_device(self): return self.device.index
    def is_contiguous(self): return self._strides == Tensor(self.shape, self.dtype, "cpu")._strides
    def new_empty(self, shape, dtype): return Tensor(shape, dtype, self.device)
    def __getitem__(self, i): raise NotImplementedError
torch.Tensor = Tensor
torch.empty = lambda shape, dtype, device: Tensor(shape, dtype, device)
torch.contiguous_format = object()
torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda i: 0)
torch.cuda = types.SimpleNamespace(device_count=lambda: 1)
sys.modules["torch"] = torch
sys.path.insert(0, ROOT + "/tools/python")
import fa3jit

def launches():
    return fake.fake_cuda_last_launch(None)

bf = torch.bfloat16
q, k, v = Tensor((2, 300, 8, 128), bf), Tensor((2, 257, 2, 128), bf), Tensor((2, 257, 2, 128), bf)
block_m, block_n = fa3jit.fp8_quant_blocks(128)
before = launches()
q8, k8, v8, qd, kd, vd = fa3jit.quantize_fp8(q, k, v, seed=5)
assert launches() == before + 3
assert q8.dtype is torch.float8_e4m3fn and q8.shape == q.shape and k8.shape == k.shape and v8.shape == v.shape
assert qd.shape == (2, 8, -(-300 // block_m)) and kd.shape == (2, 2, -(-257 // block_n)) and vd.shape == (2, 2, 128)
assert qd.dtype is torch.float32 and q8.is_contiguous()
cos, sin = Tensor((300, 32), torch.float32), Tensor((300, 32), torch.float32)
fa3jit.quantize_fp8(q, k, v, rope=(cos, sin), rotary_interleaved=True)
assert launches() == before + 6
for kwargs, needle in ((dict(block_m=100), "q_block_rows"),
                       (dict(rope=(Tensor((300, 12), torch.float32), Tensor((300, 12), torch.float32))), "rotary_dim")):
    try:
        fa3jit.quantize_fp8(q, k, v, **kwargs)
        raise AssertionError(f"{kwargs} was accepted")
    except fa3jit.Fa3jitValueError as error:
        assert needle in str(error), error
for args, needle in (((q, Tensor((2, 257, 2, 128), bf, "cuda:1"), v), "k is on cuda:1; expected q's device cuda:0"),):
    try:
        fa3jit.quantize_fp8(*args)
        raise AssertionError("accepted")
    except ValueError as error:
        assert needle in str(error), error
try:
    fa3jit.quantize_fp8(q, k, v, rope=(Tensor((300, 32), torch.float32, "cuda:1"), sin))
    raise AssertionError("accepted")
except ValueError as error:
    assert "rope[0] (cos) is on cuda:1; expected q's device cuda:0" in str(error), error
assert launches() == before + 6
for causal in (False, True):
    before = launches()
    out, lse = fa3jit.flash_attn_fp8_func(q, k, v, causal=causal, return_lse=True)
    assert launches() == before + 4  # the pre-pass's three, then the e4m3 attention kernel
    assert out.dtype is bf and out.shape == q.shape and lse.shape == (2, 8, 300)
out = fa3jit.flash_attn_fp8_func(Tensor((1, 64, 2, 64), torch.float16), Tensor((1, 64, 2, 64), torch.float16),
                                 Tensor((1, 64, 2, 64), torch.float16))
assert out.dtype is torch.float16
# head_dim_v != head_dim: the tile (so the per-block descale shapes) is that pair's, not head_dim's square one.
assert fa3jit.fp8_quant_blocks(64, head_dim_v=64) == fa3jit.fp8_quant_blocks(64)
for head_dim, head_dim_v in ((64, 128), (64, 256), (128, 64)):
    blocks = fa3jit.fp8_quant_blocks(head_dim, head_dim_v=head_dim_v)
    if head_dim == 64:  # 192 x 160 for 64 / 64; the wider V takes a 128-row tile
        assert blocks != fa3jit.fp8_quant_blocks(head_dim), (head_dim, head_dim_v, blocks)
    qh, kh, vh = (Tensor((2, 1024, 4, head_dim), bf), Tensor((2, 1024, 2, head_dim), bf),
                  Tensor((2, 1024, 2, head_dim_v), bf))
    _, _, _, qd, kd, _ = fa3jit.quantize_fp8(qh, kh, vh)
    assert qd.shape == (2, 4, -(-1024 // blocks[0])) and kd.shape == (2, 2, -(-1024 // blocks[1]))
    for v_layout in ("seq_major", "d_major"):
        before = launches()
        out = fa3jit.flash_attn_fp8_func(qh, kh, vh, v_layout=v_layout)
        assert launches() == before + 4 and out.shape == (2, 1024, 4, head_dim_v)
try:
    fa3jit.flash_attn_fp8_func(Tensor((0, 64, 2, 64), bf), Tensor((0, 64, 2, 64), bf), Tensor((0, 64, 2, 64), bf),
                               v_layout="bogus")
    raise AssertionError("v_layout bogus was accepted")
except ValueError as error:
    assert "v_layout is 'bogus'" in str(error), error
print("ok")
'''


@needs_library
def test_python_path_against_the_fake_driver(tmp_path):
    import os
    import pathlib
    import sys
    fake = pathlib.Path(_capi.library_path()).resolve().parent / "fake_driver" / "libcuda.so.1"
    if not fake.is_file():
        pytest.skip(f"no fake driver next to the library ({fake}); build tests/fake_driver")
    script = tmp_path / "run.py"
    script.write_text(_STUB_RUN)
    env = dict(os.environ, LD_LIBRARY_PATH=f"{fake.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}",
               FA3JIT_LIBRARY=str(pathlib.Path(_capi.library_path()).resolve()))
    result = subprocess.run([sys.executable, str(script), str(ROOT), str(fake)], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stdout + result.stderr


# ---- with torch, before the device ---------------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch")


def _qkv(torch, batch=2, seqlen_q=48, seqlen_k=64, num_heads=4, num_heads_kv=2, head_dim=128, dtype=None,
         device="cpu"):
    dtype = dtype or torch.bfloat16
    return (torch.zeros(batch, seqlen_q, num_heads, head_dim, device=device).to(dtype),
            torch.zeros(batch, seqlen_k, num_heads_kv, head_dim, device=device).to(dtype),
            torch.zeros(batch, seqlen_k, num_heads_kv, head_dim, device=device).to(dtype))


@needs_library
@needs_torch
@pytest.mark.parametrize("function", [fa3jit.quantize_fp8, fa3jit.flash_attn_fp8_func])
def test_float8_inputs_are_refused(function):
    torch = _torch()
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    q, k, v = _qkv(torch, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError) as info:
        function(q, k, v)
    message = str(info.value)
    assert "q.dtype is torch.float8_e4m3fn" in message and "torch.float16 or torch.bfloat16" in message
    assert "flash_attn_func" in message


@needs_library
@needs_torch
@pytest.mark.parametrize("make, error, needle", [
    (lambda t, q, k, v: (q, k.half(), v), ValueError, "k.dtype is torch.float16 but q.dtype is torch.bfloat16"),
    (lambda t, q, k, v: (q.float(), k, v), ValueError, "q.dtype is torch.float32"),
    (lambda t, q, k, v: (q[0], k, v), ValueError, "q must have 4 dimensions"),
    (lambda t, q, k, v: (q, k[:1], v[:1]), ValueError, "k has shape (1, 64, 2, 128)"),
    (lambda t, q, k, v: (q, k, v[:, :3]), ValueError, "v has shape (2, 3, 2, 128)"),
    (lambda t, q, k, v: (q, k, [1, 2]), TypeError, "v: expected a torch.Tensor"),
    (lambda t, q, k, v: (q, k, v), ValueError, "q is on cpu (shape (2, 48, 4, 128)); expected a CUDA tensor"),
])
def test_input_checks(make, error, needle):
    torch = _torch()
    with pytest.raises(error) as info:
        fa3jit.quantize_fp8(*make(torch, *_qkv(torch)))
    assert needle in str(info.value)


@needs_library
@needs_torch
@pytest.mark.parametrize("rope, error, needle", [
    (lambda t: t.zeros(64, 32), TypeError, "rope: expected None or a (cos, sin) pair"),
    (lambda t: (t.zeros(64, 32),), TypeError, "rope: expected None or a (cos, sin) pair"),
    (lambda t: (t.zeros(64, 32, dtype=t.float64), t.zeros(64, 32)), ValueError,
     "rope[0] (cos).dtype is torch.float64"),
    (lambda t: (t.zeros(64, 32), t.zeros(64, 32, 1)), ValueError, "rope[1] (sin) has shape (64, 32, 1)"),
    (lambda t: (t.zeros(64, 32), t.zeros(64, 16)), ValueError, "cos has shape (64, 32) but sin (64, 16)"),
    (lambda t: (t.zeros(63, 32), t.zeros(63, 32)), ValueError, "63 rows, fewer than max(seqlen_q, seqlen_k) = 64"),
    (lambda t: (t.zeros(64, 65), t.zeros(64, 65)), ValueError, "rotary_dim = 2 x 65 = 130"),
    (lambda t: (t.zeros(32, 64).t(), t.zeros(64, 32)), ValueError, "rope[0] (cos) has strides (1, 64)"),
])
def test_rope_table_checks(rope, error, needle):
    torch = _torch()
    with pytest.raises(error) as info:
        fa3jit.quantize_fp8(*_qkv(torch), rope=rope(torch))
    assert needle in str(info.value)


@needs_library
@needs_torch
@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(block_m=0), ValueError, "block_m is 0"),
    (dict(block_n=128.0), TypeError, "block_n: expected an int"),
])
def test_block_size_checks(kwargs, error, needle):
    torch = _torch()
    with pytest.raises(error) as info:
        fa3jit.quantize_fp8(*_qkv(torch), **kwargs)
    assert needle in str(info.value)


# ---- on the GPU: the host model ------------------------------------------------------------------------------

def _hadamard(torch, head_dim, seed):
    """H.D / sqrt(head_dim) in float64 (Sylvester H: H[i, j] = (-1)^popcount(i & j))."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < head_dim:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    d = torch.tensor([hadamard_sign(seed, i) for i in range(head_dim)], dtype=torch.float64)
    return h * d / math.sqrt(head_dim)  # column j scaled by D_j: (H.D)[i, j] = H[i, j] D_j


def _rope(torch, x, cos, sin, interleaved):
    """FlashAttention's apply_rotary_emb in float64: x (batch, seqlen, heads, dim), cos/sin (>= seqlen, rot/2)."""
    seqlen, half = x.shape[1], cos.shape[1]
    c = cos[:seqlen].double()[None, :, None, :]
    s = sin[:seqlen].double()[None, :, None, :]
    y = x.clone()
    if interleaved:
        x1, x2 = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
        y[..., 0:2 * half:2], y[..., 1:2 * half:2] = x1 * c - x2 * s, x1 * s + x2 * c
    else:
        x1, x2 = x[..., :half], x[..., half:2 * half]
        y[..., :half], y[..., half:2 * half] = x1 * c - x2 * s, x1 * s + x2 * c
    return y


def _model(torch, q, k, v, hadamard, seed, rope, interleaved, block_m, block_n):
    """float64 (q, k, v) after RoPE and rotation, and the fp32 descales the pre-pass must write."""
    q, k, v = q.double(), k.double(), v.double()
    if rope is not None:
        q, k = _rope(torch, q, *rope, interleaved), _rope(torch, k, *rope, interleaved)
    if hadamard:
        m = _hadamard(torch, q.shape[-1], seed).to(q.device)
        q, k = q @ m.T, k @ m.T  # x -> H.D.x / sqrt(d) for each head vector (row)

    def block_descale(x, rows):
        b, s, h, d = x.shape
        blocks = -(-s // rows)
        padded = torch.zeros(b, blocks * rows, h, d, dtype=x.dtype, device=x.device)
        padded[:, :s] = x.abs()
        amax = padded.view(b, blocks, rows, h, d).amax(dim=(2, 4)).permute(0, 2, 1)  # (b, h, blocks)
        return torch.where(amax > 0, amax.float() / E4M3_MAX, torch.ones_like(amax.float()))

    v_amax = v.abs().amax(dim=1)  # (b, h_kv, d)
    v_descale = torch.where(v_amax > 0, v_amax.float() / E4M3_MAX, torch.ones_like(v_amax.float()))
    return q, k, v, block_descale(q, block_m), block_descale(k, block_n), v_descale


def _expand(descale, rows, seqlen):
    """(b, h, blocks) -> (b, seqlen, h, 1): each token's descale."""
    return descale.repeat_interleave(rows, dim=2)[:, :, :seqlen].permute(0, 2, 1)[..., None]


def _check_quantised(torch, x8, descale_per_token, reference, name):
    """x8 * descale within e4m3 rounding of the float64 model: half an ulp (2^-4 relative for normals, 2^-10
    of the descale for subnormals), plus the fp32 arithmetic of the kernel."""
    deq = x8.double() * descale_per_token.double()
    bound = 2.0 ** -4 * reference.abs() + descale_per_token.double() * (2.0 ** -9) + 1e-5 * reference.abs().amax()
    excess = (deq - reference).abs() - bound
    assert excess.max().item() <= 0, f"{name}: worst excess {excess.max().item()} over the e4m3 rounding bound"


def _outlier_data(torch, shape, dtype, generator):
    """FA3 Table 3: N(0, 1) plus N(0, 10^2) outliers with probability 0.001."""
    x = torch.randn(shape, generator=generator, device="cuda")
    outliers = torch.rand(shape, generator=generator, device="cuda") < 0.001
    x = x + outliers * 10.0 * torch.randn(shape, generator=generator, device="cuda")
    return x.to(dtype)


@needs_gpu
@pytest.mark.parametrize("hadamard, seed", [(True, 0), (True, 0xDEADBEEF12345678), (False, 0)])
@pytest.mark.parametrize("rope, interleaved", [(None, False), (64, False), (64, True), (128, True)])
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(1, 1), (113, 239), (1023, 1023)])
def test_quantize_fp8_matches_the_host_model(hadamard, seed, rope, interleaved, seqlen_q, seqlen_k):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seqlen_q + 7 * seqlen_k)
    batch, num_heads, num_heads_kv, head_dim = 2, 8, 2, 128
    q = _outlier_data(torch, (batch, seqlen_q, num_heads, head_dim), torch.bfloat16, g)
    k = _outlier_data(torch, (batch, seqlen_k, num_heads_kv, head_dim), torch.bfloat16, g)
    v = _outlier_data(torch, (batch, seqlen_k, num_heads_kv, head_dim), torch.bfloat16, g)
    v[:, :, 0, 3] = 0  # an all-zero V channel: descale 1
    tables = None
    if rope is not None:
        rows = max(seqlen_q, seqlen_k)
        angle = torch.arange(rows, device="cuda")[:, None] / (10000 ** (torch.arange(rope // 2, device="cuda") /
                                                                      (rope // 2)))
        tables = (angle.cos().float().contiguous(), angle.sin().float().contiguous())
    block_m, block_n = fa3jit.fp8_quant_blocks(head_dim)
    q8, k8, v8, qd, kd, vd = fa3jit.quantize_fp8(q, k, v, hadamard=hadamard, seed=seed, rope=tables,
                                                 rotary_interleaved=interleaved)
    torch.cuda.synchronize()
    assert q8.dtype is torch.float8_e4m3fn and q8.is_contiguous() and q8.shape == q.shape
    assert k8.shape == k.shape and v8.shape == v.shape
    assert qd.shape == (batch, num_heads, -(-seqlen_q // block_m)) and qd.dtype is torch.float32
    assert kd.shape == (batch, num_heads_kv, -(-seqlen_k // block_n))
    assert vd.shape == (batch, num_heads_kv, head_dim)
    mq, mk, mv, mqd, mkd, mvd = _model(torch, q, k, v, hadamard, seed, tables, interleaved, block_m, block_n)
    torch.testing.assert_close(qd, mqd, rtol=1e-4, atol=0)
    torch.testing.assert_close(kd, mkd, rtol=1e-4, atol=0)
    torch.testing.assert_close(vd, mvd, rtol=1e-6, atol=0)
    assert (vd[:, 0, 3] == 1).all()
    _check_quantised(torch, q8, _expand(qd, block_m, seqlen_q), mq, "q8")
    _check_quantised(torch, k8, _expand(kd, block_n, seqlen_k), mk, "k8")
    _check_quantised(torch, v8, vd[:, None], mv, "v8")


@needs_gpu
def test_rotation_keeps_q_k_transpose():
    import torch
    g = torch.Generator(device="cuda").manual_seed(3)
    q = _outlier_data(torch, (1, 256, 2, 128), torch.bfloat16, g)
    k = _outlier_data(torch, (1, 256, 2, 128), torch.bfloat16, g)
    v = torch.randn(1, 256, 2, 128, device="cuda").bfloat16()
    block_m, block_n = fa3jit.fp8_quant_blocks(128)
    q8, k8, _, qd, kd, _ = fa3jit.quantize_fp8(q, k, v, seed=12345)
    deq_q = (q8.double() * _expand(qd, block_m, 256).double()).permute(0, 2, 1, 3)
    deq_k = (k8.double() * _expand(kd, block_n, 256).double()).permute(0, 2, 1, 3)
    exact = q.double().permute(0, 2, 1, 3) @ k.double().permute(0, 2, 3, 1)
    got = deq_q @ deq_k.transpose(-1, -2)
    # The rotated q8, k8 are different vectors whose products are the original scores, up to e4m3 rounding.
    assert not torch.allclose(deq_q, q.double().permute(0, 2, 1, 3), atol=0.1)
    assert ((got - exact).norm() / exact.norm()).item() < 0.08
    # The model's rotation is exactly orthogonal: no rounding, the scores agree to float64 precision.
    m = _hadamard(torch, 128, 12345).cuda()
    torch.testing.assert_close(m @ m.T, torch.eye(128, dtype=torch.float64, device="cuda"))


def _attention64(torch, q, k, v, causal, scale):
    """float64 attention on the 16-bit inputs; (out, lse) with out (b, s_q, h, d), lse (b, h, s_q)."""
    group = q.shape[2] // k.shape[2]
    qt = q.double().permute(0, 2, 1, 3)
    kt = k.double().repeat_interleave(group, dim=2).permute(0, 2, 1, 3)
    vt = v.double().repeat_interleave(group, dim=2).permute(0, 2, 1, 3)
    scores = scale * qt @ kt.transpose(-1, -2)
    if causal:
        seqlen_q, seqlen_k = q.shape[1], k.shape[1]
        row = torch.arange(seqlen_q, device=q.device)[:, None]
        col = torch.arange(seqlen_k, device=q.device)[None, :]
        scores = scores.masked_fill(col > row + seqlen_k - seqlen_q, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    return (torch.softmax(scores, dim=-1) @ vt).permute(0, 2, 1, 3), lse


@needs_gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_heads, num_heads_kv", [(8, 8), (8, 2)])
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(1, 1), (1, 1023), (113, 113), (113, 239), (1023, 1023)])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_flash_attn_fp8_func_rmse_on_outlier_data(dtype, causal, num_heads, num_heads_kv, seqlen_q, seqlen_k,
                                                  head_dim):
    import torch
    dtype = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(seqlen_q * 31 + seqlen_k + head_dim)
    q = _outlier_data(torch, (2, seqlen_q, num_heads, head_dim), dtype, g)
    k = _outlier_data(torch, (2, seqlen_k, num_heads_kv, head_dim), dtype, g)
    v = _outlier_data(torch, (2, seqlen_k, num_heads_kv, head_dim), dtype, g)
    out, lse = fa3jit.flash_attn_fp8_func(q, k, v, causal=causal, return_lse=True)
    assert out.dtype is dtype and out.shape == q.shape
    ref, ref_lse = _attention64(torch, q, k, v, causal, 1.0 / math.sqrt(head_dim))
    visible = torch.isfinite(ref_lse)  # causal rows that see no key: out 0, lse -inf
    rmse = (out.double() - ref).pow(2).mean().sqrt().item()
    assert rmse < 2e-2, f"RMSE {rmse}"
    # lse of the dequantised scores: close to the exact one, not within the output's bound (scores of outliers).
    torch.testing.assert_close(lse[visible].double(), ref_lse[visible], rtol=0.05, atol=0.25)


@needs_gpu
def test_flash_attn_fp8_func_writes_out_on_the_current_stream():
    import torch
    g = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (_outlier_data(torch, (1, 300, 4, 128), torch.bfloat16, g) for _ in range(3))
    expected = fa3jit.flash_attn_fp8_func(q, k, v, seed=9)
    stream = torch.cuda.Stream()
    out = torch.empty_like(q)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = fa3jit.flash_attn_fp8_func(q, k, v, seed=9, out=out)
    stream.synchronize()
    assert got is out
    assert torch.equal(out, expected)  # the same seed: bit-identical


@needs_gpu
def test_gpu_argument_errors():
    import torch
    q, k, v = _qkv(torch, device="cuda")
    with pytest.raises(ValueError, match=r"rope\[0\] \(cos\) is on cpu \(shape \(64, 32\)\); expected a CUDA tensor"):
        fa3jit.quantize_fp8(q, k, v, rope=(torch.zeros(64, 32), torch.zeros(64, 32)))
    with pytest.raises(ValueError, match="k is on cpu"):
        fa3jit.quantize_fp8(q, k.cpu(), v)
    with pytest.raises(fa3jit.Fa3jitValueError, match="rotary_dim"):
        fa3jit.quantize_fp8(q, k, v, rope=(torch.zeros(64, 12, device="cuda"), torch.zeros(64, 12, device="cuda")))
    with pytest.raises(fa3jit.Fa3jitValueError, match="q_block_rows"):
        fa3jit.quantize_fp8(q, k, v, block_m=100)
    with pytest.raises(ValueError, match="nothing to quantise"):
        fa3jit.quantize_fp8(q[:, :0], k, v)
    out = fa3jit.flash_attn_fp8_func(q, k[:, :0], v[:, :0])  # seqlen_k 0: out = 0, as flash_attn_func
    assert out.shape == q.shape and (out == 0).all()


@needs_gpu
@pytest.mark.parametrize("head_dim, seqlen_k", [(64, 113), (128, 1023), (256, 799), (128, 1)])
def test_quantize_fp8_d_major_v_is_the_transposed_seq_major_v(head_dim, seqlen_k):
    """v_layout "d_major" writes v8 as fa3jit.v_to_d_major lays out the seq_major v8 (zeros past seqlen_k included),
    and changes nothing else."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(head_dim + seqlen_k)
    q = _outlier_data(torch, (2, 239, 4, head_dim), torch.bfloat16, g)
    k = _outlier_data(torch, (2, seqlen_k, 2, head_dim), torch.bfloat16, g)
    v = _outlier_data(torch, (2, seqlen_k, 2, head_dim), torch.bfloat16, g)
    seq = fa3jit.quantize_fp8(q, k, v, seed=3)
    d_major = fa3jit.quantize_fp8(q, k, v, seed=3, v_layout="d_major")
    assert d_major[2].shape == (2, 2, head_dim, (seqlen_k + 15) // 16 * 16)
    assert torch.equal(d_major[2].view(torch.uint8), fa3jit.v_to_d_major(seq[2]).view(torch.uint8))
    for i in (0, 1):
        assert torch.equal(d_major[i].view(torch.uint8), seq[i].view(torch.uint8))
    for i in (3, 4, 5):
        assert torch.equal(d_major[i], seq[i])
    with pytest.raises(ValueError, match="v_layout"):
        fa3jit.quantize_fp8(q, k, v, v_layout="transposed")


@needs_gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_flash_attn_fp8_func_with_either_v_layout(causal, head_dim):
    """The default (V written transposed by the pre-pass, the d_major kernel) and seq_major (the kernel transposes
    V) both meet the RMSE bound. Where both kernels have one tile (head_dim 64) the outputs are identical; at 128
    and 256 the d_major kernel has its own tile (the descales are quantised with its blocks), and the two outputs
    agree within the bound."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(head_dim)
    q = _outlier_data(torch, (2, 1023, 8, head_dim), torch.bfloat16, g)
    k = _outlier_data(torch, (2, 1023, 2, head_dim), torch.bfloat16, g)
    v = _outlier_data(torch, (2, 1023, 2, head_dim), torch.bfloat16, g)
    ref, _ = _attention64(torch, q, k, v, causal, 1.0 / math.sqrt(head_dim))
    outs = []
    for layout in ("d_major", "seq_major"):
        out = fa3jit.flash_attn_fp8_func(q, k, v, causal=causal, v_layout=layout)
        rmse = (out.double() - ref).pow(2).mean().sqrt().item()
        assert rmse < 2e-2, f"{layout}: RMSE {rmse}"
        outs.append(out)
    d_major_kernel = fa3jit.Kernel({"dtype": "e4m3", "head_dim": head_dim, "causal": causal, "quant": "per_block",
                                    "v_layout": "d_major"})
    same_tile = fa3jit.fp8_quant_blocks(head_dim, causal, d_major_kernel) == fa3jit.fp8_quant_blocks(head_dim, causal)
    assert same_tile == (head_dim == 64)  # the tile table's d_major rows (tile_table.cpp: d_major_tile)
    if same_tile:
        assert torch.equal(outs[0], outs[1])
    else:
        between = (outs[0].double() - outs[1].double()).pow(2).mean().sqrt().item()
        assert 0 < between < 2e-2, f"d_major vs seq_major: RMSE {between}"
