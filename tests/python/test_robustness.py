"""Output poisoning, bit-exact repeatability, and bad arguments that must raise (never crash), on the GPU."""

import re

import pytest

from support import needs_gpu

pytestmark = needs_gpu

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402
from fa3jit import _capi  # noqa: E402
from attention_reference import check_against_reference  # noqa: E402


def _randn(*shape, dtype=torch.bfloat16, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, device="cuda", dtype=dtype, generator=generator)


def _qkv(batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, dtype=torch.bfloat16):
    return (_randn(batch, seqlen_q, num_heads, head_dim, dtype=dtype, seed=11),
            _randn(batch, seqlen_k, num_heads_kv, head_dim, dtype=dtype, seed=12),
            _randn(batch, seqlen_k, num_heads_kv, head_dim, dtype=dtype, seed=13))


def _forward_with_lse_buffer(q, k, v, out, lse, causal):
    """flash_attn_func allocates lse itself; to poison it the call goes through the C ABI directly."""
    batch, seqlen_q, num_heads, head_dim = q.shape
    view = lambda t: _capi.Tensor(t.data_ptr(), t.stride(0), t.stride(1), t.stride(2))  # noqa: E731
    params = _capi.ForwardParams(
        dtype=_capi.DTYPE_BF16, causal=int(causal), batch=batch, seqlen_q=seqlen_q, seqlen_k=k.shape[1],
        num_heads=num_heads, num_heads_kv=k.shape[2], head_dim=head_dim, head_dim_v=v.shape[3],
        q=view(q), k=view(k), v=view(v), out=view(out), lse=lse.data_ptr(), softmax_scale=0.0)
    _capi.runtime().forward(params, torch.cuda.current_stream().cuda_stream)


@pytest.mark.parametrize("seqlen_q, seqlen_k", [(799, 3), (239, 1), (1023, 1024), (113, 203), (4224, 4224)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256], ids=lambda d: f"d{d}")
def test_every_output_element_is_written(head_dim, causal, seqlen_q, seqlen_k):
    """out and lse start as NaN: every element, including rows that see no key and tail tiles, must be
    overwritten (a kernel that skips an empty tile would leave NaN, or stale data in a reused buffer)."""
    q, k, v = _qkv(2, seqlen_q, seqlen_k, 6, 2, head_dim)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((2, 6, seqlen_q), float("nan"), device="cuda")
    _forward_with_lse_buffer(q, k, v, out, lse, causal)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    check_against_reference(out, lse, q, k, v, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256], ids=lambda d: f"d{d}")
def test_bit_exact_over_100_runs(head_dim, causal):
    q, k, v = _qkv(4, 2048, 2048, 16, 4, head_dim)
    first_out, first_lse = fa3jit.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    mismatches = 0
    for _ in range(100):
        out, lse = fa3jit.flash_attn_func(q, k, v, causal=causal, return_lse=True)
        mismatches += int(not (torch.equal(out.view(torch.int16), first_out.view(torch.int16))
                               and torch.equal(lse.view(torch.int32), first_lse.view(torch.int32))))
    assert mismatches == 0, f"{mismatches} of 100 runs differ from the first"


# ---- bad arguments: ValueError naming the argument, and the process goes on -------------------------------

def _names(argument):
    """Matches `argument` as a name of its own (q, not seqlen_q)."""
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(argument)}(?![A-Za-z0-9_])")


def test_misaligned_base_pointer():
    """B4: a storage offset of one element makes q 2-byte aligned; TMA needs 16 bytes."""
    q, k, v = _qkv(1, 128, 128, 4, 4, 128)
    storage = torch.empty(q.numel() + 1, dtype=q.dtype, device="cuda")
    shifted = storage[1:].view(q.shape).copy_(q)
    assert shifted.data_ptr() % 16 == 2
    with pytest.raises(ValueError, match=_names("q")):
        fa3jit.flash_attn_func(shifted, k, v)


def test_stride_not_a_multiple_of_16_bytes():
    q, k, v = _qkv(1, 128, 128, 4, 4, 64)
    k_odd = torch.empty(1, 128, 4, 68, dtype=k.dtype, device="cuda")[..., :64].copy_(k)  # head stride 136 bytes
    with pytest.raises(ValueError, match=_names("k")):
        fa3jit.flash_attn_func(q, k_odd, v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int16])
