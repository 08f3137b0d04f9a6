"""Reference attention in torch and FlashAttention-3's pass rule (hopper/test_flash_attn.py, test_util.py;
summarised in docs/kernel-design.md §8).

Two references per case: `upcast=True` is the float32 "truth"; `upcast=False, reorder_ops=True` is the same
math done in the input dtype (scores, softmax output and P.V rounded to fp16/bf16), the error a plain
PyTorch implementation makes. A kernel passes when its error is at most twice that, plus twice the output
dtype's rounding noise at the output's magnitude.

FP8 (e4m3): quantize_e4m3 makes inputs with power-of-two descales per scale group, and
check_fp8_against_reference applies the same rule with an fp8 baseline (fp32 scores, P rounded to e4m3) in
place of the in-dtype math and a float64 reference on the dequantised inputs (testing/reference.h does the same
in C++).
"""

import math

import torch

NEG_INF = float("-inf")


def causal_mask(seqlen_q, seqlen_k, device):
    """True where key j is hidden from query i: bottom-right alignment, j > i + seqlen_k - seqlen_q."""
    row = torch.arange(seqlen_q, device=device)[:, None]
    col = torch.arange(seqlen_k, device=device)[None, :]
    return col > row + (seqlen_k - seqlen_q)


def window_mask(seqlen_q, seqlen_k, window_size, device):
    """True where key j is outside query i's window (left, right), bottom-right aligned as FA3's local mask:
    visible iff i + d - left <= j <= i + d + right with d = seqlen_k - seqlen_q; -1 leaves a side unbounded."""
    left, right = window_size
    row = torch.arange(seqlen_q, device=device)[:, None]
    col = torch.arange(seqlen_k, device=device)[None, :]
    diag = row + (seqlen_k - seqlen_q)
    hidden = torch.zeros(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if right >= 0:
        hidden |= col > diag + right
    if left >= 0:
        hidden |= col < diag - left
    return hidden


def attention_ref(q, k, v, causal=False, softmax_scale=None, upcast=True, reorder_ops=False, window_size=(-1, -1),
                  softcap=0.0, sinks=None):
    """q (b, sq, h, d), k (b, sk, hk, d), v (b, sk, hk, dv) -> out (b, sq, h, dv) in q.dtype and
    lse (b, h, sq) float32 (natural log; -inf for a row that sees no key). Batched matmuls on q's device.
    window_size (left, right), softcap and sinks ((h,) logits joining each row's normaliser as keys of value 0) as
    FlashAttention-3's reference; causal is window_size right 0."""
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
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    empty_rows = None
    if causal or tuple(window_size) != (-1, -1):
        mask = window_mask(seqlen_q, seqlen_k, (window_size[0], 0 if causal else window_size[1]), q.device)
        scores = scores.masked_fill(mask, NEG_INF)
        empty_rows = mask.all(dim=-1)                                 # (sq,)
    if sinks is not None:
        # One more key of score sinks[h] and value 0 in every row (gpt-oss): appended, then dropped after softmax.
        sink_col = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(scores.shape[0], -1, seqlen_q, 1)
        scores = torch.cat([scores, sink_col], dim=-1)
        empty_rows = None
    lse = torch.logsumexp(scores.float(), dim=-1)
    attention = torch.softmax(scores, dim=-1)
    if sinks is not None:
        attention = attention[..., :seqlen_k]
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


# ---- FP8 (e4m3) ---------------------------------------------------------------------------------------------

E4M3_MAX = 448.0
# The FP8 tensor cores accumulate S = Q.K^T with about 2^-13 relative precision (docs/hopper-ptx.md §1, "FP8
# accuracy"); the lse may be off by this fraction of softmax_scale * sum_i |q_i k_i| (testing/reference.h,
# kFp8AccumRelTol: the C++ tests' margin of about 16).
FP8_ACCUM_REL_TOL = 2.0 ** -9


def quantize_e4m3(x, group_ids, num_groups, generator=None):
    """x (float, on any device) and group_ids (int64, x's shape: the scale group of each element) ->
    (x8 float8_e4m3fn, descale float32 (num_groups,)). Each group is first scaled by a random power of two in
    [1/4, 4] (so that the descales differ), then gets the power-of-two descale that brings its amax to at most
    448: x8 * descale[group_ids] is then an exact value (testing/attention_problem.cpp does the same)."""
    factor = torch.pow(2.0, torch.randint(-2, 3, (num_groups,), generator=generator).float()).to(x.device)
    scaled = x.float() * factor[group_ids]
    amax = torch.zeros(num_groups, device=x.device).scatter_reduce(0, group_ids.flatten(), scaled.abs().flatten(),
                                                                   "amax")
    descale = torch.where(amax > 0, torch.pow(2.0, torch.ceil(torch.log2(amax.clamp_min(1e-30) / E4M3_MAX))),
                          torch.ones_like(amax))
    x8 = (scaled / descale[group_ids]).to(torch.float8_e4m3fn)
    return x8, descale.float()


def fp8_baseline(q, k, v, causal, softmax_scale, out_dtype, block_n=None):
    """The error an honest FP8 implementation makes (FA3's fp8 baseline, testing/reference.cpp with
    baseline_p_e4m3): q, k, v dequantised (float), scores and softmax in float32, the online softmax over key
    blocks of block_n (the kernel's; None: one block), last block first, with the unnormalised P rounded to e4m3
    relative to the running max after scaling by 2^8 (and scaled back) before P.V, the row sum from the unrounded
    P; out in out_dtype."""
    seqlen_q, num_heads, head_dim = q.shape[1], q.shape[2], q.shape[3]
    seqlen_k, num_heads_kv = k.shape[1], k.shape[2]
    group = num_heads // num_heads_kv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    qt = q.float().permute(0, 2, 1, 3)
    kt = k.float().permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    vt = v.float().permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    scores = torch.matmul(qt, kt.transpose(-1, -2)) * scale
    if causal:
        scores = scores.masked_fill(causal_mask(seqlen_q, seqlen_k, q.device), NEG_INF)
    block = block_n or seqlen_k
    shape = scores.shape[:-1] + (1,)
    running_max = torch.full(shape, NEG_INF, device=scores.device)
    row_sum = torch.zeros(shape, device=scores.device)
    acc = torch.zeros(scores.shape[:-1] + (vt.shape[-1],), device=scores.device)
    for start in reversed(range(0, seqlen_k, block)):
        s = scores[..., start:start + block]
        new_max = torch.maximum(running_max, s.amax(dim=-1, keepdim=True))
        safe_max = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))
        rescale = torch.exp(running_max - safe_max)  # 0 while the row has seen nothing
        p = torch.exp(s - safe_max)
        row_sum = row_sum * rescale + p.sum(dim=-1, keepdim=True)
        p8 = (p * 256.0).to(torch.float8_e4m3fn).float() / 256.0
        acc = acc * rescale + torch.matmul(p8, vt[..., start:start + block, :])
        running_max = new_max
    out = acc / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum))
    return out.permute(0, 2, 1, 3).to(out_dtype)


