"""fa3jit.flash_attn_varlen_func and fa3jit.flash_attn_with_kvcache (FlashAttention-3's serving entry points).

Without a GPU: the Python path with a torch stand-in (serving_stub_run.py: the checks before the device and the
fa3jit_forward_params each call hands the library), and with torch on the CPU the errors of bad arguments.
On an H100/H200: packed variable-length batches (lengths 0, 1, 113, 239 and a few hundred), GQA 1:1, 4:1 and 8:1,
head_dim 64/128/256, fp16 and bf16, causal and not; paged caches of page sizes 1, 3, 16, 64 and 128 with shuffled page
tables whose unused entries hold garbage; decoding with num_splits 1, 3 and 0 (the heuristic), dense and paged.
Each sequence is compared with a float64 reference (bottom-right causal mask: query i of a sequence of Lq rows
and Lk keys sees key j iff j <= i + Lk - Lq) with FlashAttention-3's rule (attention_reference.py), out poisoned
with NaN before the call."""

import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

import fa3jit
from fa3jit import _capi

from support import ROOT, load_data, needs_gpu, needs_library, needs_torch

# ---- without torch or a GPU -------------------------------------------------------------------------------


@needs_library
def test_python_path_without_torch_or_gpu():
    """serving_stub_run.py: a torch stand-in, the library's forward and workspace-size calls recorded."""
    script = pathlib.Path(__file__).resolve().parent / "serving_stub_run.py"
    env = dict(os.environ, FA3JIT_LIBRARY=str(pathlib.Path(_capi.library_path()).resolve()))
    result = subprocess.run([sys.executable, str(script), str(ROOT)], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stdout + result.stderr


@needs_library
def test_serving_workspace_against_the_fake_driver():
    """serving_fake_driver_run.py: the kept workspace passed without a size query, refused by the library's own check
    when too small, then grown; pointers in the fake CUDA driver's memory."""
    fake = pathlib.Path(_capi.library_path()).resolve().parent / "fake_driver" / "libcuda.so.1"
    if not fake.is_file():
        pytest.skip(f"no fake driver next to the library ({fake}); build tests/fake_driver")
    script = pathlib.Path(__file__).resolve().parent / "serving_fake_driver_run.py"
    env = dict(os.environ, LD_LIBRARY_PATH=f"{fake.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}",
               FA3JIT_LIBRARY=str(pathlib.Path(_capi.library_path()).resolve()))
    result = subprocess.run([sys.executable, str(script), str(ROOT), str(fake)], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stdout + result.stderr


# ---- with torch, before the device (CPU tensors) -------------------------------------------------------------

def _cpu_inputs(torch):
    bf = torch.bfloat16
    q = torch.zeros(10, 8, 128, dtype=bf)
    k = torch.zeros(20, 2, 128, dtype=bf)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 20], dtype=torch.int32)
    k_pages = torch.zeros(6, 16, 2, 128, dtype=bf)
    table = torch.tensor([[0, 3, -5], [2, 10 ** 6, 1]], dtype=torch.int32)
    used = torch.tensor([20, 7], dtype=torch.int32)
    return q, k, cu, cu_k, k_pages, table, used


@needs_library
@needs_torch
def test_bad_arguments_are_refused_before_the_device():
    torch = pytest.importorskip("torch")
    q, k, cu, cu_k, k_pages, table, used = _cpu_inputs(torch)
    varlen, kvcache = fa3jit.flash_attn_varlen_func, fa3jit.flash_attn_with_kvcache
    cases = [
        (lambda: varlen(q, k, k, cu.long(), cu_k), ValueError, ["cu_seqlens_q.dtype is torch.int64", "torch.int32"]),
        (lambda: varlen(q, k, k, cu, cu_k.float()), ValueError, ["cu_seqlens_k.dtype is torch.float32"]),
        (lambda: varlen(q, k_pages, k_pages, cu, seqused_k=used, page_table=table.flatten()), ValueError,
         ["page_table must have 2 dimensions"]),
        (lambda: varlen(q, k_pages[:, :0], k_pages[:, :0], cu, seqused_k=used, page_table=table), ValueError,
         ["page_size", "is 0", "at least one key per page"]),
        (lambda: kvcache(q[None, :2], k_pages[:, :0], k_pages[:, :0], used, table[:1]), ValueError,
         ["page_size", "is 0"]),
        (lambda: varlen(q, k_pages, k_pages, cu, page_table=table), ValueError, ["seqused_k is None"]),
        (lambda: varlen(q, k, k, cu, cu_k, seqused_k=used.long()), ValueError, ["seqused_k.dtype is torch.int64"]),
        (lambda: varlen(q, k, k, torch.tensor([0, 1, 2, 3, 4, 5], dtype=torch.int32)[::2], cu_k), ValueError,
         ["cu_seqlens_q must be contiguous"]),
        (lambda: kvcache(q[None], k[None], k[None], table[0]), ValueError, ["cache_seqlens has shape (3,)"]),
        (lambda: varlen(q, k, k, cu, cu_k, window_size=(64, -2)), ValueError, ["window_size[1] is -2"]),
        (lambda: varlen(q, k, k, cu, cu_k, window_size=64), ValueError, ["window_size is 64", "pair"]),
        (lambda: varlen(q, k, k, cu, cu_k, softcap=-1.0), ValueError, ["softcap is -1.0"]),
        (lambda: varlen(q, k, k, cu, cu_k, softcap=math.inf), ValueError, ["softcap is inf"]),
        (lambda: varlen(q, k, k, cu, cu_k, sinks=used.float()), ValueError, ["sinks is torch.float32 (2,)",
                                                                            "(num_heads,)"]),
        (lambda: varlen(q, k, k, cu, cu_k, attention_chunk=64), NotImplementedError, ["attention_chunk=64"]),
        (lambda: kvcache(q[None], k[None], k[None], k=q[None], v=q[None]), NotImplementedError, ["k=<tensor"]),
        (lambda: kvcache(q[None], k[None], k[None], rotary_cos=k, rotary_sin=k), NotImplementedError,
         ["rotary_cos="]),
        (lambda: kvcache(q[None], k[None], k[None], scheduler_metadata=used.float()), ValueError,
         ["scheduler_metadata is torch.float32", "get_scheduler_metadata"]),
        (lambda: varlen(q, k, k, cu, cu_k), ValueError, ["q is on cpu; expected a CUDA tensor"]),
    ]
    for call, error_type, needles in cases:
        with pytest.raises(error_type) as info:
            call()
        assert all(needle in str(info.value) for needle in needles), (needles, str(info.value))


