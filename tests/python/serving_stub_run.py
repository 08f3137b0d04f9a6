"""fa3jit.flash_attn_varlen_func and flash_attn_with_kvcache without torch and without a GPU (run by
test_serving.py in a subprocess: it installs a stand-in `torch` module before importing fa3jit).

The stand-in tensors (torch_standin.py) are shapes, strides, dtypes and devices over fake addresses; the library's
fa3jit_attention_forward and fa3jit_attention_workspace_size are replaced by recorders, so what is checked is the
Python side: the checks before the device, and the fa3jit_forward_params each call hands the library (read back
through the ctypes struct). Prints "ok" at the end.

    python3 serving_stub_run.py <repository root>
"""

import ctypes
import math
import os
import sys
import threading

ROOT = sys.argv[1]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_standin  # noqa: E402
from torch_standin import ALLOCATIONS, Device, Tensor, tensor_of, install  # noqa: E402

torch = install(ROOT)

import fa3jit  # noqa: E402
from fa3jit import _capi, attention  # noqa: E402

# ---- recorders in place of the library's forward and workspace size ------------------------------------------

CALLS = []          # (runtime, kernel, a copy of the ForwardParams, stream) per fa3jit_attention_forward
SIZE_QUERIES = []   # a copy of the ForwardParams per fa3jit_attention_workspace_size
WORKSPACE_BYTES = 4096


def _copy(address):
    params = _capi.ForwardParams()
    ctypes.memmove(ctypes.addressof(params), address, ctypes.sizeof(params))
    return params


REFUSED = []  # a copy of the ForwardParams per call refused for a workspace smaller than WORKSPACE_BYTES
FAIL_NEXT = []  # [True]: the next call is refused whatever its workspace


def _forward(runtime, kernel, address, stream):
    # As the library does before launching anything: a call that needs a workspace (it splits, or is causal: a tile
    # counter) is refused when the one given is smaller than its size (WORKSPACE_BYTES, what the size query answers).
    params = _copy(address)
    if FAIL_NEXT:  # a refusal for any other reason
        FAIL_NEXT.pop()
        REFUSED.append(params)
        return 2
    if (params.num_splits != 1 or params.causal) and params.workspace_bytes < WORKSPACE_BYTES:
        REFUSED.append(params)
        return 2  # invalid_argument
    CALLS.append((runtime, kernel, params, stream))
    return 0


def _workspace_size(runtime, address, size):
    SIZE_QUERIES.append(_copy(address))
    ctypes.cast(size, ctypes.POINTER(ctypes.c_size_t))[0] = WORKSPACE_BYTES
    return 0


PLAN_QUERIES = []  # a copy of the ForwardParams per fa3jit_attention_plan


def _plan(runtime, kernel, address, plan):
    PLAN_QUERIES.append(_copy(address))
    plan._obj.num_splits, plan._obj.pack_gqa, plan._obj.workspace_bytes = 5, 1, WORKSPACE_BYTES
    return 0


attention._bind_torch()
attention._attention_forward = _forward
_capi.library().fa3jit_attention_workspace_size = _workspace_size
_library_plan = _capi.library().fa3jit_attention_plan  # the library's own, for the empty-problem checks below
_capi.library().fa3jit_attention_plan = _plan

bf = torch.bfloat16
i32 = torch.int32


def last_call():
    assert CALLS, "no fa3jit_attention_forward call"
    return CALLS[-1][2]


def expect(error_type, needles, function, *args, **kwargs):
    calls = len(CALLS)
    try:
        function(*args, **kwargs)
    except error_type as error:
        message = str(error)
        for needle in needles:
            assert needle in message, f"{needle!r} not in {message!r}"
    else:
        raise AssertionError(f"{function.__name__}{args} {kwargs} was accepted; expected {error_type.__name__} "
                             f"with {needles}")
    assert len(CALLS) == calls, "a refused call reached the library"


# ---- flash_attn_varlen_func: packed q and k/v -----------------------------------------------------------------

batch, total_q, total_k, heads, heads_kv, d = 3, 353, 700, 8, 2, 128
q = Tensor((total_q, heads, d), bf)
k, v = Tensor((total_k, heads_kv, d), bf), Tensor((total_k, heads_kv, d), bf)
cu_q, cu_k = Tensor((batch + 1,), i32), Tensor((batch + 1,), i32)
out, lse = fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239, max_seqlen_k=400, causal=True,
                                         return_lse=True)