def check_fp8_against_reference(out, lse, q, k, v, causal, softmax_scale=None, block_n=None):
    """FA3's FP8 rule: q, k, v are the dequantised inputs (float64 or float32, exact values of e4m3 times
    power-of-two descales); out (in bf16 or fp16) must be within 2x the fp8 baseline's error plus 2x the output
    dtype's rounding noise of the float64 reference; lse within LSE_ATOL + LSE_RTOL |lse| plus the FP8
    accumulation slack. block_n: the kernel's (None: the tile table's for this head_dim, fa3jit.fp8_quant_blocks).
    Returns (err, allowed)."""
    out_ref, lse_ref = attention_ref(q.double(), k.double(), v.double(), causal, softmax_scale, upcast=False)
    if block_n is None:
        import fa3jit
        block_n = fa3jit.fp8_quant_blocks(q.shape[3], causal=causal)[1]
    baseline = fp8_baseline(q, k, v, causal, softmax_scale, out.dtype, block_n)
    assert not torch.isnan(out).any(), "out has NaN"
    # The FP8 tensor cores accumulate S with limited precision (testing/reference.h: lse_slack, out_slack): every
    # score may be off by slack = FP8_ACCUM_REL_TOL * scale * max_j sum_i |q_i k_ji|, every weight p_j / sum by
    # e^(2 slack), so O by (e^(2 slack) - 1) times the softmax-weighted mean of max_d |V_jd|.
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[3])
    group = q.shape[2] // k.shape[2]
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    qd = q.double().permute(0, 2, 1, 3)
    kd = k.double().permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    vd = v.double().permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    dot_abs = torch.matmul(qd.abs(), kd.abs().transpose(-1, -2))
    scores = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    if causal:
        mask = causal_mask(seqlen_q, seqlen_k, q.device)
        dot_abs = dot_abs.masked_fill(mask, 0.0)
        scores = scores.masked_fill(mask, NEG_INF)
    slack = FP8_ACCUM_REL_TOL * scale * dot_abs.amax(dim=-1)                       # (b, h, sq)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    weighted_v_max = torch.matmul(weights, vd.abs().amax(dim=-1, keepdim=True)).squeeze(-1)
    out_slack = (torch.expm1(2.0 * slack) * weighted_v_max).permute(0, 2, 1).unsqueeze(-1)  # (b, sq, h, 1)
    err = (out.double() - out_ref).abs().max().item()
    excess = ((out.double() - out_ref).abs() - out_slack).max().item()
    base_err = (baseline.double() - out_ref).abs().max().item()
    out_ref_dt = out_ref.to(out.dtype)
    rounding = (out_ref_dt + 0.3 - 0.3 - out_ref_dt).abs().max().item()
    allowed = 2 * base_err + 2 * rounding
    assert excess <= allowed, (f"max |out - ref| - FP8 GEMM slack = {excess:.3e} > {allowed:.3e} (2 x fp8 baseline "
                               f"{base_err:.3e} + 2 x rounding {rounding:.3e}); max |out - ref| = {err:.3e}")
    n_empty = empty_row_count(seqlen_q, seqlen_k, causal)
    if n_empty:
        assert torch.count_nonzero(out[:, :n_empty]).item() == 0, "rows that see no key must be exactly 0"
    if lse is not None:
        if n_empty:
            assert torch.all(lse[:, :, :n_empty] == NEG_INF), "lse of rows that see no key must be -inf"
        visible_lse, visible_ref = lse[:, :, n_empty:].double(), lse_ref[:, :, n_empty:]
        lse_err = (visible_lse - visible_ref).abs()
        lse_allowed = LSE_ATOL + LSE_RTOL * visible_ref.abs() + slack[:, :, n_empty:]
        worst = (lse_err - lse_allowed).max().item() if lse_err.numel() else -1.0
        assert worst <= 0, f"lse off by up to {lse_err.max().item():.3e} (allowed {LSE_ATOL} + {LSE_RTOL}*|lse| + fp8 slack)"
    return err, allowed