# ---- on the GPU: float64 reference per sequence ----------------------------------------------------------------

NUM_HEADS = 8
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def _torch_dtype(torch, name):
    return getattr(torch, DTYPES[name])


def _sequence_reference(torch, q, k, v, causal, softmax_scale=None, variant=None):
    """One sequence, q (Lq, h, d), k and v (Lk, hkv, d): (out float64, lse float64 (h, Lq), out in the input dtype
    by the same math in that dtype), with attention_reference.attention_ref. variant: dict of window_size, softcap,
    sinks."""
    from attention_reference import attention_ref
    variant = variant or {}
    if k.shape[0] == 0:
        out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=torch.float64, device=q.device)
        lse = torch.full((q.shape[1], q.shape[0]), -math.inf, dtype=torch.float64, device=q.device)
        if variant.get("sinks") is not None:
            lse = variant["sinks"].double()[:, None].expand(-1, q.shape[0]).clone()
        return out, lse, out.to(q.dtype)
    out64, lse64 = attention_ref(q[None].double(), k[None].double(), v[None].double(), causal, softmax_scale,
                                 upcast=False, **variant)
    out_lowp, _ = attention_ref(q[None], k[None], v[None], causal, softmax_scale, upcast=False, reorder_ops=True,
                                **variant)
    return out64[0], lse64[0].double(), out_lowp[0]


def _check(torch, out, lse, sequences, causal, softmax_scale=None, variant=None):
    """sequences: (q rows of out / lse as a slice or index tensor, q (Lq, h, d), k (Lk, hkv, d), v). FlashAttention-3's
    rule over the whole batch: max |out - ref| <= 2 x the in-dtype math's + 2 x the output dtype's rounding; rows
    that see no key exactly 0 with lse -inf; lse of the others within LSE_ATOL + LSE_RTOL |lse|."""
    from attention_reference import LSE_ATOL, LSE_RTOL
    assert not torch.isnan(out).any(), "out has NaN (a row left unwritten, or read garbage)"
    err = pt_err = rounding = 0.0
    for rows, q, k, v in sequences:
        lq, lk = q.shape[0], k.shape[0]
        if lq == 0:
            continue
        got = out[rows]
        ref, lse_ref, lowp = _sequence_reference(torch, q, k, v, causal, softmax_scale, variant)
        err = max(err, (got.double() - ref).abs().max().item())
        pt_err = max(pt_err, (lowp.double() - ref).abs().max().item())
        ref_dt = ref.to(out.dtype)
        rounding = max(rounding, (ref_dt + 0.3 - 0.3 - ref_dt).abs().max().item())
        first_visible = max(0, lq - lk) if causal else (0 if lk > 0 else lq)
        if variant:  # rows without keys are checked through the reference (a window may hide any row's keys)
            first_visible = 0
        if first_visible:
            assert torch.count_nonzero(got[:first_visible]).item() == 0, "rows that see no key must be exactly 0"
        if lse is None:
            continue
        got_lse = lse(rows)  # (h, Lq)
        if first_visible:
            assert torch.all(got_lse[:, :first_visible] == -math.inf), "lse of rows that see no key must be -inf"
        visible, visible_ref = got_lse[:, first_visible:].double(), lse_ref[:, first_visible:]
        if variant:
            hidden = torch.isinf(visible_ref)
            assert torch.equal(torch.isinf(visible), hidden), "lse must be -inf exactly where no key is seen"
            assert torch.count_nonzero(got.permute(1, 0, 2)[hidden]).item() == 0, "rows without keys must be 0"
            visible, visible_ref = visible[~hidden], visible_ref[~hidden]
        assert torch.isfinite(visible).all(), "lse of rows that see keys must be finite"
        worst = ((visible - visible_ref).abs() - LSE_ATOL - LSE_RTOL * visible_ref.abs()).max().item() \
            if visible.numel() else -1.0
        assert worst <= 0, f"lse off by {worst:.3e} beyond {LSE_ATOL} + {LSE_RTOL} |lse|"
    allowed = 2 * pt_err + 2 * rounding
    assert err <= allowed, (f"max |out - ref| = {err:.3e} > {allowed:.3e} (2 x in-dtype {pt_err:.3e} + 2 x rounding "
                            f"{rounding:.3e})")


def _randn(torch, generator, dtype, *shape):
    return torch.randn(shape, generator=generator, device="cuda", dtype=torch.float32).to(dtype)


def _cu_seqlens(torch, lengths):
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    return torch.tensor(offsets, dtype=torch.int32, device="cuda"), offsets