assert out.shape == (total_q, heads, d) and out.dtype is bf and lse.shape == (heads, total_q)
assert lse.dtype is torch.float32
p = last_call()
assert p.struct_size == ctypes.sizeof(_capi.ForwardParams)
assert (p.dtype, p.causal, p.batch, p.seqlen_q, p.seqlen_k) == (_capi.DTYPE_BF16, 1, batch, total_q, total_k)
assert (p.num_heads, p.num_heads_kv, p.head_dim, p.head_dim_v) == (heads, heads_kv, d, d)
assert (p.q.data, p.q.stride_batch, p.q.stride_seq, p.q.stride_head) == (q.data_ptr(), 0, heads * d, d)
assert (p.k.data, p.k.stride_batch, p.k.stride_seq, p.k.stride_head) == (k.data_ptr(), 0, heads_kv * d, d)
assert (p.v.data, p.v.stride_seq) == (v.data_ptr(), heads_kv * d)
assert (p.out.data, p.out.stride_batch, p.out.stride_seq) == (out.data_ptr(), 0, heads * d)
assert p.lse == lse.data_ptr() and p.softmax_scale == 0.0
assert (p.out_dtype, p.quant, p.q_descale.data) == (_capi.DTYPE_DEFAULT, _capi.QUANT_NONE, None)
assert (p.cu_seqlens_q, p.max_seqlen_q, p.cu_seqlens_k, p.max_seqlen_k) == (cu_q.data_ptr(), 239, cu_k.data_ptr(), 400)
assert p.seqused_k is None and p.page_table is None and (p.max_pages, p.num_pages, p.page_size) == (0, 0, 0)
# num_splits 0 (the heuristic) may split: the workspace is sized through the C ABI and taken from the thread's
# workspace for the stream, allocated with torch on the first call (whole MiB).
assert (p.num_splits, p.pack_gqa) == (0, -1)
assert len(SIZE_QUERIES) == 1 and SIZE_QUERIES[-1].num_splits == 0 and SIZE_QUERIES[-1].workspace is None
workspace = ALLOCATIONS[-1]
assert workspace.shape == (1 << 20,) and workspace.dtype is torch.uint8 and workspace.device == q.device
assert (p.workspace, p.workspace_bytes) == (workspace.data_ptr(), 1 << 20)
assert CALLS[-1][3] == 0x5151 and CALLS[-1][1] is None  # torch's current stream; the tile table's kernel
# The next call on the stream reuses it: no allocation but its output, and no size query (the library checks the
# kept workspace's size itself).
allocated = len(ALLOCATIONS)
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239, max_seqlen_k=400, causal=True)
assert [t.dtype for t in ALLOCATIONS[allocated:]] == [bf] and last_call().workspace == workspace.data_ptr()
assert len(SIZE_QUERIES) == 1 and not REFUSED
# A call needing more than it holds is refused by the library, asks the size, gets a larger one and is made again;
# later calls reuse that.
WORKSPACE_BYTES = (1 << 20) + 16
calls = len(CALLS)
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239, max_seqlen_k=400, causal=True)
grown = ALLOCATIONS[-1]
assert grown.shape == (2 << 20,) and (last_call().workspace, last_call().workspace_bytes) == (grown.data_ptr(), 2 << 20)
assert len(CALLS) == calls + 1 and len(REFUSED) == 1 and REFUSED[0].workspace == workspace.data_ptr()
assert len(SIZE_QUERIES) == 2
# Another error than a small workspace is raised as it is, after one size query and no second attempt.
FAIL_NEXT.append(True)
try:
    fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239, max_seqlen_k=400, causal=True)
except _capi.Fa3jitValueError:
    pass
else:
    raise AssertionError("a call the library refused returned")
assert len(REFUSED) == 2 and len(SIZE_QUERIES) == 3 and len(CALLS) == calls + 1
# Another thread has a workspace of its own for the same stream.
worker = threading.Thread(target=lambda: fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239,
                                                                        max_seqlen_k=400, causal=True))
worker.start()
worker.join()
assert last_call().workspace not in (workspace.data_ptr(), grown.data_ptr())
# Under CUDA-graph capture each call takes a workspace of its own, of the size asked.
torch_standin.CAPTURING[0] = True
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239, max_seqlen_k=400, causal=True)
captured = ALLOCATIONS[-1]
assert captured.shape == (WORKSPACE_BYTES,) and captured is not grown
assert (last_call().workspace, last_call().workspace_bytes) == (captured.data_ptr(), WORKSPACE_BYTES)
torch_standin.CAPTURING[0] = False
# ... and kept nothing: the next call outside capture reuses the stream's workspace.
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239, max_seqlen_k=400, causal=True)
assert last_call().workspace == grown.data_ptr()
assert [w[0].data_ptr() for w in fa3jit.serving._local.params[4].values()] == [grown.data_ptr()]
# Another current stream has a workspace of its own; back on the first, its workspace is reused.
torch_standin.STREAM[0] = 0x6262
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239, max_seqlen_k=400, causal=True)
other = last_call().workspace
assert other not in (grown.data_ptr(), captured.data_ptr()) and CALLS[-1][3] == 0x6262
torch_standin.STREAM[0] = 0x5151
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239, max_seqlen_k=400, causal=True)
assert last_call().workspace == grown.data_ptr()
# A workspace over 64 MiB (a large split prefill) is the call's own, every time; the kept one stays.
WORKSPACE_BYTES = (64 << 20) + 16
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239, max_seqlen_k=400, causal=True)
large = ALLOCATIONS[-1]
assert large.shape == (WORKSPACE_BYTES,) and last_call().workspace == large.data_ptr()
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=239, max_seqlen_k=400, causal=True)
assert last_call().workspace == ALLOCATIONS[-1].data_ptr() != large.data_ptr()
assert [w[0].data_ptr() for w in fa3jit.serving._local.params[4].values()] == [grown.data_ptr(), other]
WORKSPACE_BYTES = 4096
queries = len(SIZE_QUERIES)

# num_splits 1, not causal: no workspace, no size query; pack_gqa and softmax_scale reach the struct; a given out is used.
out_given = Tensor((total_q, heads, d), bf)
result = fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 239, 400, softmax_scale=0.5, num_splits=1,
                                       pack_gqa=True, out=out_given)
assert result is out_given and len(SIZE_QUERIES) == queries
p = last_call()
assert (p.num_splits, p.pack_gqa, p.softmax_scale, p.workspace, p.workspace_bytes) == (1, 1, 0.5, None, 0)
assert p.out.data == out_given.data_ptr() and p.lse is None

# Dense k/v with seqused_k; FlashAttention-3's keyword names at their defaults are accepted.
k4, v4 = Tensor((batch, 512, heads_kv, d), bf), Tensor((batch, 512, heads_kv, d), bf)
used = Tensor((batch,), i32)
fa3jit.flash_attn_varlen_func(q, k4, v4, cu_q, max_seqlen_q=200, seqused_k=used, num_splits=3, pack_gqa=False,
                              window_size=(-1, -1), softcap=0.0, deterministic=True, return_attn_probs=False)
