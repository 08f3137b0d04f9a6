"""Reference attention in torch and FlashAttention-3's pass rule (hopper/test_flash_attn.py, test_util.py;
summarised in docs/kernel-design.md §8).

Two references per case: `upcast=True` is the float32 "truth"; `upcast=False, reorder_ops=True` is the same
math done in the input dtype (scores, softmax output and P.V rounded to fp16/bf16), the error a plain
PyTorch implementation makes. A kernel passes when its error is at most twice that, plus twice the output
dtype's rounding noise at the output's magnitude.
"""

import math

import torch

NEG_INF = float("-inf")


def causal_mask(seqlen_q, seqlen_k, device):
    """True where key j is hidden from query i: bottom-right alignment, j > i + seqlen_k - seqlen_q."""
    row = torch.arange(seqlen_q, device=device)[:, None]
    col = torch.arange(seqlen_k, device=device)[None, :]
    return col > row + (seqlen_k - seqlen_q)


def attention_ref(q, k, v, causal=False, softmax_scale=None, upcast=True, reorder_ops=False):
    """q (b, sq, h, d), k (b, sk, hk, d), v (b, sk, hk, dv) -> out (b, sq, h, dv) in q.dtype and
    lse (b, h, sq) float32 (natural log; -inf for a row that sees no key). Batched matmuls on q's device."""
    dtype = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    seqlen_q, num_heads, head_dim = q.shape[1], q.shape[2], q.shape[3]
    seqlen_k, num_heads_kv = k.shape[1], k.shape[2]
    group = num_heads // num_heads_kv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    qt = q.permute(0, 2, 1, 3)                                        # (b, h, sq, d)
    kt = k.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)        # (b, h, sk, d)
    vt = v.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)        # (b, h, sk, dv)
    if reorder_ops:
        scores = torch.matmul(qt, (kt * scale).transpose(-1, -2))
    else:
        scores = torch.matmul(qt * scale, kt.transpose(-1, -2))       # (b, h, sq, sk)
    empty_rows = None
    if causal:
        mask = causal_mask(seqlen_q, seqlen_k, q.device)
        scores = scores.masked_fill(mask, NEG_INF)
        empty_rows = mask.all(dim=-1)                                 # (sq,)
    lse = torch.logsumexp(scores.float(), dim=-1)
    attention = torch.softmax(scores, dim=-1)
    if empty_rows is not None:
        attention = attention.masked_fill(empty_rows[:, None], 0.0)   # softmax of all -inf is NaN
    out = torch.matmul(attention.to(vt.dtype), vt)
    return out.permute(0, 2, 1, 3).to(dtype), lse


def empty_row_count(seqlen_q, seqlen_k, causal):
    """Rows 0..n-1 see no key under a bottom-right causal mask when seqlen_q > seqlen_k."""
    return max(0, seqlen_q - seqlen_k) if causal else 0


# LSE is computed in float32 by both sides from the same products; they differ only by summation order and
# the exp2/log2 approximations. 1e-3 absolute (plus 1e-5 relative) is a weight error of 0.1%, below bf16's
# and fp16's output rounding; a wrong scale, base or mask is off by far more.
LSE_ATOL = 1e-3
LSE_RTOL = 1e-5


def check_against_reference(out, lse, q, k, v, causal, softmax_scale=None):
    """Asserts FA3's rule on out and the LSE checks; returns (err, allowed) for messages."""
    out_ref, lse_ref = attention_ref(q, k, v, causal, softmax_scale)
    out_pt, _ = attention_ref(q, k, v, causal, softmax_scale, upcast=False, reorder_ops=True)
    assert not torch.isnan(out).any(), "out has NaN"
    err = (out.float() - out_ref.float()).abs().max().item()
    pt_err = (out_pt.float() - out_ref.float()).abs().max().item()
    rounding = (out_ref + 0.3 - 0.3 - out_ref).abs().max().item()   # in the output dtype, as FA3 does
    allowed = 2 * pt_err + 2 * rounding
    assert err <= allowed, f"max |out - ref| = {err:.3e} > {allowed:.3e} (2 x torch-in-dtype {pt_err:.3e} + 2 x rounding {rounding:.3e})"

    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    n_empty = empty_row_count(seqlen_q, seqlen_k, causal)
    if n_empty:
        assert torch.count_nonzero(out[:, :n_empty]).item() == 0, "rows that see no key must be exactly 0"
    if lse is not None:
        assert lse.dtype == torch.float32 and tuple(lse.shape) == tuple(lse_ref.shape)
        if n_empty:
            assert torch.all(lse[:, :, :n_empty] == NEG_INF), "lse of rows that see no key must be -inf"
        visible_lse, visible_ref = lse[:, :, n_empty:], lse_ref[:, :, n_empty:]
        assert torch.isfinite(visible_lse).all(), "lse of rows that see keys must be finite"
        lse_err = (visible_lse - visible_ref).abs()
        lse_allowed = LSE_ATOL + LSE_RTOL * visible_ref.abs()
        worst = (lse_err - lse_allowed).max().item() if lse_err.numel() else -1.0
        assert worst <= 0, f"lse off by up to {lse_err.max().item():.3e} (allowed {LSE_ATOL} + {LSE_RTOL}*|lse|)"
    return err, allowed