def _paged_cache(torch, generator, dtype, keys, values, page_size, garbage_pages=3, nan_garbage=False):
    """A paged cache holding each sequence's keys/values (lists of (L, hkv, d)) in pages spread over the cache in
    shuffled order, sequences interleaved; unused rows and pages hold large finite garbage (so a wrong read shows),
    or NaN with nan_garbage (a cache from torch.empty), unused page-table entries -5 or 10**6. Returns k_cache,
    v_cache, page_table (batch, max_pages)."""
    needed = [-(-k.shape[0] // page_size) for k in keys]
    num_pages = sum(needed) + garbage_pages
    heads_kv, head_dim = keys[0].shape[1], keys[0].shape[2]
    k_cache = _randn(torch, generator, dtype, num_pages, page_size, heads_kv, head_dim) * 30
    v_cache = _randn(torch, generator, dtype, num_pages, page_size, heads_kv, values[0].shape[2]) * 30
    if nan_garbage:
        k_cache.fill_(math.nan)
        v_cache.fill_(math.nan)
    max_pages = max(needed) + 2
    table = torch.tensor([[-5 if j % 2 else 10 ** 6 for j in range(max_pages)] for _ in keys], dtype=torch.int32)
    physical = torch.randperm(num_pages, generator=torch.Generator().manual_seed(num_pages)).tolist()
    order = [(b, j) for j in range(max(needed)) for b in range(len(keys)) if j < needed[b]]  # interleaved
    for (b, j), page in zip(order, physical):
        table[b, j] = page
        rows = keys[b][j * page_size:(j + 1) * page_size]
        k_cache[page, :rows.shape[0]] = rows
        v_cache[page, :rows.shape[0]] = values[b][j * page_size:(j + 1) * page_size]
    return k_cache, v_cache, table.cuda()


def _varlen_cases():
    cases = []
    index = 0
    for dtype in ("fp16", "bf16"):
        for head_dim in (64, 128, 256):
            for causal in (False, True):
                group = (1, 4, 8)[index % 3]
                index += 1
                cases.append(pytest.param(dtype, head_dim, causal, group,
                                          id=f"{dtype}-d{head_dim}-{'causal' if causal else 'full'}-gqa{group}"))
    return cases


@needs_gpu
@pytest.mark.parametrize("dtype_name, head_dim, causal, group", _varlen_cases())
def test_varlen_packed_q_and_kv(dtype_name, head_dim, causal, group):
    torch = pytest.importorskip("torch")
    dtype = _torch_dtype(torch, dtype_name)
    generator = torch.Generator(device="cuda").manual_seed(head_dim * 10 + group + causal)
    q_lengths = [0, 1, 113, 239, 300, 1, 457, 64]
    k_lengths = [5, 0, 113, 300, 239, 1000, 457, 1]
    heads_kv = NUM_HEADS // group
    cu_q, offsets_q = _cu_seqlens(torch, q_lengths)
    cu_k, offsets_k = _cu_seqlens(torch, k_lengths)
    q = _randn(torch, generator, dtype, offsets_q[-1], NUM_HEADS, head_dim)
    k = _randn(torch, generator, dtype, offsets_k[-1], heads_kv, head_dim)
    v = _randn(torch, generator, dtype, offsets_k[-1], heads_kv, head_dim)
    out = torch.full_like(q, math.nan)
    result, lse = fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(q_lengths), max(k_lengths), causal=causal,
                                                out=out, return_lse=True)
    assert result is out and lse.shape == (NUM_HEADS, offsets_q[-1]) and lse.dtype == torch.float32
    sequences = [(slice(offsets_q[b], offsets_q[b + 1]), q[offsets_q[b]:offsets_q[b + 1]],
                  k[offsets_k[b]:offsets_k[b + 1]], v[offsets_k[b]:offsets_k[b + 1]]) for b in range(len(q_lengths))]
    _check(torch, out, lambda rows: lse[:, rows], sequences, causal)
    # max_seqlen_q / max_seqlen_k left None are computed from the offsets: the same call.
    again = fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, causal=causal)
    assert torch.equal(again, out)


@needs_gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen_q_over_dense_kv_with_seqused_k(causal):
    """cu_seqlens_q with k/v (batch, seqlen_k, ...) whose rows past seqused_k hold garbage."""
    torch = pytest.importorskip("torch")
    dtype, head_dim, heads_kv = torch.bfloat16, 128, 2
    generator = torch.Generator(device="cuda").manual_seed(7 + causal)
    q_lengths, k_used, seqlen_k = [113, 1, 0, 239], [300, 64, 17, 239], 320
    cu_q, offsets = _cu_seqlens(torch, q_lengths)
    q = _randn(torch, generator, dtype, offsets[-1], NUM_HEADS, head_dim)
    k = _randn(torch, generator, dtype, len(q_lengths), seqlen_k, heads_kv, head_dim)
    v = _randn(torch, generator, dtype, len(q_lengths), seqlen_k, heads_kv, head_dim)
    for b, used in enumerate(k_used):
        k[b, used:] = 1e3
        v[b, used:] = 1e3
    seqused = torch.tensor(k_used, dtype=torch.int32, device="cuda")
    out, lse = fa3jit.flash_attn_varlen_func(q, k, v, cu_q, max_seqlen_q=239, seqused_k=seqused, causal=causal,
                                             return_lse=True)
    sequences = [(slice(offsets[b], offsets[b + 1]), q[offsets[b]:offsets[b + 1]], k[b, :k_used[b]],
                  v[b, :k_used[b]]) for b in range(len(q_lengths))]
    _check(torch, out, lambda rows: lse[:, rows], sequences, causal)


def _paged_cases():
    cases = []
    index = 0
    for page_size in (1, 3, 16, 64, 128):  # 1 and 3: the gather kernels
        for head_dim in (64, 128, 256):
            dtype = ("bf16", "fp16")[index % 2]
            causal = index % 3 != 1
            group = (8, 1, 4)[index % 3]
            varlen_q = index % 2 == 0
            index += 1
            cases.append(pytest.param(page_size, head_dim, dtype, causal, group, varlen_q,
                                      id=f"page{page_size}-d{head_dim}-{dtype}-{'causal' if causal else 'full'}-"
                                         f"gqa{group}-{'varlen' if varlen_q else 'dense'}_q"))
    return cases