p = last_call()
assert (p.seqlen_k, p.k.stride_batch, p.k.stride_seq, p.seqused_k, p.cu_seqlens_k) == (
    512, 512 * heads_kv * d, heads_kv * d, used.data_ptr(), None)
assert (p.num_splits, p.pack_gqa, p.max_seqlen_k) == (3, 0, 512)

# A paged cache through the varlen entry point: pages, page table and seqused_k.
pages, page_size, max_pages = 40, 64, 9
kp, vp = Tensor((pages, page_size, heads_kv, d), bf), Tensor((pages, page_size, heads_kv, d), bf)
table = Tensor((batch, 16), i32, strides=(16, 1))  # rows padded to 16 entries: page_table_stride 16
table.shape = (batch, max_pages)
fa3jit.flash_attn_varlen_func(q, kp, vp, cu_q, max_seqlen_q=239, seqused_k=used, page_table=table)
p = last_call()
assert (p.page_table, p.page_table_stride, p.max_pages, p.num_pages, p.page_size) == (
    table.data_ptr(), 16, max_pages, pages, page_size)
assert (p.k.stride_batch, p.k.stride_seq, p.k.stride_head) == (page_size * heads_kv * d, heads_kv * d, d)
assert p.max_seqlen_k == max_pages * page_size and p.seqused_k == used.data_ptr()

# The attention variant: window_size, softcap and sinks reach the struct; off, they are (-1, -1), 0 and NULL.
assert (p.window_left, p.window_right, p.softcap, p.sinks) == (-1, -1, 0.0, None)
sinks = Tensor((heads,), torch.float32)
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 239, 400, window_size=(128, 0), softcap=30.0, sinks=sinks,
                              num_splits=1)
p = last_call()
assert (p.window_left, p.window_right, p.softcap, p.sinks) == (128, 0, 30.0, sinks.data_ptr())
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 239, 400, window_size=[-1, 64], num_splits=1)
assert (last_call().window_left, last_call().window_right, last_call().sinks) == (-1, 64, None)

# ---- flash_attn_with_kvcache ------------------------------------------------------------------------------

# Decode over a paged cache, cache_seqlens an int: a (batch,) int32 tensor on q's device.
qd = Tensor((batch, 1, heads, d), bf)
before = len(ALLOCATIONS)
out, lse = fa3jit.flash_attn_with_kvcache(qd, kp, vp, 100, table, num_splits=1, return_softmax_lse=True)
assert out.shape == (batch, 1, heads, d) and lse.shape == (batch, heads, 1)
seqlens = [t for t in ALLOCATIONS[before:] if t.dtype is i32]
assert len(seqlens) == 1 and seqlens[0].shape == (batch,) and seqlens[0].filled == 100
p = last_call()
assert (p.batch, p.seqlen_q, p.q.stride_batch, p.cu_seqlens_q) == (batch, 1, heads * d, None)
assert (p.seqused_k, p.page_table, p.page_size) == (seqlens[0].data_ptr(), table.data_ptr(), page_size)
assert (p.num_splits, p.workspace) == (1, None)

# None with a page table: every page of every sequence (max_pages * page_size keys).
before = len(ALLOCATIONS)
fa3jit.flash_attn_with_kvcache(qd, kp, vp, page_table=table, num_splits=1)
assert [t.filled for t in ALLOCATIONS[before:] if t.dtype is i32] == [max_pages * page_size]

# A dense cache with a (batch,) tensor, varlen q (chunked prefill).
kc, vc = Tensor((batch, 1000, heads_kv, d), bf), Tensor((batch, 1000, heads_kv, d), bf)
fa3jit.flash_attn_with_kvcache(q, kc, vc, used, cu_seqlens_q=cu_q, max_seqlen_q=239, causal=True)
p = last_call()
assert (p.seqlen_q, p.seqlen_k, p.seqused_k, p.cu_seqlens_q, p.max_seqlen_q) == (
    total_q, 1000, used.data_ptr(), cu_q.data_ptr(), 239)
assert (p.num_splits, p.pack_gqa, p.max_seqlen_k) == (0, -1, 1000)
# A dense cache and no cache_seqlens: every key, no tensor made.
before = len(ALLOCATIONS)
fa3jit.flash_attn_with_kvcache(qd, kc, vc, num_splits=1)
assert not [t for t in ALLOCATIONS[before:] if t.dtype is i32] and last_call().seqused_k is None

# ---- nothing to compute: no call ----------------------------------------------------------------------------

calls = len(CALLS)
out, lse = fa3jit.flash_attn_varlen_func(q, Tensor((0, heads_kv, d), bf), Tensor((0, heads_kv, d), bf), cu_q, cu_k,
                                         239, 0, return_lse=True)
assert len(CALLS) == calls and out.filled == 0.0 and lse.filled == -math.inf
out = fa3jit.flash_attn_varlen_func(Tensor((0, heads, d), bf), k, v, cu_q, cu_k, 0, 400)
assert len(CALLS) == calls and out.shape == (0, heads, d)

# ---- refused before the library, without a GPU ----------------------------------------------------------------

varlen, kvcache = fa3jit.flash_attn_varlen_func, fa3jit.flash_attn_with_kvcache
expect(ValueError, ["cu_seqlens_q.dtype is torch.int64", "torch.int32"], varlen, q, k, v,
       Tensor((batch + 1,), torch.int64), cu_k)
expect(ValueError, ["cu_seqlens_k has shape (2,)", "(batch + 1,) = (4,)"], varlen, q, k, v, cu_q, Tensor((2,), i32))
expect(ValueError, ["cu_seqlens_q must be contiguous"], varlen, q, k, v, Tensor((batch + 1,), i32, strides=(2,)),
       cu_k)
