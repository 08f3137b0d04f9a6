"""fa3jit.Kernel on the GPU: flash_attn_func(..., kernel=K) computes attention with the pinned spec, refuses
calls the spec does not describe, a closed kernel and a non-kernel, and works beside the tile-table path."""

import pytest

from support import needs_gpu

pytestmark = needs_gpu

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402
from attention_reference import check_against_reference  # noqa: E402

CAUSAL_SPEC = {"dtype": "bf16", "head_dim": 128, "causal": True}
PINNED_TILE_SPEC = {"dtype": "bf16", "head_dim": 128, "tile": {"block_n": 128}}  # fa3jit.h's example


def _randn(*shape, dtype=torch.bfloat16, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, device="cuda", dtype=dtype, generator=generator)


def _qkv(batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, dtype=torch.bfloat16):
    return (_randn(batch, seqlen_q, num_heads, head_dim, dtype=dtype, seed=31),
            _randn(batch, seqlen_k, num_heads_kv, head_dim, dtype=dtype, seed=32),
            _randn(batch, seqlen_k, num_heads_kv, head_dim, dtype=dtype, seed=33))


@pytest.fixture(scope="module")
def causal_kernel():
    with fa3jit.Kernel(CAUSAL_SPEC) as kernel:
        yield kernel


def test_kernel_describes_its_spec(causal_kernel):
    info = causal_kernel.info()
    assert info["kind"] == "attention_fwd"
    assert info["kernel_name"].startswith("fa3jit_attention_fwd_bf16_d128_causal_")
    assert causal_kernel.summary.startswith("bf16 d128 causal")


@pytest.mark.parametrize("seqlen_q, seqlen_k", [(300, 300), (113, 1031), (1, 339)])
def test_forward_with_a_kernel_matches_the_reference(causal_kernel, seqlen_q, seqlen_k):
    q, k, v = _qkv(2, seqlen_q, seqlen_k, 8, 2, 128)
    out, lse = fa3jit.flash_attn_func(q, k, v, causal=True, return_lse=True, kernel=causal_kernel)
    check_against_reference(out, lse, q, k, v, True)


def test_pinned_tile_spec_matches_the_reference():
    q, k, v = _qkv(1, 777, 1024, 4, 4, 128)
    with fa3jit.Kernel(PINNED_TILE_SPEC) as kernel:
        assert "128x128" in kernel.summary, kernel.summary
        out = torch.full_like(q, float("nan"))
        returned = fa3jit.flash_attn_func(q, k, v, out=out, kernel=kernel)
        assert returned is out
        check_against_reference(out, None, q, k, v, False)


def test_kernel_and_tile_table_paths_interleave(causal_kernel):
    """Alternating pinned and tile-table calls (the per-thread memo of the library must not mix them up)."""
    q, k, v = _qkv(1, 256, 256, 4, 4, 128)
    for _ in range(3):
        pinned = fa3jit.flash_attn_func(q, k, v, causal=True, kernel=causal_kernel)
        table = fa3jit.flash_attn_func(q, k, v, causal=False)
        check_against_reference(pinned, None, q, k, v, True)
        check_against_reference(table, None, q, k, v, False)


@pytest.mark.parametrize("case, needle", [("full_call", "causal"), ("fp16", "dtype"), ("d64", "head_dim")])
def test_a_call_the_spec_does_not_describe_is_refused(causal_kernel, case, needle):
    causal = case != "full_call"
    dtype = torch.float16 if case == "fp16" else torch.bfloat16
    head_dim = 64 if case == "d64" else 128
    q, k, v = _qkv(1, 128, 128, 2, 2, head_dim, dtype=dtype)
    with pytest.raises(fa3jit.Fa3jitValueError, match="kernel spec") as info:
        fa3jit.flash_attn_func(q, k, v, causal=causal, kernel=causal_kernel)
    assert info.value.status_name == "invalid_argument"
    assert needle in str(info.value)


def test_a_closed_kernel_is_refused():
    q, k, v = _qkv(1, 128, 128, 2, 2, 128)
    kernel = fa3jit.Kernel(CAUSAL_SPEC)
    kernel.close()
    with pytest.raises(ValueError, match="closed"):
        fa3jit.flash_attn_func(q, k, v, causal=True, kernel=kernel)
    assert "closed" in repr(kernel)


def test_kernel_argument_must_be_a_kernel():
    q, k, v = _qkv(1, 128, 128, 2, 2, 128)
    with pytest.raises(TypeError, match="kernel"):
        fa3jit.flash_attn_func(q, k, v, kernel='{"dtype": "bf16", "head_dim": 128}')
