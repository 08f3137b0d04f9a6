"""The forward matrix on the GPU: dtype {fp16, bf16} x head_dim {64, 128, 256} x causal x {MHA, GQA, MQA} x
every `dense` (seqlen_q, seqlen_k) pair of tests/data/seqlens.json x batch {1, 9}, against a float32 torch
reference with FlashAttention-3's pass rule (attention_reference.py). As in FA3's test matrix, pairs with a
sequence longer than 2048 use batch 2 instead of 9 (the float32 reference would need 3-4 GB per case)."""

import pytest

from support import load_data, needs_gpu

pytestmark = needs_gpu

SEQLENS = load_data("seqlens.json")
NUM_HEADS = SEQLENS["num_heads"]
NUM_HEADS_KV = SEQLENS["num_heads_kv"]  # {"mha": 6, "gqa": 2, "mqa": 1}


def _shape_cases():
    cases = []
    for seqlen_q, seqlen_k in SEQLENS["dense"]:
        for batch in SEQLENS["batch"]:
            if batch > 2 and max(seqlen_q, seqlen_k) > 2048:
                batch = 2
            cases.append(pytest.param(batch, seqlen_q, seqlen_k, id=f"b{batch}-{seqlen_q}x{seqlen_k}"))
    return cases


@pytest.mark.parametrize("batch, seqlen_q, seqlen_k", _shape_cases())
@pytest.mark.parametrize("mha_type", ["mha", "gqa", "mqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256], ids=lambda d: f"d{d}")
@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_forward_matches_reference(dtype_name, head_dim, causal, mha_type, batch, seqlen_q, seqlen_k):
    import torch

    import fa3jit
    from attention_reference import check_against_reference

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    num_heads_kv = NUM_HEADS_KV[mha_type]
    generator = torch.Generator(device="cuda").manual_seed(hash((head_dim, seqlen_q, seqlen_k, batch)) & 0xFFFF)

    def randn(*shape):
        return torch.randn(shape, device="cuda", dtype=dtype, generator=generator)

    q = randn(batch, seqlen_q, NUM_HEADS, head_dim)
    k = randn(batch, seqlen_k, num_heads_kv, head_dim)
    v = randn(batch, seqlen_k, num_heads_kv, head_dim)
    out, lse = fa3jit.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    assert out.shape == (batch, seqlen_q, NUM_HEADS, head_dim) and out.dtype == dtype
    assert lse.shape == (batch, NUM_HEADS, seqlen_q)
    check_against_reference(out, lse, q, k, v, causal)


@pytest.mark.parametrize("batch, seqlen_q, seqlen_k", _shape_cases()[::3])
@pytest.mark.parametrize("mha_type", ["mha", "gqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim, head_dim_v", [(96, 96), (192, 192), (192, 128), (72, 72)],
                         ids=lambda d: f"d{d}")
@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_other_head_dims_match_reference(dtype_name, head_dim, head_dim_v, causal, mha_type, batch, seqlen_q,
                                         seqlen_k):
    """Phi-3's 96, 192, DeepSeek's MLA prefill 192 / 128 and 72 (between the tile table's rows) on every third shape
    of the matrix."""
    import torch

    import fa3jit
    from attention_reference import check_against_reference

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    num_heads_kv = NUM_HEADS_KV[mha_type]
    generator = torch.Generator(device="cuda").manual_seed(hash((head_dim, head_dim_v, seqlen_q, seqlen_k)) & 0xFFFF)

    def randn(*shape):
        return torch.randn(shape, device="cuda", dtype=dtype, generator=generator)

    q = randn(batch, seqlen_q, NUM_HEADS, head_dim)
    k = randn(batch, seqlen_k, num_heads_kv, head_dim)
    v = randn(batch, seqlen_k, num_heads_kv, head_dim_v)
    out = torch.full((batch, seqlen_q, NUM_HEADS, head_dim_v), float("nan"), device="cuda", dtype=dtype)
    _, lse = fa3jit.flash_attn_func(q, k, v, causal=causal, return_lse=True, out=out)
    assert lse.shape == (batch, NUM_HEADS, seqlen_q)
    check_against_reference(out, lse, q, k, v, causal)