expect(ValueError, ["page_table must have 2 dimensions", "(batch, max_pages_per_sequence)"], varlen, q, kp, vp,
       cu_q, seqused_k=used, page_table=Tensor((batch * max_pages,), i32))
expect(ValueError, ["page_table must be contiguous in its last dimension"], varlen, q, kp, vp, cu_q,
       seqused_k=used, page_table=Tensor((batch, max_pages), i32, strides=(1, batch)))
expect(ValueError, ["page_size", "is 0", "at least one key per page"], varlen, q,
       Tensor((pages, 0, heads_kv, d), bf), Tensor((pages, 0, heads_kv, d), bf), cu_q, seqused_k=used,
       page_table=table)
# Any positive page size: 12 keys per page reach the library (which runs its gather kernel for them).
fa3jit.flash_attn_with_kvcache(qd, Tensor((pages, 12, heads_kv, d), bf), Tensor((pages, 12, heads_kv, d), bf), used,
                               table, num_splits=1)
assert last_call().page_size == 12 and last_call().k.stride_batch == 12 * heads_kv * d
expect(ValueError, ["seqused_k is None", "required with page_table"], varlen, q, kp, vp, cu_q, page_table=table)
expect(ValueError, ["cu_seqlens_k and page_table are exclusive"], varlen, q, kp, vp, cu_q, cu_k, seqused_k=used,
       page_table=table)
expect(ValueError, ["seqused_k.dtype is torch.int64"], varlen, q, k4, v4, cu_q, seqused_k=Tensor((batch,),
                                                                                              torch.int64))
expect(ValueError, ["cache_seqlens has shape (2,)"], kvcache, qd, kc, vc, Tensor((2,), i32))
expect(ValueError, ["cache_seqlens is 1001", "capacity 1000"], kvcache, qd, kc, vc, 1001)
expect(ValueError, ["q must have 3 dimensions"], varlen, qd, k, v, cu_q, cu_k)
expect(ValueError, ["q must have 4 dimensions"], kvcache, q, kc, vc)
expect(ValueError, ["k must have 3 dimensions", "(total_k, num_heads_kv, head_dim)"], varlen, q, k4, v4, cu_q, cu_k)
expect(ValueError, ["v has shape", "must equal k's"], varlen, q, k, Tensor((total_k - 1, heads_kv, d), bf), cu_q,
       cu_k)
expect(ValueError, ["k_cache has shape", "batch = 3"], kvcache, qd, Tensor((2, 1000, heads_kv, d), bf),
       Tensor((2, 1000, heads_kv, d), bf))
expect(ValueError, ["k.dtype is torch.float16 but q.dtype is torch.bfloat16"], varlen, q,
       Tensor((total_k, heads_kv, d), torch.float16), Tensor((total_k, heads_kv, d), torch.float16), cu_q, cu_k)
expect(ValueError, ["v.dtype is torch.bfloat16 but k.dtype is torch.float16"], varlen, q,
       Tensor((total_k, heads_kv, d), torch.float16), v, cu_q, cu_k)
expect(ValueError, ["q.dtype is torch.float8_e4m3fn", "needs a torch.float8_e4m3fn k and v"], varlen,
       Tensor((total_q, heads, d), torch.float8_e4m3fn), k, v, cu_q, cu_k)
expect(ValueError, ["q.dtype is torch.float32", "with a torch.float8_e4m3fn k_cache"], kvcache,
       Tensor((batch, 1, heads, d), torch.float32), Tensor((batch, 1000, heads_kv, d), torch.float8_e4m3fn),
       Tensor((batch, 1000, heads_kv, d), torch.float8_e4m3fn))
# Descales belong to an FP8 cache.
expect(ValueError, ["q_descale is given but k.dtype is torch.bfloat16", "float8_e4m3fn cache"], varlen, q, k, v,
       cu_q, cu_k, q_descale=Tensor((batch, heads_kv), torch.float32))
expect(ValueError, ["num_splits is -1"], varlen, q, k, v, cu_q, cu_k, num_splits=-1)
expect(ValueError, ["pack_gqa is 2"], kvcache, qd, kc, vc, pack_gqa=2)
expect(ValueError, ["max_seqlen_q is -3"], varlen, q, k, v, cu_q, cu_k, max_seqlen_q=-3)
expect(ValueError, ["cu_seqlens_k is on cuda:1; expected q's device cuda:0"], varlen, q, k, v, cu_q,
       Tensor((batch + 1,), i32, "cuda:1"), 239, 400)
expect(ValueError, ["page_table is on cpu"], kvcache, qd, kp, vp, used, Tensor((batch, max_pages), i32, "cpu"))
expect(ValueError, ["q is on cpu; expected a CUDA tensor"], varlen, Tensor((total_q, heads, d), bf, "cpu"), k, v,
       cu_q, cu_k)
expect(ValueError, ["out is", "expected torch.bfloat16 (353, 8, 128)"], varlen, q, k, v, cu_q, cu_k, 239, 400,
       out=Tensor((total_q, heads, 64), bf))
expect(TypeError, ["cache_seqlens"], kvcache, qd, kc, vc, True)
expect(TypeError, ["q: expected a torch.Tensor"], varlen, [1, 2], k, v, cu_q, cu_k)

# FlashAttention-3 arguments fa3jit does not implement yet: NotImplementedError naming each, never ignored.
for kwargs in (dict(seqused_q=used), dict(qv=q),
               dict(attention_chunk=512), dict(sm_margin=4)):
    (name,) = kwargs
    expect(NotImplementedError, [f"{name}=", "not supported by fa3jit"], varlen, q, k, v, cu_q, cu_k, **kwargs)