@needs_gpu
@pytest.mark.parametrize("page_size, head_dim, dtype_name, causal, group, varlen_q", _paged_cases())
def test_paged_kvcache(page_size, head_dim, dtype_name, causal, group, varlen_q):
    """Chunked prefill / decode over a paged cache: flash_attn_with_kvcache with a shuffled page table."""
    torch = pytest.importorskip("torch")
    dtype = _torch_dtype(torch, dtype_name)
    heads_kv = NUM_HEADS // group
    generator = torch.Generator(device="cuda").manual_seed(page_size + head_dim + group)
    cache_lengths = [300, 113, 1, 0, 239, 517]
    q_lengths = [37, 113, 1, 0, 239, 5] if varlen_q else [7] * len(cache_lengths)
    keys = [_randn(torch, generator, dtype, n, heads_kv, head_dim) for n in cache_lengths]
    values = [_randn(torch, generator, dtype, n, heads_kv, head_dim) for n in cache_lengths]
    k_cache, v_cache, table = _paged_cache(torch, generator, dtype, keys, values, page_size)
    cache_seqlens = torch.tensor(cache_lengths, dtype=torch.int32, device="cuda")
    if varlen_q:
        cu_q, offsets = _cu_seqlens(torch, q_lengths)
        q = _randn(torch, generator, dtype, offsets[-1], NUM_HEADS, head_dim)
        out = torch.full_like(q, math.nan)
        fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, table, cu_seqlens_q=cu_q,
                                       max_seqlen_q=max(q_lengths), causal=causal, out=out)
        out_again, lse = fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, table, cu_seqlens_q=cu_q,
                                                        max_seqlen_q=max(q_lengths), causal=causal, return_lse=True)
        assert lse.shape == (NUM_HEADS, offsets[-1])
        sequences = [(slice(offsets[b], offsets[b + 1]), q[offsets[b]:offsets[b + 1]], keys[b], values[b])
                     for b in range(len(q_lengths))]
        lse_of = lambda rows: lse[:, rows]  # noqa: E731
    else:
        q = _randn(torch, generator, dtype, len(cache_lengths), q_lengths[0], NUM_HEADS, head_dim)
        out = torch.full_like(q, math.nan)
        fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, table, causal=causal, out=out)
        out_again, lse = fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, table, causal=causal,
                                                        return_lse=True)
        assert lse.shape == (len(cache_lengths), NUM_HEADS, q_lengths[0])
        sequences = [(b, q[b], keys[b], values[b]) for b in range(len(cache_lengths))]
        lse_of = lambda b: lse[b]  # noqa: E731
    assert torch.equal(out, out_again)
    _check(torch, out, lse_of, sequences, causal)


def _variant_cases():
    cases = []
    windows = [(-1, -1), (0, 0), (17, 0), (128, 5), (300, -1), (-1, 64), (40, 200)]
    for index, window in enumerate(windows):
        for causal in (False, True):
            if causal and window[1] > 0:
                continue
            softcap = (0.0, 30.0, 5.0)[index % 3]
            sinks = (index + causal) % 2 == 0 or window == (-1, -1)
            head_dim = (128, 64, 256)[index % 3]
            cases.append(pytest.param(window, causal, softcap, sinks, head_dim,
                                      id=f"w{window[0]}_{window[1]}-{'causal' if causal else 'full'}-cap{softcap:g}"
                                         f"-{'sinks' if sinks else 'nosinks'}-d{head_dim}"))
    return cases


@needs_gpu
@pytest.mark.parametrize("window, causal, softcap, use_sinks, head_dim", _variant_cases())
def test_window_softcap_sinks(window, causal, softcap, use_sinks, head_dim):
    """FlashAttention-3's window_size, softcap and gpt-oss's sinks: packed varlen prefill, then a paged decode step
    (split by the heuristic) over the same keys, both against the float64 reference."""
    torch = pytest.importorskip("torch")
    dtype = torch.bfloat16
    generator = torch.Generator(device="cuda").manual_seed(head_dim + window[0] * 7 + causal)
    q_lengths = [1, 113, 239, 0, 300, 64]
    k_lengths = [5, 113, 1000, 17, 300, 2000]
    heads_kv = 2
    sinks = (torch.rand(NUM_HEADS, generator=generator, device="cuda") * 8 - 2) if use_sinks else None
    variant = dict(window_size=window, softcap=softcap, sinks=sinks)
    cu_q, offsets_q = _cu_seqlens(torch, q_lengths)
    cu_k, offsets_k = _cu_seqlens(torch, k_lengths)
    q = _randn(torch, generator, dtype, offsets_q[-1], NUM_HEADS, head_dim)
    k = _randn(torch, generator, dtype, offsets_k[-1], heads_kv, head_dim)
    v = _randn(torch, generator, dtype, offsets_k[-1], heads_kv, head_dim)
    out = torch.full_like(q, math.nan)
    _, lse = fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(q_lengths), max(k_lengths), causal=causal,
                                           out=out, return_lse=True, **variant)
    sequences = [(slice(offsets_q[b], offsets_q[b + 1]), q[offsets_q[b]:offsets_q[b + 1]],
                  k[offsets_k[b]:offsets_k[b + 1]], v[offsets_k[b]:offsets_k[b + 1]]) for b in range(len(q_lengths))]
    _check(torch, out, lambda rows: lse[:, rows], sequences, causal, variant=variant)

    keys = [k[offsets_k[b]:offsets_k[b + 1]] for b in range(len(k_lengths))]
    values = [v[offsets_k[b]:offsets_k[b + 1]] for b in range(len(k_lengths))]
    k_cache, v_cache, table = _paged_cache(torch, generator, dtype, keys, values, 16)
    q1 = _randn(torch, generator, dtype, len(k_lengths), 1, NUM_HEADS, head_dim)
    cache_seqlens = torch.tensor(k_lengths, dtype=torch.int32, device="cuda")
    out1, lse1 = fa3jit.flash_attn_with_kvcache(q1, k_cache, v_cache, cache_seqlens, table, causal=causal,
                                                num_splits=0, return_lse=True, **variant)
    _check(torch, out1, lambda b: lse1[b], [(b, q1[b], keys[b], values[b]) for b in range(len(k_lengths))], causal,
           variant=variant)