def test_wrong_dtype(dtype):
    q, k, v = (t.to(dtype) for t in _qkv(1, 64, 64, 2, 2, 64))
    with pytest.raises(ValueError, match="dtype"):
        fa3jit.flash_attn_func(q, k, v)


def test_mixed_dtypes():
    q, k, v = _qkv(1, 64, 64, 2, 2, 64)
    with pytest.raises(ValueError, match="k.dtype"):
        fa3jit.flash_attn_func(q, k.half(), v)


def test_float8_with_an_unsupported_head_dim_is_refused_by_name():
    """test_fp8.py has the FP8 results; here only that a head_dim outside the table is an error naming it."""
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    # 88 is a 16-bit head dim (a multiple of 8) but not an e4m3 one (a multiple of 16: the k32 wgmma's rows).
    q, k, v = (t.to(torch.float8_e4m3fn) for t in _qkv(1, 128, 128, 2, 2, 88))
    with pytest.raises(fa3jit.Fa3jitValueError, match=r"head_dim = 88 is not supported for dtype e4m3") as info:
        fa3jit.flash_attn_func(q, k, v)
    assert info.value.status_name == "invalid_argument"


def test_head_dim_84_names_the_supported_head_dims():
    """B5."""
    q, k, v = _qkv(1, 64, 64, 2, 2, 84)
    with pytest.raises(ValueError, match="head_dim") as info:
        fa3jit.flash_attn_func(q, k, v)
    assert "a multiple of 8 in [8, 256]" in str(info.value)


def test_num_heads_not_a_multiple_of_num_heads_kv():
    q, k, v = _qkv(1, 64, 64, 6, 4, 64)
    with pytest.raises(ValueError, match="num_heads"):
        fa3jit.flash_attn_func(q, k, v)


@pytest.mark.parametrize("case", ["cpu", "q_3d", "k_batch", "v_heads", "last_dim_strided", "out_shape", "scale_zero"])
def test_python_side_checks(case):
    q, k, v = _qkv(2, 64, 64, 4, 2, 64)
    out = None
    scale = None
    needle = {"cpu": "CUDA", "q_3d": "4 dimensions", "k_batch": "k has shape", "v_heads": "v has shape",
              "last_dim_strided": "contiguous", "out_shape": "out has shape", "scale_zero": "softmax_scale"}[case]
    if case == "cpu":
        k = k.cpu()
    elif case == "q_3d":
        q = q[0]
    elif case == "k_batch":
        k = k[:1]
    elif case == "v_heads":
        v = v[:, :, :1]
    elif case == "last_dim_strided":
        q = torch.empty(2, 64, 4, 128, dtype=q.dtype, device="cuda")[..., ::2]
    elif case == "out_shape":
        out = torch.empty(2, 64, 4, 32, dtype=q.dtype, device="cuda")
    elif case == "scale_zero":
        scale = 0.0
    with pytest.raises(ValueError, match=re.escape(needle)):
        fa3jit.flash_attn_func(q, k, v, softmax_scale=scale, out=out)


def test_a_good_call_works_after_errors():
    q, k, v = _qkv(1, 256, 256, 4, 2, 128)
    for bad in (lambda: fa3jit.flash_attn_func(q, k[:, :, :, :64], v),
                lambda: fa3jit.flash_attn_func(q.float(), k, v),
                lambda: fa3jit.flash_attn_func(q, torch.empty(1, 256, 3, 128, dtype=q.dtype, device="cuda"),
                                               torch.empty(1, 256, 3, 128, dtype=q.dtype, device="cuda"))):
        with pytest.raises(ValueError):
            bad()
    out = fa3jit.flash_attn_func(q, k, v, causal=True)
    torch.cuda.synchronize()
    check_against_reference(out, None, q, k, v, True)
    assert _capi.library().fa3jit_last_error().decode() == ""


def test_non_tensor_argument_is_a_type_error():
    q, k, v = _qkv(1, 64, 64, 2, 2, 64)
    with pytest.raises(TypeError, match="q"):
        fa3jit.flash_attn_func([1, 2, 3], k, v)