for kwargs in (dict(k=qd, v=qd), dict(rotary_cos=Tensor((1000, 64), bf), rotary_sin=Tensor((1000, 64), bf)),
               dict(cache_batch_idx=used), dict(cache_leftpad=used),
               dict(rotary_seqlens=used), dict(cu_seqlens_k_new=cu_k)):
    name = next(iter(kwargs))
    expect(NotImplementedError, [f"{name}=", "not supported by fa3jit"], kvcache, qd, kc, vc, **kwargs)
fa3jit.flash_attn_with_kvcache(qd, kc, vc, window_size=(-1, -1), rotary_interleaved=False, num_splits=1)
fa3jit.flash_attn_with_kvcache(qd, kc, vc, window_size=(255, 0), softcap=1.0, sinks=sinks, num_splits=1)
assert (last_call().window_left, last_call().window_right, last_call().softcap) == (255, 0, 1.0)
expect(ValueError, ["window_size[0] is -2"], kvcache, qd, kc, vc, window_size=(-2, 0))
expect(ValueError, ["sinks is torch.float32 (4,)", "(num_heads,) = (8,)"], kvcache, qd, kc, vc,
       sinks=Tensor((4,), torch.float32))
expect(ValueError, ["sinks is on cuda:1"], kvcache, qd, kc, vc, sinks=Tensor((heads,), torch.float32, "cuda:1"))

# ---- warm calls of flash_attn_with_kvcache: the plan of an earlier call of the same signature ---------------------

def params_bytes(params):
    return bytes(ctypes.string_at(ctypes.addressof(params), ctypes.sizeof(params)))


def pointer_free(params):
    """The call's fields but its pointers (out, lse, seqused_k and the workspace are per-call allocations)."""
    copy = _copy(ctypes.addressof(params))
    copy.out.data = copy.lse = copy.seqused_k = copy.workspace = None
    return params_bytes(copy)


# Each of these, called twice with the same signature, must hand the library the same fields both times, the
# second from the kept plan (the first call of a signature takes the checks and keeps it).
cs_tensor = Tensor((batch,), i32)
warm_cases = [
    ("paged, tensor lengths, split heuristic", (qd, kp, vp, cs_tensor, table), dict(causal=True)),
    ("paged, int lengths", (qd, kp, vp, 100, table), dict(num_splits=1, return_lse=True)),
    ("paged, no lengths", (qd, kp, vp), dict(page_table=table, num_splits=1)),
    ("dense, tensor lengths, out given", (qd, kc, vc, cs_tensor),
     dict(num_splits=1, out=Tensor((batch, 1, heads, d), bf))),
    ("dense, every key", (qd, kc, vc), dict(causal=True, num_splits=3, pack_gqa=False)),
    ("window and softcap", (qd, kc, vc, cs_tensor), dict(window_size=(255, 0), softcap=30.0, num_splits=1)),
]
def cold_then_warm(function, name, args, kwargs):
    """The fields of a call and of the same call again (its plan's), checked equal but for the pointers."""
    function(*args, **kwargs)
    cold = last_call()
    function(*args, **kwargs)
    warm = last_call()
    assert pointer_free(cold) == pointer_free(warm), f"{name}: the warm call's fields differ from the cold call's"
    return warm


cold_fields = {}
for name, args, kwargs in warm_cases:
    warm = cold_then_warm(fa3jit.flash_attn_with_kvcache, name, args, kwargs)
    cold_fields[name] = pointer_free(warm)
    assert warm.q.data == qd.data_ptr() and warm.k.data == args[1].data_ptr(), name
    if len(args) > 3 and type(args[3]) is Tensor:
        assert warm.seqused_k == cs_tensor.data_ptr(), name
    if len(args) > 4:
        assert warm.page_table == table.data_ptr(), name
# Warm calls of different plans one after another: each writes its plan's image over the other's fields (and a
# call that needs no workspace leaves none of an earlier call's), so each hands the library its cold call's fields.
for _ in range(2):
    for name, args, kwargs in warm_cases:
        fa3jit.flash_attn_with_kvcache(*args, **kwargs)
        assert pointer_free(last_call()) == cold_fields[name], f"{name}: fields after another plan's call"
        assert last_call().q.data == qd.data_ptr(), name
# A call whose pack fails part way (a num_splits no int32 holds) leaves zeros and some of its own fields in the thread's
# struct: the next warm call must write its plan's whole image again, not only its tensors.
name, args, kwargs = warm_cases[-1]
expect(ValueError, ["num_splits"], kvcache, qd, kp, vp, cs_tensor, table, num_splits=2**31)
fa3jit.flash_attn_with_kvcache(*args, **kwargs)
assert pointer_free(last_call()) == cold_fields[name], "fields of a warm call after a failed pack"
# softmax_scale is each call's own on a warm call.
fa3jit.flash_attn_with_kvcache(qd, kc, vc, cs_tensor, num_splits=1, softmax_scale=0.25)
assert last_call().softmax_scale == 0.25
fa3jit.flash_attn_with_kvcache(qd, kc, vc, cs_tensor, num_splits=1)
assert last_call().softmax_scale == 0.0
# flash_attn_varlen_func the same; max_seqlen_q / max_seqlen_k are each call's own (checked in each).
varlen_warm_cases = [
    ("packed k/v", (q, k, v, cu_q, cu_k, 239, 400), dict(causal=True, return_lse=True)),
    ("paged", (q, kp, vp, cu_q), dict(max_seqlen_q=239, seqused_k=used, page_table=table, num_splits=1)),
]
for name, args, kwargs in varlen_warm_cases:
    warm = cold_then_warm(fa3jit.flash_attn_varlen_func, name, args, kwargs)
    assert (warm.cu_seqlens_q, warm.q.data) == (cu_q.data_ptr(), q.data_ptr()), name
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 17, 33, causal=True)
assert (last_call().max_seqlen_q, last_call().max_seqlen_k) == (17, 33)
expect(ValueError, ["max_seqlen_k is -1"], varlen, q, k, v, cu_q, cu_k, 17, -1, causal=True)
from fa3jit import serving  # noqa: E402
plans = serving._local.plans
assert len(plans) >= len(warm_cases)
# A kept plan holds no tensor of the call that made it (kv's tensor fields are the call's only while it runs).
assert all(plan.kv.seqused_k is None and plan.kv.page_table is None and plan.kv.cu_seqlens_k is None
           for plan in plans.values())