@needs_gpu
def test_paged_cache_through_flash_attn_varlen_func():
    torch = pytest.importorskip("torch")
    dtype, head_dim, heads_kv, page_size = torch.bfloat16, 128, 2, 64
    generator = torch.Generator(device="cuda").manual_seed(11)
    q_lengths, cache_lengths = [113, 1, 239], [113, 700, 239]
    keys = [_randn(torch, generator, dtype, n, heads_kv, head_dim) for n in cache_lengths]
    values = [_randn(torch, generator, dtype, n, heads_kv, head_dim) for n in cache_lengths]
    k_cache, v_cache, table = _paged_cache(torch, generator, dtype, keys, values, page_size)
    cu_q, offsets = _cu_seqlens(torch, q_lengths)
    q = _randn(torch, generator, dtype, offsets[-1], NUM_HEADS, head_dim)
    seqused = torch.tensor(cache_lengths, dtype=torch.int32, device="cuda")
    out, lse = fa3jit.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, max_seqlen_q=239, seqused_k=seqused,
                                             page_table=table, causal=True, return_lse=True)
    sequences = [(slice(offsets[b], offsets[b + 1]), q[offsets[b]:offsets[b + 1]], keys[b], values[b])
                 for b in range(len(q_lengths))]
    _check(torch, out, lambda rows: lse[:, rows], sequences, True)


def _decode_cases():
    cases = []
    index = 0
    for num_splits in (1, 3, 0):
        for paged in (False, True):
            head_dim = (64, 128, 256)[index % 3]
            group = (8, 4, 1)[(index // 2) % 3]
            pack_gqa = (None, True, False)[index % 3]
            index += 1
            cases.append(pytest.param(num_splits, paged, head_dim, group, pack_gqa,
                                      id=f"splits{num_splits}-{'paged' if paged else 'dense'}-d{head_dim}-gqa{group}-"
                                         f"pack{pack_gqa}"))
    return cases


@needs_gpu
@pytest.mark.parametrize("num_splits, paged, head_dim, group, pack_gqa", _decode_cases())
def test_decode(num_splits, paged, head_dim, group, pack_gqa):
    """seqlen_q = 1 per sequence over caches of 0 to a few thousand keys; num_splits 1, 3 and 0 (the heuristic,
    which splits such a small grid), the workspace sized through the C ABI and allocated by the call."""
    torch = pytest.importorskip("torch")
    dtype = torch.bfloat16 if head_dim != 128 else torch.float16
    heads_kv = NUM_HEADS // group
    generator = torch.Generator(device="cuda").manual_seed(num_splits * 100 + head_dim + group)
    cache_lengths = [2049, 1, 113, 0, 239, 777]
    batch = len(cache_lengths)
    q = _randn(torch, generator, dtype, batch, 1, NUM_HEADS, head_dim)
    if paged:
        keys = [_randn(torch, generator, dtype, n, heads_kv, head_dim) for n in cache_lengths]
        values = [_randn(torch, generator, dtype, n, heads_kv, head_dim) for n in cache_lengths]
        k_cache, v_cache, table = _paged_cache(torch, generator, dtype, keys, values, 64)
    else:
        capacity = max(cache_lengths) + 31
        k_cache = _randn(torch, generator, dtype, batch, capacity, heads_kv, head_dim)
        v_cache = _randn(torch, generator, dtype, batch, capacity, heads_kv, head_dim)
        for b, n in enumerate(cache_lengths):
            k_cache[b, n:] = 1e3
            v_cache[b, n:] = 1e3
        keys = [k_cache[b, :n] for b, n in enumerate(cache_lengths)]
        values = [v_cache[b, :n] for b, n in enumerate(cache_lengths)]
        table = None
    cache_seqlens = torch.tensor(cache_lengths, dtype=torch.int32, device="cuda")
    out = torch.full_like(q, math.nan)
    result, lse = fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, table, causal=True,
                                                 num_splits=num_splits, pack_gqa=pack_gqa, out=out,
                                                 return_lse=True)
    assert result is out and lse.shape == (batch, NUM_HEADS, 1)
    _check(torch, out, lambda b: lse[b], [(b, q[b], keys[b], values[b]) for b in range(batch)], True)
    # The schedule asked ahead (FlashAttention-3's get_scheduler_metadata, over the batch's longest key length) and
    # passed in: the call runs it, bit for bit as the same schedule asked for explicitly; a heuristic split shows
    # as more than one split (this grid is far from filling the GPU).
    metadata = fa3jit.get_scheduler_metadata(batch, 1, max(cache_lengths), NUM_HEADS, heads_kv, head_dim,
                                             cache_seqlens, qkv_dtype=dtype,
                                             page_size=k_cache.shape[1] if paged else None, causal=True,
                                             num_splits=num_splits, pack_gqa=pack_gqa)
    planned_splits, planned_packing = metadata.tolist()
    assert planned_splits == num_splits if num_splits else planned_splits > 1
    if pack_gqa is not None:
        assert planned_packing == int(pack_gqa)
    scheduled = fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, table, causal=True,
                                               num_splits=num_splits, pack_gqa=pack_gqa, scheduler_metadata=metadata)
    explicit = fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, table, causal=True,
                                              num_splits=planned_splits, pack_gqa=bool(planned_packing))
    assert torch.equal(scheduled, explicit)
    bound = 2 * torch.finfo(dtype).eps * max(1.0, out.float().abs().max().item())
    assert (scheduled.float() - out.float()).abs().max().item() <= bound  # fp32 partials: a rounding apart at most
    if num_splits != 1:
        # Split or not, the result is the same attention: the partials and their merge are fp32, so the two
        # differ by the final rounding at most (two units in the last place here).
        single = fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, table, causal=True,
                                                num_splits=1, pack_gqa=pack_gqa)
        assert (single.float() - out.float()).abs().max().item() <= bound


# ---- FP8 KV cache --------------------------------------------------------------------------------------------