# A call whose signature differs only in an argument's type still takes the checks: a bool is no num_splits,
# no window side and no cache length, though True == 1.
fa3jit.flash_attn_with_kvcache(qd, kc, vc, cs_tensor, num_splits=1)
expect(ValueError, ["num_splits is True"], kvcache, qd, kc, vc, cs_tensor, num_splits=True)
fa3jit.flash_attn_with_kvcache(qd, kc, vc, cs_tensor, window_size=(1, 0), num_splits=1)
expect(ValueError, ["window_size[0] is True"], kvcache, qd, kc, vc, cs_tensor, window_size=(True, 0), num_splits=1)
fa3jit.flash_attn_with_kvcache(qd, kp, vp, 1, table, num_splits=1)
expect(TypeError, ["cache_seqlens"], kvcache, qd, kp, vp, True, table, num_splits=1)
# Another stride, device or dtype is another signature: its own checks, its own errors.
expect(ValueError, ["cache_seqlens must be contiguous"], kvcache, qd, kc, vc, Tensor((batch,), i32, strides=(2,)),
       num_splits=1)
expect(ValueError, ["cache_seqlens is on cuda:1"], kvcache, qd, kc, vc, Tensor((batch,), i32, "cuda:1"), num_splits=1)
expect(ValueError, ["out is"], kvcache, qd, kc, vc, cs_tensor, num_splits=1, out=Tensor((batch, 1, heads, d),
                                                                                        torch.float16))
# A nested warm call of the same signature (from an allocator hook, say) leaves the outer call's tensors alone: the
# plan is never written after it is kept.
fa3jit.flash_attn_with_kvcache(qd, kp, vp, cs_tensor, table, num_splits=1)
plain_new_empty, nested = Tensor.new_empty, [True]


def nesting_new_empty(self, *args, **kwargs):
    if nested:
        nested.pop()
        fa3jit.flash_attn_with_kvcache(qd, kp, vp, Tensor((batch,), i32), Tensor((batch, 16), i32, strides=(16, 1)),
                                       num_splits=1)
    return plain_new_empty(self, *args, **kwargs)


Tensor.new_empty = nesting_new_empty
try:
    fa3jit.flash_attn_with_kvcache(qd, kp, vp, cs_tensor, table, num_splits=1)
finally:
    Tensor.new_empty = plain_new_empty
assert not nested and (last_call().seqused_k, last_call().page_table) == (cs_tensor.data_ptr(), table.data_ptr())
# pack_gqa of another type than bool or int (a 0-dim tensor, which the checks accept by its truth) takes the checks
# each time: keyed by identity, a plan would keep the object and answer with its first value.
class Flag:
    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return self.value == other

    def __bool__(self):
        return bool(self.value)

    __hash__ = object.__hash__


flag = Flag(True)
fa3jit.flash_attn_with_kvcache(qd, kc, vc, cs_tensor, num_splits=1, pack_gqa=flag)
assert last_call().pack_gqa == 1
flag.value = False
fa3jit.flash_attn_with_kvcache(qd, kc, vc, cs_tensor, num_splits=1, pack_gqa=flag)
assert last_call().pack_gqa == 0
expect(ValueError, ["num_splits is [1]"], kvcache, qd, kc, vc, cs_tensor, num_splits=[1])
# Plans are per thread: another thread's first call of a known signature takes the checks and keeps its own.
other = []
thread = threading.Thread(target=lambda: other.append((fa3jit.flash_attn_with_kvcache(qd, kc, vc, cs_tensor,
                                                                                      num_splits=1),
                                                       len(serving._local.plans))))
thread.start()
thread.join()
assert other and other[0][1] == 1

# ---- FP8 KV cache ----------------------------------------------------------------------------------------------

# e4m3 q over an e4m3 paged cache: per_head descales reach the struct with their strides (a (batch, num_heads_kv)
# tensor, a stride-0 view over the batch, one element), out is bf16, the kernel dtype e4m3.
e4m3, f32 = torch.float8_e4m3fn, torch.float32
q8 = Tensor((batch, 1, heads, d), e4m3)
kp8, vp8 = Tensor((pages, page_size, heads_kv, d), e4m3), Tensor((pages, page_size, heads_kv, d), e4m3)
q_scale = Tensor((batch, heads_kv), f32, strides=(0, 1))
k_scale, v_scale = Tensor((batch, heads_kv), f32), Tensor((), f32)
out8 = fa3jit.flash_attn_with_kvcache(q8, kp8, vp8, used, table, num_splits=1, q_descale=q_scale,
                                      k_descale=k_scale, v_descale=v_scale)
p = last_call()
assert out8.dtype is bf and out8.shape == (batch, 1, heads, d) and p.out.data == out8.data_ptr()
assert (p.dtype, p.out_dtype, p.quant) == (_capi.DTYPE_E4M3, _capi.DTYPE_BF16, _capi.QUANT_PER_HEAD)
assert (p.q_descale.data, p.q_descale.stride_batch, p.q_descale.stride_head) == (q_scale.data_ptr(), 0, 1)
assert (p.k_descale.data, p.k_descale.stride_batch, p.k_descale.stride_head) == (k_scale.data_ptr(), heads_kv, 1)
assert (p.v_descale.data, p.v_descale.stride_batch, p.v_descale.stride_head) == (v_scale.data_ptr(), 0, 0)
# An fp16 out picks the output dtype; a 16-bit call after it packs out_dtype DEFAULT, quant NONE, no descales.
out16 = Tensor((batch, 1, heads, d), torch.float16)
fa3jit.flash_attn_with_kvcache(q8, kp8, vp8, used, table, num_splits=1, k_descale=k_scale, v_descale=k_scale,
                               q_descale=k_scale, out=out16)
assert last_call().out_dtype == _capi.DTYPE_FP16 and last_call().out.data == out16.data_ptr()
fa3jit.flash_attn_with_kvcache(qd, kp, vp, used, table, num_splits=1)
p = last_call()
assert (p.dtype, p.out_dtype, p.quant, p.q_descale.data, p.k_descale.data, p.v_descale.data) == (
    _capi.DTYPE_BF16, _capi.DTYPE_DEFAULT, _capi.QUANT_NONE, None, None, None)
expect(ValueError, ["k_descale has shape (3, 2, 5)", "per_block", "serving layouts take per_head"], kvcache, q8,
       kp8, vp8, used, table, k_descale=Tensor((batch, heads_kv, 5), f32))
expect(ValueError, ["v_descale has shape (3, 4)", "per_head (batch, num_heads_kv)", "= (3, 2)"], kvcache, q8, kp8, vp8, used,
       table, v_descale=Tensor((batch, 4), f32))
expect(ValueError, ["out.dtype is torch.float32", "an e4m3 call writes"], kvcache, q8, kp8, vp8, used, table,
       k_descale=k_scale, v_descale=k_scale, q_descale=k_scale, out=Tensor((batch, 1, heads, d), f32))
expect(ValueError, ["v_cache.dtype is torch.bfloat16 but k_cache.dtype is torch.float8_e4m3fn"], kvcache, q8, kp8,
       vp, used, table)

# ---- get_scheduler_metadata: the schedule of a batch, planned once, run by its calls ---------------------------

# A paged decode step asked ahead with FlashAttention-3's arguments and the batch's longest key length (below the
# cache's capacity): the library plans from the layout and serving fields the call hands it, no tensor given, and
# the call given the metadata runs its (num_splits, pack_gqa) (the stand-in plan says 5 and 1).
longest = 300
metadata = fa3jit.get_scheduler_metadata(batch, 1, longest, heads, heads_kv, d, used, qkv_dtype=bf,
                                         page_size=page_size, causal=True)