def _fp8_cases():
    # (kv layout, q dtype, seqlen_q: 1 = decode / "varlen" = chunked prefill of packed q, num_splits, head_dim,
    # group, how q_descale / k_descale are given)
    rows = [("paged16", "e4m3", 1, 0, 128, 4, "tensor"), ("paged64", "bf16", 1, 0, 64, 8, "computed"),
            ("dense", "e4m3", 1, 1, 256, 1, "tensor"), ("dense", "fp16", 1, 3, 128, 8, "static"),
            ("paged16", "e4m3", "varlen", 1, 128, 4, "stride0"), ("paged64", "bf16", "varlen", 0, 64, 1, "computed"),
            ("paged128", "e4m3", 7, 1, 256, 2, "tensor"), ("paged16", "bf16", 1, 1, 96, 4, "static"),
            ("paged3", "e4m3", 1, 0, 128, 4, "tensor"), ("paged1", "e4m3", "varlen", 1, 64, 2, "tensor"),
            ("paged3", "e4m3", "varlen", 0, 256, 2, "tensor"), ("paged5", "fp16", "varlen", 1, 128, 4, "computed")]
    return [pytest.param(*row, id="-".join(str(x) for x in row)) for row in rows]


@needs_gpu
@pytest.mark.parametrize("layout, q_kind, seqlen_q, num_splits, head_dim, group, scales", _fp8_cases())
def test_fp8_kv_cache(layout, q_kind, seqlen_q, num_splits, head_dim, group, scales):
    """e4m3 K/V pages (or a dense e4m3 cache) with per-(batch, kv head) descales, e4m3 q or a 16-bit q quantised in
    the call, decode and chunked prefill, split and not: each sequence against the float64 attention of the
    dequantised inputs with FlashAttention-3's FP8 rule (attention_reference.check_fp8_against_reference). Every
    cache slot that holds no sequence's key is NaN (e4m3's 0x7f, a cache from torch.empty): none may reach the
    output, through P = 0 times a NaN value in P.V or otherwise."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    from attention_reference import check_fp8_against_reference, quantize_e4m3
    from fa3jit import serving
    e4m3 = torch.float8_e4m3fn
    heads_kv = NUM_HEADS // group
    seed = head_dim * 10 + group + (seqlen_q if isinstance(seqlen_q, int) else 3) + num_splits
    generator = torch.Generator(device="cuda").manual_seed(seed)
    cpu_generator = torch.Generator().manual_seed(seed)
    cache_lengths = [2049, 1, 113, 0, 239, 777] if seqlen_q == 1 else [300, 113, 1, 0, 239, 517]
    batch, capacity = len(cache_lengths), max(cache_lengths) + 31
    varlen_q = seqlen_q == "varlen"
    q_lengths = [37, 113, 1, 0, 239, 5] if varlen_q else [seqlen_q] * batch

    # K and V: (batch, capacity, kv heads, d) quantised per (batch, kv head); rows past a sequence hold garbage.
    ids = (torch.arange(batch, device="cuda")[:, None, None, None] * heads_kv +
           torch.arange(heads_kv, device="cuda")[None, None, :, None]).expand(batch, capacity, heads_kv, head_dim)
    kv8, kv_descales = [], []
    for _ in range(2):
        x8, descale = quantize_e4m3(_randn(torch, generator, torch.float32, batch, capacity, heads_kv, head_dim),
                                    ids, batch * heads_kv, cpu_generator)
        kv8.append(x8)
        kv_descales.append(descale.reshape(batch, heads_kv))
    (k8, v8), (k_descale, v_descale) = kv8, kv_descales
    keys = [k8[b, :n].float() for b, n in enumerate(cache_lengths)]      # e4m3 values, exact in float32
    values = [v8[b, :n].float() for b, n in enumerate(cache_lengths)]
    if layout == "dense":
        k_dense, v_dense, table = k8.float(), v8.float(), None
        for b, n in enumerate(cache_lengths):
            k_dense[b, n:], v_dense[b, n:] = math.nan, math.nan
        k_cache, v_cache = k_dense.to(e4m3), v_dense.to(e4m3)  # e4m3 values round-trip exactly
    else:
        k_pages, v_pages, table = _paged_cache(torch, generator, torch.float32, keys, values, int(layout[5:]),
                                               nan_garbage=True)
        k_cache, v_cache = k_pages.to(e4m3), v_pages.to(e4m3)
    cache_seqlens = torch.tensor(cache_lengths, dtype=torch.int32, device="cuda")

    # q: e4m3 with per-(batch, kv head) descales, or 16-bit (the call quantises it). Packed q has 3 padding rows
    # past cu_seqlens_q[batch] (CUDA-graph bucketing), inf in a 16-bit q: a scale computed over them would zero q.
    total_q = sum(q_lengths)
    padding = 3 if varlen_q else 0
    q_shape = (total_q + padding, NUM_HEADS, head_dim) if varlen_q else (batch, q_lengths[0], NUM_HEADS, head_dim)
    q_real = _randn(torch, generator, torch.float32, *q_shape)
    if varlen_q:
        cu_q, offsets = _cu_seqlens(torch, q_lengths)
        batch_of_row = torch.repeat_interleave(torch.arange(batch + 1, device="cuda"),
                                               torch.tensor(q_lengths + [padding], device="cuda"))
        batch_of_row = batch_of_row.clamp_(max=batch - 1)  # padding rows: any sequence's descale
    if q_kind == "e4m3":
        if varlen_q:
            q_ids = batch_of_row[:, None, None] * heads_kv + (torch.arange(NUM_HEADS, device="cuda") //
                                                              group)[None, :, None]
        else:
            q_ids = (torch.arange(batch, device="cuda")[:, None, None, None] * heads_kv +
                     (torch.arange(NUM_HEADS, device="cuda") // group)[None, None, :, None])
        q_in, q_descale = quantize_e4m3(q_real, q_ids.expand(q_shape), batch * heads_kv, cpu_generator)
        q_descale = q_descale.reshape(batch, heads_kv)
        q8, q_used_descale = q_in, q_descale
    else:
        q_in = q_real.to(torch.bfloat16 if q_kind == "bf16" else torch.float16)
        if padding:
            q_in[total_q:] = math.inf
        q_descale = torch.tensor(2.0 ** -6, device="cuda") if scales == "static" else None
        # The same quantisation the call makes; the result is compared with q below, so a wrong scale shows.
        q8, q_used_descale = serving._quantized_q(q_in, q_descale, batch, heads_kv, cu_q if varlen_q else None)
        if scales == "computed":
            q_used_descale = q_used_descale.expand(batch, heads_kv)
        else:
            q_used_descale = q_used_descale.reshape(1, 1).expand(batch, heads_kv)
    if scales == "stride0":  # sequence 0's scales for every sequence, as a stride-0 view: the keys are then
        k_descale = k_descale[:1].expand(batch, heads_kv)  # k8 * k_descale[0], which the reference below uses
    kwargs = dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, num_splits=num_splits,
                  causal=True, return_lse=True)
    if varlen_q:
        kwargs.update(cu_seqlens_q=cu_q, max_seqlen_q=max(q_lengths))
    out = torch.full(q_shape, math.nan, device="cuda", dtype=torch.bfloat16)
    result, lse = fa3jit.flash_attn_with_kvcache(q_in, k_cache, v_cache, cache_seqlens, table, out=out, **kwargs)
    assert result is out

    # The dequantised inputs of each sequence, and the check.
    dq = q8.float().unflatten(-2, (heads_kv, group))
    if varlen_q:
        dq = dq * q_used_descale[batch_of_row][:, :, None, None]
    else:
        dq = dq * q_used_descale[:, None, :, None, None]
    dq = dq.flatten(-3, -2)
    if q_kind != "e4m3":
        used = slice(0, total_q) if varlen_q else slice(None)
        assert (dq[used] - q_in[used].float()).abs().max().item() <= \
            2.0 ** -4 * q_in[used].float().abs().max().item() + 1e-6, \
            "the call's e4m3 q is not q within e4m3's precision"
    for b in range(batch):
        rows = slice(offsets[b], offsets[b + 1]) if varlen_q else b
        got, got_lse = out[rows], (lse[:, rows] if varlen_q else lse[b])
        lk = cache_lengths[b]
        if got.shape[0] == 0:
            continue
        if lk == 0:
            assert torch.count_nonzero(got).item() == 0 and torch.all(got_lse == -math.inf)
            continue
        q_b = dq[rows]
        k_b = keys[b] * k_descale[b][None, :, None]
        v_b = values[b] * v_descale[b][None, :, None]
        check_fp8_against_reference(got[None], got_lse[None], q_b[None], k_b[None], v_b[None], True)


@needs_gpu
def test_nothing_to_compute():
    """No query rows, or no keys at all: nothing is launched; rows that see no key are 0 with lse -inf."""
    torch = pytest.importorskip("torch")
    q = torch.randn(5, NUM_HEADS, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.empty(0, 2, 64, device="cuda", dtype=torch.bfloat16)
    cu_q = torch.tensor([0, 2, 5], dtype=torch.int32, device="cuda")
    cu_k = torch.zeros(3, dtype=torch.int32, device="cuda")
    out, lse = fa3jit.flash_attn_varlen_func(q, k, k, cu_q, cu_k, return_lse=True)
    assert torch.count_nonzero(out).item() == 0 and torch.all(lse == -math.inf)
    empty = fa3jit.flash_attn_varlen_func(q[:0], q[:, :2], q[:, :2], torch.zeros(3, dtype=torch.int32,
                                                                                 device="cuda"), cu_q)
    assert empty.shape == (0, NUM_HEADS, 64)
    if hasattr(torch, "float8_e4m3fn"):  # no query row over an FP8 cache: q's quantisation has nothing to scale
        k8 = q[:, :2].to(torch.float8_e4m3fn)
        for q_empty in (q[:0], q[:0].to(torch.float8_e4m3fn)):
            empty = fa3jit.flash_attn_varlen_func(q_empty, k8, k8, torch.zeros(3, dtype=torch.int32, device="cuda"),
                                                  cu_q)
            assert empty.shape == (0, NUM_HEADS, 64) and empty.dtype == torch.bfloat16


@needs_gpu
@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
def test_decode_in_a_cuda_graph(paged):
    """A decode step captured once in a CUDA graph and replayed while the engine changes, in place, the lengths,
    the page table and the queries: every replay matches the reference of that step, including replays with fewer
    active sequences than captured (a zeroed tail of cache_seqlens). The split workspace is allocated inside the
    capture (the graph's memory pool), and nothing in the call reads device values on the host."""
    torch = pytest.importorskip("torch")
    dtype = torch.bfloat16
    head_dim, group, page_size, batch = 128, 4, 16, 4
    heads_kv = NUM_HEADS // group
    generator = torch.Generator(device="cuda").manual_seed(7 + paged)
    capacity = 4096
    max_pages = capacity // page_size
    num_pages = batch * max_pages
    k_cache = _randn(torch, generator, dtype, num_pages, page_size, heads_kv, head_dim)
    v_cache = _randn(torch, generator, dtype, num_pages, page_size, heads_kv, head_dim)
    if not paged:
        k_cache = k_cache.view(batch, capacity, heads_kv, head_dim)
        v_cache = v_cache.view(batch, capacity, heads_kv, head_dim)
    q = torch.zeros(batch, 1, NUM_HEADS, head_dim, dtype=dtype, device="cuda")
    cache_seqlens = torch.ones(batch, dtype=torch.int32, device="cuda")
    page_table = torch.zeros(batch, max_pages, dtype=torch.int32, device="cuda") if paged else None
    out = torch.empty_like(q)

    def step():
        fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, page_table, causal=True, num_splits=0,
                                       out=out)

    step()  # warm: compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    rng = torch.Generator().manual_seed(11)
    for replay, lengths in enumerate([[3000, 17, 1, 400], [4096, 2048, 0, 0], [5, 0, 0, 0], [123, 1000, 2500, 64]]):
        q.copy_(_randn(torch, generator, dtype, batch, 1, NUM_HEADS, head_dim))
        cache_seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
        if paged:  # a fresh shuffle of the pages every step
            page_table.copy_(torch.randperm(num_pages, generator=rng)[:batch * max_pages].view(batch, max_pages)
                             .to(torch.int32))
        out.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        sequences = []
        for b, n in enumerate(lengths):
            if paged:
                pages = page_table[b, :-(-n // page_size)].long()
                keys = k_cache[pages].reshape(-1, heads_kv, head_dim)[:n]
                values = v_cache[pages].reshape(-1, heads_kv, head_dim)[:n]
            else:
                keys, values = k_cache[b, :n], v_cache[b, :n]
            sequences.append((b, q[b], keys, values))
        _check(torch, out, None, sequences, True)


@needs_gpu
@pytest.mark.parametrize("num_splits", [1, 3])
def test_padding_rows_of_packed_q(num_splits):
    """Packed q with padding rows past cu_seqlens_q[batch] (CUDA-graph bucketing): the sequences' rows are right;
    the padding rows are left untouched without a split, and merge to 0 (lse -inf) with one, never to workspace
    garbage."""
    torch = pytest.importorskip("torch")
    dtype, head_dim = torch.bfloat16, 128
    generator = torch.Generator(device="cuda").manual_seed(3 + num_splits)
    q = _randn(torch, generator, dtype, 8, NUM_HEADS, head_dim)
    k = _randn(torch, generator, dtype, 700, NUM_HEADS // 4, head_dim)
    v = _randn(torch, generator, dtype, 700, NUM_HEADS // 4, head_dim)
    cu_q = torch.tensor([0, 2, 5], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 300, 700], dtype=torch.int32, device="cuda")
    out = torch.full_like(q, math.nan)
    fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=3, max_seqlen_k=400, causal=True,
                                  num_splits=num_splits, out=out)
    torch.cuda.synchronize()
    _check(torch, out[:5], None, [(slice(0, 2), q[0:2], k[0:300], v[0:300]), (slice(2, 5), q[2:5], k[300:], v[300:])],
           True)
    if num_splits == 1:
        assert torch.isnan(out[5:]).all()
    else:
        assert torch.count_nonzero(out[5:]).item() == 0


def _model_variant_cases():
    return [pytest.param(m, id=m["name"]) for m in load_data("model_shapes.json")["models"]]


@needs_gpu
@pytest.mark.parametrize("model", _model_variant_cases())
def test_model_variants(model):
    """Every released model of tests/data/model_shapes.json as a serving engine runs it: its head counts and head
    dims (head_dim_v where it differs), its sliding window (causal, window_size=(window - 1, 0)), softcap and
    learnable sinks; a packed varlen prefill, then a paged decode step (split by the heuristic) over the same
    keys, both against the float64 reference with FA3's rule."""
    torch = pytest.importorskip("torch")
    heads, heads_kv, d = model["num_heads"], model["num_heads_kv"], model["head_dim"]
    dv = model.get("head_dim_v", d)
    window = model.get("sliding_window")
    generator = torch.Generator(device="cuda").manual_seed(heads * 1000 + d)
    sinks = (torch.rand(heads, generator=generator, device="cuda") * 8 - 2) if model.get("learnable_sinks") else None
    variant = dict(window_size=(window - 1, 0) if window else (-1, -1), softcap=model.get("softcap", 0.0), sinks=sinks)
    longest = 4500 if window and window > 1000 else 700
    q_lengths = [1, 113, longest, 0]
    k_lengths = [17, 113, longest + 300, 5]
    cu_q, offsets_q = _cu_seqlens(torch, q_lengths)
    cu_k, offsets_k = _cu_seqlens(torch, k_lengths)
    q = _randn(torch, generator, torch.bfloat16, offsets_q[-1], heads, d)
    k = _randn(torch, generator, torch.bfloat16, offsets_k[-1], heads_kv, d)
    v = _randn(torch, generator, torch.bfloat16, offsets_k[-1], heads_kv, dv)
    out = torch.full((offsets_q[-1], heads, dv), math.nan, dtype=torch.bfloat16, device="cuda")
    _, lse = fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(q_lengths), max(k_lengths), causal=True,
                                           out=out, return_lse=True, **variant)
    sequences = [(slice(offsets_q[b], offsets_q[b + 1]), q[offsets_q[b]:offsets_q[b + 1]],
                  k[offsets_k[b]:offsets_k[b + 1]], v[offsets_k[b]:offsets_k[b + 1]]) for b in range(len(q_lengths))]
    _check(torch, out, lambda rows: lse[:, rows], sequences, True, variant=variant)

    keys = [k[offsets_k[b]:offsets_k[b + 1]] for b in range(len(k_lengths))]
    values = [v[offsets_k[b]:offsets_k[b + 1]] for b in range(len(k_lengths))]
    k_cache, v_cache, table = _paged_cache(torch, generator, torch.bfloat16, keys, values, 16)
    q1 = _randn(torch, generator, torch.bfloat16, len(k_lengths), 1, heads, d)
    cache_seqlens = torch.tensor(k_lengths, dtype=torch.int32, device="cuda")
    out1, lse1 = fa3jit.flash_attn_with_kvcache(q1, k_cache, v_cache, cache_seqlens, table, causal=True,
                                                num_splits=0, return_lse=True, **variant)
    assert out1.shape == (len(k_lengths), 1, heads, dv)
    _check(torch, out1, lambda b: lse1[b], [(b, q1[b], keys[b], values[b]) for b in range(len(k_lengths))], True,
           variant=variant)


@needs_gpu
def test_serve_while_warming(tmp_path):
    """A server warms a manifest in the background (fa3jit.warm_manifest(..., background=True)) while it serves
    decode steps from kernels already loaded: serve_while_warming_run.py, in a process of its own with an empty
    cache directory, so that the manifest's 18 kernels are really compiled meanwhile. No call waits for a compile
    (the longest is far below one compile, 0.5-1.5 s), calls keep running all along, and every output is bit-identical
    to the first one, which was checked against the float64 reference."""
    pytest.importorskip("torch")
    script = pathlib.Path(__file__).resolve().parent / "serve_while_warming_run.py"
    env = dict(os.environ, FA3JIT_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    print(report)
    assert report["error"] == "None" and report["compiled"] == 18, report
    assert report["warm_s"] >= 0.3, report  # it compiled: 18 kernels take seconds
    assert report["calls_while_warming"] >= 20, report
    assert report["longest_call_ms"] < 150, report
    assert report["identical"], report