assert metadata.dtype is i32 and metadata.shape == (2,) and metadata.filled == [5, 1]
assert metadata.device == Device("cpu")
asked = PLAN_QUERIES[-1]
assert (asked.k.data, asked.v.data, asked.out.data, asked.workspace) == (None, None, None, None)
assert asked.q.data == used.data_ptr()  # its device: cache_seqlens'
assert (asked.max_seqlen_k, asked.page_size, asked.max_pages) == (longest, page_size, -(-longest // page_size))
fa3jit.flash_attn_with_kvcache(qd, kp, vp, used, table, causal=True, scheduler_metadata=metadata)
call = last_call()
for field in ("dtype", "causal", "batch", "seqlen_q", "num_heads", "num_heads_kv", "head_dim", "head_dim_v",
              "quant", "page_size", "window_left", "window_right", "softcap", "cu_seqlens_q"):
    assert getattr(asked, field) == getattr(call, field), (field, getattr(asked, field), getattr(call, field))
assert (asked.seqused_k is not None, asked.page_table is not None) == (True, True)  # present: the layout is paged
assert (asked.num_splits, asked.pack_gqa) == (0, -1) and (call.num_splits, call.pack_gqa) == (5, 1)
assert call.workspace is not None and call.workspace_bytes >= WORKSPACE_BYTES  # a workspace for the planned splits
# The same schedule asked for explicitly is accepted; a disagreeing one is refused, naming both.
fa3jit.flash_attn_with_kvcache(qd, kp, vp, used, table, num_splits=5, pack_gqa=True, scheduler_metadata=metadata)
expect(ValueError, ["num_splits is 2 but scheduler_metadata plans 5 splits"], kvcache, qd, kp, vp, used, table,
       num_splits=2, scheduler_metadata=metadata)
expect(ValueError, ["pack_gqa is False but scheduler_metadata plans pack_gqa=True"], fa3jit.flash_attn_varlen_func,
       q, k, v, cu_q, cu_k, 239, 400, pack_gqa=False, scheduler_metadata=metadata)
# Packed q with a dense cache, GQA packing and splits pinned, a window and softcap, an e4m3 cache.
cu_q4 = Tensor((batch + 1,), i32)
fa3jit.get_scheduler_metadata(batch, 7, 512, heads, heads_kv, d, used, qkv_dtype=torch.float8_e4m3fn,
                              cu_seqlens_q=cu_q4, window_size=(100, 0), has_softcap=True, num_splits=3,
                              pack_gqa=False, causal=True)
asked = PLAN_QUERIES[-1]
assert (asked.dtype, asked.quant, asked.cu_seqlens_q, asked.seqlen_q, asked.max_seqlen_q) == (
    _capi.DTYPE_E4M3, _capi.QUANT_PER_HEAD, cu_q4.data_ptr(), batch * 7, 7)
assert (asked.seqlen_k, asked.page_table, asked.num_splits, asked.pack_gqa) == (512, None, 3, 0)
assert (asked.window_left, asked.window_right, asked.softcap > 0) == (100, 0, True)
# FlashAttention-3's defaults for what fa3jit lacks are accepted; the rest is refused, naming the argument.
fa3jit.get_scheduler_metadata(batch, 1, 512, heads, heads_kv, d, used, cu_seqlens_k_new=None, cache_leftpad=None,
                              max_seqlen_k_new=0, attention_chunk=0, sm_margin=0)
plans = len(PLAN_QUERIES)
gsm = fa3jit.get_scheduler_metadata
for kwargs, needles in (({"max_seqlen_k_new": 4}, ["max_seqlen_k_new=4", "not supported"]),
                        ({"cache_leftpad": used}, ["cache_leftpad"]),
                        ({"sm_margin": 8}, ["sm_margin=8"]),
                        ({"qkv_dtype": torch.float32}, ["qkv_dtype is torch.float32"]),
                        ({"page_size": 0}, ["page_size is 0"]),
                        ({"num_splits": -1}, ["num_splits is -1"]),
                        ({"headdim_v": -8}, ["headdim_v is -8; expected a non-negative int"]),
                        ({"cu_seqlens_q": Tensor((batch,), i32)}, ["cu_seqlens_q has shape (3,)"]),
                        ({"cu_seqlens_q": Tensor((batch + 1,), i32, device="cuda:1")}, ["cu_seqlens_q is on cuda:1"])):
    try:
        gsm(batch, 1, 512, heads, heads_kv, d, used, **kwargs)
    except (ValueError, NotImplementedError) as error:
        for needle in needles:
            assert needle in str(error), (needle, str(error))
    else:
        raise AssertionError(f"get_scheduler_metadata accepted {kwargs}")
for args, needles in (((batch, -1, 512, heads, heads_kv, d, used), ["max_seqlen_q is -1"]),
                      ((batch, 1, None, heads, heads_kv, d, used), ["max_seqlen_k is None"]),
                      ((batch, 1, 512, heads, heads_kv, d, Tensor((batch + 1,), i32)), ["cache_seqlens has shape (4,)"]),
                      ((batch, 1, 512, heads, heads_kv, d, Tensor((batch,), i32, device="cpu")),
                       ["cache_seqlens is on cpu"])):
    try:
        gsm(*args)
    except ValueError as error:
        for needle in needles:
            assert needle in str(error), (needle, str(error))
    else:
        raise AssertionError(f"get_scheduler_metadata accepted {args}")
assert len(PLAN_QUERIES) == plans, "a refused call reached the library"
# The calls check the metadata they are given: int32, one dimension, >= 2 elements. A longer CPU buffer holding it
# is read; a copy on q's device is not read (the call plans from its own arguments); another device is refused.
fa3jit.flash_attn_with_kvcache(qd, kp, vp, used, table, scheduler_metadata=tensor_of([3, 0] + [0] * 62, i32))
assert (last_call().num_splits, last_call().pack_gqa) == (3, 0)
fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 239, 400, scheduler_metadata=Tensor((2,), i32))
assert (last_call().num_splits, last_call().pack_gqa) == (0, -1)
expect(ValueError, ["scheduler_metadata is torch.int64 (2,)", "get_scheduler_metadata"], kvcache, qd, kp, vp, used,
       table, scheduler_metadata=Tensor((2,), torch.int64))
expect(ValueError, ["scheduler_metadata is torch.int32 (1,)"], fa3jit.flash_attn_varlen_func, q, k, v, cu_q, cu_k,
       239, 400, scheduler_metadata=Tensor((1,), i32))
expect(ValueError, ["scheduler_metadata is on cuda:1"], kvcache, qd, kp, vp, used, table,
       scheduler_metadata=Tensor((2,), i32, device="cuda:1"))
expect(ValueError, ["scheduler_metadata holds (num_splits, pack_gqa) = (0, 1)"], kvcache, qd, kp, vp, used, table,
       scheduler_metadata=tensor_of([0, 1], i32))

# ---- numbers the C fields cannot hold, and empty problems of shapes no call could run ------------------------------
# ctypes and struct would keep the low bits or raise struct.error: each is a ValueError naming the argument.
for kwargs, needle in (({"num_splits": 2**40}, "num_splits is 1099511627776; expected an integer in [-2147483648, "),
                       ({"window_size": (2**70, 0)}, "window_left is 1180591620717411303424; expected an integer in"),
                       ({"softcap": 1e300}, "softcap is 1e+300; expected 0.0 (off) or a positive float up to")):
    expect(ValueError, [needle], fa3jit.flash_attn_varlen_func, q, k, v, cu_q, cu_k, 239, 400, **kwargs)
expect(ValueError, ["max_seqlen_q is 1180591620717411303424; expected an integer in"], fa3jit.flash_attn_varlen_func,
       q, k, v, cu_q, cu_k, 2**70, 400)
# flash_attn_func with no key (or no query) computes nothing, but its shapes are still checked by the library's rules.
_capi.library().fa3jit_attention_plan = _library_plan
try:
    bf = torch.bfloat16
    out = fa3jit.flash_attn_func(Tensor((2, 128, 4, 64), bf), Tensor((2, 0, 4, 64), bf), Tensor((2, 0, 4, 64), bf))
    assert out.shape == (2, 128, 4, 64)
    for q_shape, k_shape, needle in (((2, 128, 3, 64), (2, 0, 2, 64), "num_heads = 3 is not a multiple of num_heads_kv = 2"),
                                     ((2, 128, 4, 7), (2, 0, 4, 7), "head_dim = 7 is not supported"),
                                     ((2, 128, 4, 64), (2, 0, 0, 64), "num_heads_kv = 0 is not allowed"),
                                     ((0, 128, 3, 64), (0, 5, 2, 64), "num_heads = 3 is not a multiple")):
        expect(ValueError, [needle], fa3jit.flash_attn_func, Tensor(q_shape, bf), Tensor(k_shape, bf),
               Tensor(k_shape, bf))
finally:
    _capi.library().fa3jit_attention_plan = _plan

print("ok")
