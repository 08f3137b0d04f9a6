"""flash_attn_varlen_func and flash_attn_with_kvcache: FlashAttention-3's serving entry points over the C ABI.

The layouts are the ones of fa3jit_forward_params' serving fields (runtime/include/fa3jit/fa3jit.h, "Serving
layouts"): packed variable-length q (cu_seqlens_q), packed variable-length k/v (cu_seqlens_k), a paged KV cache
(page_table + seqused_k) and split-KV decoding (num_splits, merged by the combine kernel on the same stream).
Names, shapes and defaults follow FlashAttention-3's hopper/flash_attn_interface.py; what FlashAttention-3 takes
and fa3jit does not implement yet raises NotImplementedError naming the argument.

Per call, Python checks what the library cannot see (torch dtypes, ranks, that k and v agree, the index tensors' dtype,
rank and contiguity, one device for all), asks the library for the workspace size when the call may split
(num_splits != 1) and takes it from the workspace the calling thread keeps for torch's current stream (allocated, or
grown, with torch's caching allocator on q's device, up to 64 MiB; a call's own when larger and under CUDA-graph
capture), then packs one struct and calls fa3jit_attention_forward on torch's current stream. Strides, extents, head
counts and head dims are the library's checks, which name the argument. The index tensors' values are never read on the
host (the kernel clamps them), except where a max_seqlen_* argument is left None (one device-to-host copy: pass it in a
serving loop and under CUDA-graph capture). To debug a wrong answer, run with FA3JIT_CHECK_INDICES=1 in the environment:
every call then synchronises and the library checks the index tensors' values (offsets, lengths, page indices), raising
fa3jit.Fa3jitValueError that names the first bad one (kernels/attention_fwd/index_check.h).
"""

from __future__ import annotations

import ctypes
import math
import struct
import threading
from typing import Any, Optional, Tuple, Union

from . import _capi
from . import attention as _attention

_pack_params = _capi.PARAMS_SERVING_CALL_STRUCT.pack_into
_pack_workspace = _capi.WORKSPACE_STRUCT.pack_into
_pack_tensors = _capi.PARAMS_TENSORS_STRUCT.pack_into
_pack_index = _capi.PARAMS_INDEX_STRUCT.pack_into
_TENSORS_OFFSET = _capi.PARAMS_TENSORS_OFFSET
_INDEX_OFFSET = _capi.PARAMS_INDEX_OFFSET
_IMAGE_END = _capi.PARAMS_CALL_OFFSET + _capi.PARAMS_SERVING_CALL_STRUCT.size
_FLOAT32_MAX = _attention._FLOAT32_MAX
_PARAMS_OFFSET = _capi.PARAMS_CALL_OFFSET
_WORKSPACE_OFFSET = _capi.WORKSPACE_OFFSET
# Elements of get_scheduler_metadata's tensor: (num_splits, pack_gqa).
METADATA_LENGTH = 2
# Per thread: (ForwardParams, its address, a c_size_t for the workspace size and its byref, and the thread's workspaces:
# {(device index, raw stream): (uint8 tensor, its address, its bytes)}). A thread reuses one workspace per stream
# outside CUDA-graph capture: its calls on that stream run in the order it queued them, each call's kernels (split,
# combine) queued together, so no call's partials meet another's; another thread queuing on the same stream between them
# has a workspace of its own. A workspace grows (a fresh tensor on that stream; the caching allocator reuses the old one
# only in that stream's order) when a call needs more, up to _KEPT_WORKSPACE_BYTES (decode steps need far less); a call
# that needs more allocates its own, as does each call under CUDA-graph capture (from the graph's pool). Not for a call
# made where torch allocates from a private pool without capturing (a CUDA-graph tree's warm-up in torch.compile's
# reduce-overhead mode): these functions are no torch ops, so a compiled caller runs them outside the graph (a graph
# break); a caller who wraps them in an op of its own under such a mode needs a workspace per call.
_local = threading.local()
_MIB = 1 << 20
_KEPT_WORKSPACE_BYTES = 64 * _MIB


def _thread_params() -> Tuple[_capi.ForwardParams, int, ctypes.c_size_t, Any, dict]:
    params = _capi.ForwardParams()
    size = ctypes.c_size_t()
    entry = (params, ctypes.addressof(params), size, ctypes.byref(size), {})
    _local.params = entry
    return entry


# ---- arguments FlashAttention-3 has and fa3jit does not implement yet ------------------------------------------

def _refuse_unsupported(function: str, **arguments: Any) -> None:
    """NotImplementedError for the first argument that asks for a feature fa3jit lacks; each is accepted at its
    FlashAttention-3 default ("off"), so code written for FlashAttention-3 that leaves them alone runs."""
    for name, value in arguments.items():
        if name in ("attention_chunk", "sm_margin"):
            if value == 0:
                continue
            what = {"attention_chunk": "chunked attention", "sm_margin": "reserving SMs"}[name]
        elif value is None:
            continue
        elif name in ("k", "v", "cu_seqlens_k_new"):
            what = "appending new keys and values into the cache (write them into k_cache / v_cache first)"
        elif name.startswith("rotary"):
            what = "rotary embedding inside the attention call"
        else:
            what = {"qv": "the qv operand",
                    "seqused_q": "seqused_q (use cu_seqlens_q)", "cache_batch_idx": "cache_batch_idx",
                    "cache_leftpad": "left-padded caches"}.get(name, name)
        raise NotImplementedError(f"{function}: {name}={_short(value)} is not supported by fa3jit yet ({what}); "
                                  f"leave it at FlashAttention-3's default")


def _short(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # a tensor: its shape and dtype, not its values
        return f"<tensor {tuple(value.shape)} {value.dtype}>"
    return repr(value)


# ---- checks before the device (no GPU needed) --------------------------------------------------------------

def _tensor(x: Any, name: str) -> Any:
    return x if isinstance(x, _attention._Tensor) else _attention._as_tensor(x, name)


def _dtype_code(q: Any, k: Any, v: Any, names: Tuple[str, str]) -> Tuple[int, bool]:
    """(the kernel's fa3jit_dtype, whether q is quantised to e4m3 in the call). k and v share a dtype; a 16-bit
    cache takes a q of its dtype, a torch.float8_e4m3fn cache (FP8 KV cache) an e4m3 q or a 16-bit one."""
    kn, vn = names
    q_dtype, k_dtype, v_dtype = q.dtype, k.dtype, v.dtype  # each read once: torch attribute reads cost ~0.1 us
    if v_dtype is not k_dtype:
        raise ValueError(f"{vn}.dtype is {v_dtype} but {kn}.dtype is {k_dtype}; they must match")
    float8 = _attention._float8
    if float8 is not None and k_dtype is float8:
        if q_dtype is float8:
            return _capi.DTYPE_E4M3, False
        if _attention._DTYPE_CODES.get(q_dtype) in (_capi.DTYPE_FP16, _capi.DTYPE_BF16):
            return _capi.DTYPE_E4M3, True
        raise ValueError(f"q.dtype is {q_dtype}; with a torch.float8_e4m3fn {kn} expected torch.float8_e4m3fn, or "
                         f"torch.float16 / torch.bfloat16 (quantised to e4m3 in the call)")
    code = _attention._DTYPE_CODES.get(q_dtype)
    if code is None or code == _capi.DTYPE_E4M3:
        raise ValueError(f"q.dtype is {q_dtype}; expected torch.float16 or torch.bfloat16 (torch.float8_e4m3fn q "
                         f"needs a torch.float8_e4m3fn {kn} and {vn})")
    if k_dtype is not q_dtype:
        raise ValueError(f"{kn}.dtype is {k_dtype} but q.dtype is {q_dtype}; they must match")
    return code, False


# ---- FP8 KV cache: descales, q's quantisation, the output dtype --------------------------------------------

# out_dtype, quant and the three (pointer, stride_batch, stride_head) descales of a 16-bit call.
_NO_FP8 = (_capi.DTYPE_DEFAULT, _capi.QUANT_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0)
_E4M3_MAX = 448.0


def _refuse_descales(dtype: Any, names: Tuple[str, str], **descales: Any) -> None:
    for name, t in descales.items():
        if t is not None:
            raise ValueError(f"{name} is given but {names[0]}.dtype is {dtype}; descales belong to a "
                             f"torch.float8_e4m3fn cache")


def _quantized_q(q: Any, q_descale: Any, batch: int, num_heads_kv: int, cu_seqlens_q: Any) -> Tuple[Any, Any]:
    """A 16-bit q of an FP8-cache call as e4m3: (q8, q_descale). With q_descale None, one descale per KV head,
    amax / 448 over the used query rows and the heads of its group (1 for an all-zero or empty group; with packed
    q, rows from cu_seqlens_q[batch] on are padding and not reduced over), returned as a (batch, num_heads_kv)
    view of stride 0 over the batch; with a one-element q_descale (a static per-tensor scale, as serving engines
    keep one), q / q_descale. Values are clamped to e4m3's +-448. Costs a few torch kernels on the current stream
    (abs-max, scale, cast) and no synchronisation; pass an e4m3 q to avoid them."""
    torch = _attention._torch
    num_heads = q.shape[-2]
    if num_heads_kv < 1 or num_heads % num_heads_kv:
        raise ValueError(f"num_heads = {num_heads} (q.shape[-2]) is not a multiple of num_heads_kv = {num_heads_kv}")
    grouped = q.unflatten(-2, (num_heads_kv, num_heads // num_heads_kv))  # (..., num_heads_kv, group, head_dim)
    if q_descale is None:
        magnitude = grouped.abs()
        if cu_seqlens_q is not None:  # (total_q, num_heads_kv, group, head_dim): zero the padding rows
            used = torch.arange(q.shape[0], device=q.device) < cu_seqlens_q[-1]
            magnitude = magnitude.masked_fill_(~used.view(-1, 1, 1, 1), 0)
        if magnitude.numel() == 0:  # no query row: nothing to scale (torch.amax refuses an empty reduction)
            amax = torch.zeros(num_heads_kv, dtype=torch.float32, device=q.device)
        else:
            dims = tuple(d for d in range(grouped.dim()) if d != grouped.dim() - 3)
            amax = torch.amax(magnitude, dim=dims).float()  # (num_heads_kv,)
        descale = torch.where(amax > 0, amax / _E4M3_MAX, torch.ones_like(amax))
        scale = descale.view(num_heads_kv, 1, 1)
        q_descale = descale.view(1, num_heads_kv).expand(batch, num_heads_kv)
    else:
        q_descale = _tensor(q_descale, "q_descale")
        if q_descale.numel() != 1 or q_descale.dim() > 2 or q_descale.dtype is not torch.float32:
            raise ValueError(f"q_descale is {q_descale.dtype} {tuple(q_descale.shape)}; with a 16-bit q and a "
                             f"torch.float8_e4m3fn cache it is q's quantisation scale: one float32 element (or None: "
                             f"computed per KV head)")
        if q_descale.device != q.device:
            raise ValueError(f"q_descale is on {q_descale.device}; expected q's device {q.device}")
        scale = q_descale.reshape(())
    q8 = (grouped.float() / scale).clamp_(-_E4M3_MAX, _E4M3_MAX).to(_attention._float8).flatten(-3, -2)
    return q8, q_descale


def _fp8_fields(q: Any, descales: Tuple[Any, Any, Any], batch: int, num_heads: int, num_heads_kv: int,
                head_dim: int, head_dim_v: int, out: Any) -> Tuple[Any, Tuple[Any, ...]]:
    """(out's dtype, out_dtype and the descale fields of PARAMS_SERVING_CALL_STRUCT) of an FP8-cache call. Serving
    layouts take per_head descales: (batch, num_heads_kv) (stride-0 views allowed), one element, or None (1)."""
    for t, name in zip(descales, ("q_descale", "k_descale", "v_descale")):
        if t is not None and hasattr(t, "dim") and t.dim() == 3:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; per_block descales are laid out for dense "
                             f"tensors: serving layouts take per_head descales (batch, num_heads_kv) = ({batch}, "
                             f"{num_heads_kv}) or one element")
    out_dtype, out_code = _attention._fp8_out_dtype(None, out)
    fields = _attention._descale_fields(q, descales, batch, num_heads, num_heads_kv, 1, 1, head_dim, head_dim_v,
                                        False, None)
    return out_dtype, (out_code, *fields)


def _fp8_call(q: Any, q_stride: Tuple[int, ...], quantize_q: bool, descales: Tuple[Any, Any, Any], batch: int,
              num_heads: int, head_dim: int, kv: Any, cu_seqlens_q: Any,
              out: Any) -> Tuple[Any, Tuple[int, ...], Any, Tuple[Any, ...]]:
    """An FP8-cache call's (q, q.stride(), out's dtype, fp8 fields): q quantised first when it is 16-bit
    (_quantized_q), then the descales and output dtype (_fp8_fields)."""
    q_descale, k_descale, v_descale = descales
    if quantize_q:
        q, q_descale = _quantized_q(q, q_descale, batch, kv.num_heads_kv, cu_seqlens_q)
        q_stride = q.stride()
    out_dtype, fields = _fp8_fields(q, (q_descale, k_descale, v_descale), batch, num_heads, kv.num_heads_kv,
                                    head_dim, kv.head_dim_v, out)
    return q, q_stride, out_dtype, fields


def _rank(shape: Any, name: str, layout: str) -> Any:
    """`shape` (a tensor's .shape, read once by the caller) if it has as many dimensions as `layout` names."""
    ndim = layout.count(",") + 1
    if len(shape) != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions {layout}; got shape {tuple(shape)}")
    return shape


def _index_tensor(t: Any, name: str, layout: str, shape: Tuple[Optional[int], ...]) -> Any:
    """An int32 index tensor of `shape` (1 or 2 extents, None: any) whose last dimension is contiguous."""
    t = _tensor(t, name)
    dtype = t.dtype
    if dtype is not _attention._torch.int32:
        raise ValueError(f"{name}.dtype is {dtype}; expected torch.int32 {layout}")
    got = t.shape
    if len(got) != len(shape):
        raise ValueError(f"{name} must have {len(shape)} dimension{'s' if len(shape) > 1 else ''} {layout}; got "
                         f"shape {tuple(got)}")
    if (shape[0] is not None and got[0] != shape[0]) or (len(shape) > 1 and shape[1] is not None and
                                                         got[1] != shape[1]):
        expected = tuple("*" if want is None else want for want in shape)
        raise ValueError(f"{name} has shape {tuple(got)}; expected {layout} = {expected}".replace("'*'", "*"))
    if got[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous{' in its last dimension' if len(shape) > 1 else ''}; got "
                         f"strides {tuple(t.stride())}")
    return t


def _last_dim_contiguous(strides: Tuple[int, ...], last_extent: int, name: str) -> None:
    """`strides` and `last_extent` are the tensor's stride() and shape[-1], read once by the caller."""
    if strides[-1] != 1 and last_extent > 1:
        raise ValueError(f"{name}: the last dimension (head_dim) must be contiguous (stride 1); got strides "
                         f"{tuple(strides)}")


def _checked_options(num_splits: Any, pack_gqa: Any) -> Tuple[int, int]:
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError(f"num_splits is {num_splits!r}; expected 0 (the heuristic), 1 (no split) or a number of "
                         f"splits")
    if pack_gqa is None:
        return num_splits, -1
    if pack_gqa not in (True, False):  # 0 and 1 too
        raise ValueError(f"pack_gqa is {pack_gqa!r}; expected None (the heuristic), True or False")
    return num_splits, 1 if pack_gqa else 0


def _check_devices(q: Any, names: Tuple[str, ...], *tensors: Any) -> int:
    """q on a CUDA device and each of `tensors` (None: absent) on the same one, named by `names`; returns q's device
    index. The others are compared by index alone (-1 for a CPU tensor): memory of another accelerator with the same
    index is refused by the library, whose pointer checks name the argument."""
    device = q.get_device()
    if device < 0 or not q.is_cuda:
        raise ValueError(f"q is on {q.device}; expected a CUDA tensor")
    for name, t in zip(names, tensors):
        if t is not None and t.get_device() != device:
            raise ValueError(f"{name} is on {t.device}; expected q's device {q.device}")
    return device


_VARLEN_DEVICE_NAMES = ("k", "v", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "page_table", "out")
_KVCACHE_DEVICE_NAMES = ("k_cache", "v_cache", "cu_seqlens_q", "cache_seqlens", "page_table", "out")


class _KV:
    """k and v as the C ABI takes them: the layout's fields, checked against q."""
    __slots__ = ("seqlen_k", "num_heads_kv", "head_dim_v", "k_strides", "v_strides", "cu_seqlens_k", "seqused_k",
                 "page_table", "page_table_stride", "max_pages", "num_pages", "page_size", "capacity", "has_keys")


def _kv_layout(k: Any, v: Any, names: Tuple[str, str], batch: int, head_dim: int, cu_seqlens_k: Any,
               seqused_k: Any, page_table: Any, seqused_name: str) -> _KV:
    """Checks k and v in one of the three layouts (dense, packed varlen, paged) and the index tensors that go
    with it; no device access. Each tensor attribute is read once."""
    kn, vn = names
    kv = _KV()
    kv.cu_seqlens_k = kv.page_table = None
    kv.page_table_stride = kv.max_pages = kv.num_pages = kv.page_size = 0
    k_shape, v_shape = k.shape, v.shape
    if page_table is not None:
        if cu_seqlens_k is not None:
            raise ValueError("cu_seqlens_k and page_table are exclusive: a paged cache holds its keys in pages")
        layout = "(num_pages, page_size, num_heads_kv, head_dim)"
        _rank(k_shape, kn, layout)
        _rank(v_shape, vn, layout.replace("head_dim)", "head_dim_v)"))
        kv.page_table = _index_tensor(page_table, "page_table", "(batch, max_pages_per_sequence)", (batch, None))
        kv.num_pages, kv.page_size = k_shape[0], k_shape[1]
        if kv.page_size < 1:
            raise ValueError(f"page_size ({kn}.shape[1]) is {kv.page_size}; expected at least one key per page")
        kv.max_pages = kv.page_table.shape[1]
        kv.page_table_stride = kv.page_table.stride(0)
        kv.capacity = kv.max_pages * kv.page_size
        kv.seqlen_k = kv.capacity  # unused by the library with a page table
        kv.has_keys = kv.num_pages > 0 and kv.max_pages > 0
    elif cu_seqlens_k is not None:
        layout = "(total_k, num_heads_kv, head_dim)"
        _rank(k_shape, kn, layout)
        _rank(v_shape, vn, layout.replace("head_dim)", "head_dim_v)"))
        kv.cu_seqlens_k = _index_tensor(cu_seqlens_k, "cu_seqlens_k", "(batch + 1,)", (batch + 1,))
        kv.seqlen_k = kv.capacity = k_shape[0]
        kv.has_keys = kv.seqlen_k > 0
    else:
        layout = "(batch, seqlen_k, num_heads_kv, head_dim)"
        _rank(k_shape, kn, layout)
        _rank(v_shape, vn, layout.replace("head_dim)", "head_dim_v)"))
        if k_shape[0] != batch:
            raise ValueError(f"{kn} has shape {tuple(k_shape)}; expected {layout} with batch = {batch}")
        kv.seqlen_k = kv.capacity = k_shape[1]
        kv.has_keys = kv.seqlen_k > 0
    if k_shape[-1] != head_dim:
        raise ValueError(f"{kn} has shape {tuple(k_shape)}; its head_dim must be q's {head_dim}")
    if v_shape[:-1] != k_shape[:-1]:
        raise ValueError(f"{vn} has shape {tuple(v_shape)}; all but its last dimension must equal {kn}'s "
                         f"{tuple(k_shape[:-1])}")
    kv.num_heads_kv, kv.head_dim_v = k_shape[-2], v_shape[-1]
    kv.seqused_k = None if seqused_k is None else _index_tensor(seqused_k, seqused_name, "(batch,)", (batch,))
    k_strides, v_strides = k.stride(), v.stride()
    _last_dim_contiguous(k_strides, k_shape[-1], kn)
    _last_dim_contiguous(v_strides, v_shape[-1], vn)
    # (stride_batch, stride_seq, stride_head) in elements; the batch stride of packed k/v is unused (0).
    if len(k_strides) == 4:
        kv.k_strides, kv.v_strides = k_strides[:3], v_strides[:3]
    else:
        kv.k_strides, kv.v_strides = (0, *k_strides[:2]), (0, *v_strides[:2])
    return kv


def _metadata_plan(metadata: Any, q: Any, splits: int, packing: int) -> Tuple[int, int]:
    """The call's (num_splits, pack_gqa) with scheduler_metadata: int32, one dimension, at least METADATA_LENGTH
    elements (a longer buffer it was copied into is fine), on the CPU or q's device. On the CPU (as
    get_scheduler_metadata returns it) its (num_splits, pack_gqa) are the call's, read without a synchronisation; a
    num_splits or pack_gqa argument that disagrees is a ValueError. On the device its values cannot be read
    without a synchronisation: the call plans from its own arguments, as without it."""
    t = _tensor(metadata, "scheduler_metadata")
    if t.dtype is not _attention._torch.int32 or t.dim() != 1 or t.shape[0] < METADATA_LENGTH:
        raise ValueError(f"scheduler_metadata is {t.dtype} {tuple(t.shape)}; expected the torch.int32 "
                         f"({METADATA_LENGTH},) tensor fa3jit.get_scheduler_metadata returns (or a longer "
                         f"one-dimensional int32 buffer holding it)")
    if t.is_cuda:
        if q.is_cuda and t.get_device() != q.get_device():  # a CPU q is _check_devices' error
            raise ValueError(f"scheduler_metadata is on {t.device}; expected the CPU or q's device {q.device}")
        return splits, packing
    planned_splits, planned_packing = t[:METADATA_LENGTH].tolist()
    if planned_splits < 1 or planned_packing not in (0, 1):  # the library range-checks the splits
        raise ValueError(f"scheduler_metadata holds (num_splits, pack_gqa) = ({planned_splits}, {planned_packing}); "
                         f"expected at least 1 split and pack_gqa 0 or 1, as get_scheduler_metadata writes them")
    if splits not in (0, planned_splits):
        raise ValueError(f"num_splits is {splits} but scheduler_metadata plans {planned_splits} splits; pass the "
                         f"num_splits given to get_scheduler_metadata (or 0)")
    if packing not in (-1, planned_packing):
        raise ValueError(f"pack_gqa is {bool(packing)} but scheduler_metadata plans pack_gqa={bool(planned_packing)}; "
                         f"pass the pack_gqa given to get_scheduler_metadata (or None)")
    return planned_splits, planned_packing


def _varlen_maxima(cu_seqlens_q: Any, max_seqlen_q: Any, max_seqlen_k: Any, cu_seqlens_k: Any,
                   capacity: int) -> Tuple[int, int]:
    """flash_attn_varlen_func's (max_seqlen_q, max_seqlen_k): the arguments checked, or where None the longest
    sequence of cu_seqlens_q / cu_seqlens_k (a device-to-host copy), or the cache's capacity."""
    max_q = _max_length(cu_seqlens_q) if max_seqlen_q is None else _checked_length(max_seqlen_q, "max_seqlen_q")
    if max_seqlen_k is not None:
        max_k = _checked_length(max_seqlen_k, "max_seqlen_k")
    elif cu_seqlens_k is not None:
        max_k = _max_length(cu_seqlens_k)
    else:
        max_k = capacity
    return max_q, max_k


def _max_length(cu_seqlens: Any) -> int:
    """The longest sequence of a cu_seqlens tensor (one device-to-host copy)."""
    if cu_seqlens.shape[0] < 2:
        return 0
    return int((cu_seqlens[1:] - cu_seqlens[:-1]).max().item())


def _checked_length(value: Any, name: str, minimum: int = 0, or_none: bool = True) -> int:
    """value as an int >= minimum (a bool is not one); ValueError naming `name`, the value and what is allowed
    (" or None" where the caller's argument may also be None)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        allowed = "a non-negative int" if minimum == 0 else f"an int >= {minimum}"
        raise ValueError(f"{name} is {value!r}; expected {allowed}{' or None' if or_none else ''}")
    return value


def _ptr(t: Any) -> int:
    return 0 if t is None else t.data_ptr()


class _Variant:
    """window_size, softcap and sinks, checked (the library checks their ranges against the shapes)."""
    __slots__ = ("window_left", "window_right", "softcap", "sinks")


_NO_VARIANT = _Variant()
_NO_VARIANT.window_left, _NO_VARIANT.window_right, _NO_VARIANT.softcap, _NO_VARIANT.sinks = -1, -1, 0.0, None


def _checked_variant(window_size: Any, softcap: Any, sinks: Any, num_heads: int, q: Any) -> _Variant:
    if (window_size is None or window_size == (-1, -1)) and softcap == 0 and sinks is None:
        return _NO_VARIANT
    variant = _Variant()
    try:
        left, right = (-1, -1) if window_size is None else window_size
    except (TypeError, ValueError):
        raise ValueError(f"window_size is {window_size!r}; expected a pair (left, right) of ints, -1 = unbounded") \
            from None
    for side, value in (("window_size[0]", left), ("window_size[1]", right)):
        if isinstance(value, bool) or not isinstance(value, int) or value < -1:
            raise ValueError(f"{side} is {value!r}; expected -1 (unbounded) or a number of keys >= 0")
    variant.window_left, variant.window_right = left, right
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not 0 <= softcap <= _FLOAT32_MAX:
        raise ValueError(f"softcap is {softcap!r}; expected 0.0 (off) or a positive float up to {_FLOAT32_MAX} "
                         f"(a float32)")
    variant.softcap = float(softcap)
    if sinks is not None:
        sinks = _tensor(sinks, "sinks")
        if sinks.dtype is not _attention._torch.float32 or tuple(sinks.shape) != (num_heads,):
            raise ValueError(f"sinks is {sinks.dtype} {tuple(sinks.shape)}; expected torch.float32 (num_heads,) = "
                             f"({num_heads},), one logit per query head")
        if num_heads > 1 and sinks.stride(0) != 1:
            raise ValueError(f"sinks must be contiguous; got stride {sinks.stride(0)}")
        if sinks.device != q.device:
            raise ValueError(f"sinks is on {sinks.device}; expected q's device {q.device}")
    variant.sinks = sinks
    return variant


# ---- the call ---------------------------------------------------------------------------------------------

def _run(q: Any, q_stride: Tuple[int, ...], k: Any, v: Any, kv: _KV, dtype_code: int, varlen_q: bool, batch: int,
         seqlen_q: int, num_heads: int, head_dim: int, cu_seqlens_q: Any, max_seqlen_q: int, max_seqlen_k: int,
         softmax_scale: Optional[float], causal: bool, num_splits: int, pack_gqa: int, out: Any,
         return_lse: bool, variant: _Variant, device: int, q_shape: Any, out_dtype: Any = None,
         fp8_fields: Tuple[Any, ...] = _NO_FP8, index_tensors: Optional[Tuple[Any, Any, Any]] = None,
         plan: Optional[_Plan] = None) -> Any:
    """Allocates or checks out, allocates lse, the workspace when the call splits, and launches; q's shape is
    q_shape, (total_q, ...) when varlen_q, else (batch, seqlen_q, ...); q_stride is q.stride(); device is q's
    (_check_devices). out_dtype: None = q's (16-bit calls); e4m3 calls give it with their fp8_fields (_fp8_fields).
    index_tensors: the call's (cu_seqlens_k, seqused_k, page_table) where kv is a kept plan's (whose own are None);
    None = kv's. plan: the call's kept plan, whose image (_Plan) the first call that packs its fields fills."""
    torch = _attention._torch
    if out_dtype is None:
        out_dtype = q.dtype
    scale = 0.0 if softmax_scale is None else _attention._checked_scale(softmax_scale)
    out_shape = (*q_shape[:-1], kv.head_dim_v)
    if out is None:
        # new_empty: q's dtype and device without building a torch.device per call.
        out = q.new_empty(out_shape, dtype=out_dtype)
        row = num_heads * kv.head_dim_v  # contiguous: its strides are known without asking torch
        o_stride = (row, kv.head_dim_v, 1) if varlen_q else (seqlen_q * row, row, kv.head_dim_v, 1)
    else:
        out = _tensor(out, "out")
        if out.shape != out_shape or out.dtype is not out_dtype or out.get_device() != device:
            raise ValueError(f"out is {out.dtype} {tuple(out.shape)} on {out.device}; expected {out_dtype} "
                             f"{out_shape} on {q.device}")
        o_stride = out.stride()
        _last_dim_contiguous(o_stride, out_shape[-1], "out")
    if return_lse:
        lse_shape = (num_heads, seqlen_q) if varlen_q else (batch, num_heads, seqlen_q)
        lse = q.new_empty(lse_shape, dtype=torch.float32)
    else:
        lse = None
    result = (out, lse) if return_lse else out
    if batch == 0 or seqlen_q == 0 or max_seqlen_q == 0 or num_heads == 0 or kv.head_dim_v == 0:
        return result  # nothing to compute (rows of a packed q past cu_seqlens_q[batch] are not written)
    if not kv.has_keys:
        # No sequence has a key: every row sees none, out = 0 and lse = -inf (or the row's sink) as the kernel
        # writes such rows.
        out.zero_()
        if lse is not None:
            if variant.sinks is None:
                lse.fill_(-math.inf)
            else:
                lse.copy_(variant.sinks.view((num_heads, 1) if varlen_q else (1, num_heads, 1)).expand_as(lse))
        return result

    if varlen_q:
        q_strides, o_strides = (0, *q_stride[:2]), (0, *o_stride[:2])
    else:
        q_strides, o_strides = q_stride[:3], o_stride[:3]
    try:
        params, address, size, size_ref, workspaces = _local.params
    except AttributeError:
        params, address, size, size_ref, workspaces = _thread_params()
    cu_k, used, pages = (kv.cu_seqlens_k, kv.seqused_k, kv.page_table) if index_tensors is None else index_tensors
    # From here the struct holds no plan's image (_run_planned), even if the pack fails part way: pack_into zeroes its
    # whole range first and writes the fields in order, so a failed call leaves zeros and some of its own fields.
    _local.image = None
    try:
        _pack_params(params, _PARAMS_OFFSET, dtype_code, 1 if causal else 0,
                     batch, seqlen_q, kv.seqlen_k, num_heads, kv.num_heads_kv, head_dim, kv.head_dim_v,
                     q.data_ptr(), *q_strides, k.data_ptr(), *kv.k_strides, v.data_ptr(), *kv.v_strides,
                     out.data_ptr(), *o_strides, _ptr(lse), scale, 0, 0, *fp8_fields,
                     _ptr(cu_seqlens_q), max_seqlen_q, _ptr(cu_k), max_seqlen_k, _ptr(used),
                     _ptr(pages), kv.page_table_stride, kv.max_pages, kv.num_pages, kv.page_size,
                     num_splits, pack_gqa, variant.window_left, variant.window_right, variant.softcap,
                     _ptr(variant.sinks))
    except (struct.error, OverflowError):
        # What the caller gave as plain numbers (the rest comes from tensors, which fit): the first that its field
        # of fa3jit_forward_params cannot hold, by name, instead of struct's message.
        _capi.ForwardParams.check_fields(max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, num_splits=num_splits,
                                         window_left=variant.window_left, window_right=variant.window_right)
        raise
    if plan is not None and plan.image is None:
        plan.strides = (*q_strides, *kv.k_strides, *kv.v_strides, *o_strides)
        plan.image = ctypes.string_at(address + _PARAMS_OFFSET, _IMAGE_END - _PARAMS_OFFSET)
    _launch(q, params, address, size, size_ref, workspaces, device, num_splits, causal)
    return result


def _run_planned(plan: _Plan, q: Any, k: Any, v: Any, out: Any, softmax_scale: Optional[float], cu_seqlens_q: Any,
                 max_seqlen_q: int, cu_seqlens_k: Any, max_seqlen_k: int, seqused_k: Any, page_table: Any,
                 causal: bool) -> Any:
    """_run for a warm call of a kept plan whose image is filled, without lse: out allocated as _run does (or the
    call's, which its signature has checked), the image copied into this thread's struct when another call's fields
    are there, then the call's tensors, index tensors, max_seqlen_* and softmax_scale packed over it, and the launch.
    Returns out."""
    try:
        params, address, size, size_ref, workspaces = _local.params
    except AttributeError:
        params, address, size, size_ref, workspaces = _thread_params()
    if out is None:
        out = q.new_empty(plan.out_shape)
    scale = 0.0 if softmax_scale is None else _attention._checked_scale(softmax_scale)
    image = plan.image
    if getattr(_local, "image", None) is not image:
        ctypes.memmove(address + _PARAMS_OFFSET, image, len(image))
        _local.image = image
    qs0, qs1, qs2, ks0, ks1, ks2, vs0, vs1, vs2, os0, os1, os2 = plan.strides
    _pack_tensors(params, _TENSORS_OFFSET, q.data_ptr(), qs0, qs1, qs2, k.data_ptr(), ks0, ks1, ks2, v.data_ptr(),
                  vs0, vs1, vs2, out.data_ptr(), os0, os1, os2, 0, scale)
    _pack_index(params, _INDEX_OFFSET, _ptr(cu_seqlens_q), max_seqlen_q, _ptr(cu_seqlens_k), max_seqlen_k,
                _ptr(seqused_k), _ptr(page_table))
    _launch(q, params, address, size, size_ref, workspaces, plan.device, plan.splits, causal)
    return out


def _launch(q: Any, params: Any, address: int, size: Any, size_ref: Any, workspaces: dict, device: int,
            num_splits: int, causal: bool) -> None:
    """Launches the call packed at `address` on torch's current stream of `device`, with this thread's workspace of
    that stream when the call may need one (a split's partials, a dense causal call's tile counter). A kept workspace
    the library refuses as too small is replaced by one of the size it asks for and the launch tried once more.
    Raises fa3jit.Fa3jitValueError / Fa3jitRuntimeError (_capi.error_for) with the library's message when it refuses
    the call or the launch fails."""
    torch = _attention._torch
    runtime_handle = _attention._runtime_handle or _attention._bind_runtime()
    switch = _attention._current_device is not None and _attention._current_device() != device
    context = torch.cuda.device(device) if switch else None
    if context is not None:
        context.__enter__()
    try:
        stream = _attention._current_stream(device)
        # (a uint8 tensor, its address, its bytes), referenced by this frame until the launch is queued (or captured).
        workspace = unasked = None
        if num_splits != 1 or causal:  # a split's partials; a dense causal call's tile counter
            # A warm call passes the workspace this stream keeps without asking the call's size: the library checks
            # it before launching anything and refuses one too small (below). Under capture, each call its own.
            if not torch._C._cuda_isCurrentStreamCapturing():
                workspace = unasked = workspaces.get((device, stream))
            if workspace is None:
                nbytes = _workspace_size(runtime_handle, address, size, size_ref)
                if nbytes:
                    workspace = _workspace(q, workspaces, device, stream, nbytes)
            if workspace is not None:
                _pack_workspace(params, _WORKSPACE_OFFSET, workspace[1], workspace[2])
            else:  # none needed: no earlier call's (a kept plan's image is not rewritten per call)
                _pack_workspace(params, _WORKSPACE_OFFSET, 0, 0)
        status = _attention._attention_forward(runtime_handle, None, address, stream)
        if status and unasked is not None:
            # Refused with the kept workspace: only if the call needs more is the size asked worth a second try.
            error = _capi.error_for(status, "fa3jit_attention_forward")
            try:
                nbytes = _workspace_size(runtime_handle, address, size, size_ref)
            except _capi.Fa3jitError:
                raise error from None  # the call's own fault, which the size query met too
            if nbytes <= unasked[2]:
                raise error
            workspace = _workspace(q, workspaces, device, stream, nbytes)
            _pack_workspace(params, _WORKSPACE_OFFSET, workspace[1], workspace[2])
            status = _attention._attention_forward(runtime_handle, None, address, stream)
    finally:
        if context is not None:
            context.__exit__(None, None, None)
    if status:
        raise _capi.error_for(status, "fa3jit_attention_forward")


def _workspace_size(runtime_handle: int, address: int, size: Any, size_ref: Any) -> int:
    """fa3jit_attention_workspace_size of the call packed at `address`, through this thread's c_size_t."""
    status = _capi.library().fa3jit_attention_workspace_size(runtime_handle, address, size_ref)
    if status:
        raise _capi.error_for(status, "fa3jit_attention_workspace_size")
    return size.value


def _workspace(q: Any, workspaces: dict, device: int, stream: int, nbytes: int) -> Tuple[Any, int, int]:
    """(a uint8 workspace of at least nbytes for this thread's call on `stream`, its address, its bytes); see _local.
    A kept one's address and size are kept beside it, so a warm call reads no attribute of it."""
    torch = _attention._torch
    # Under capture: from the graph's pool, which the graph's later nodes may reuse after the call's kernels. Over the
    # bound: a large split prefill's own, so no thread keeps gigabytes for good.
    if torch._C._cuda_isCurrentStreamCapturing() or nbytes > _KEPT_WORKSPACE_BYTES:
        workspace = q.new_empty((nbytes,), dtype=torch.uint8)
        return workspace, workspace.data_ptr(), nbytes
    key = (device, stream)
    kept = workspaces.get(key)
    if kept is None or kept[2] < nbytes:
        # Not in a warmed-up call: the first on this stream, or larger shapes than any before (whole MiB, so that
        # slowly growing batches do not reallocate at every step).
        kept_bytes = min(_KEPT_WORKSPACE_BYTES, (nbytes + _MIB - 1) // _MIB * _MIB)
        workspace = q.new_empty((kept_bytes,), dtype=torch.uint8)
        kept = workspaces[key] = (workspace, workspace.data_ptr(), kept_bytes)
    return kept


def flash_attn_varlen_func(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any = None,
                           max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                           seqused_k: Any = None, page_table: Any = None, softmax_scale: Optional[float] = None,
                           causal: bool = False, num_splits: int = 0, pack_gqa: Optional[bool] = None,
                           out: Any = None, return_lse: bool = False, *, seqused_q: Any = None, qv: Any = None,
                           q_descale: Any = None, k_descale: Any = None, v_descale: Any = None,
                           window_size: Tuple[int, int] = (-1, -1), attention_chunk: int = 0, softcap: float = 0.0,
                           sinks: Any = None, scheduler_metadata: Any = None, deterministic: bool = False,
                           sm_margin: int = 0, return_attn_probs: bool = False) -> Any:
    """Attention over a batch of sequences of different lengths packed into one tensor (FlashAttention-3's
    flash_attn_varlen_func), on an NVIDIA Hopper GPU.

    Shapes (torch.float16 or torch.bfloat16, or an FP8 cache below; head_dim and head_dim_v a multiple of 8 up
    to 256, of 16 for FP8; last dimension contiguous, other strides free multiples of 16 bytes):
      q             (total_q, num_heads, head_dim), sequence b in rows [cu_seqlens_q[b], cu_seqlens_q[b + 1])
      cu_seqlens_q  (batch + 1,) torch.int32, non-decreasing offsets into q's rows
      k, v          one of
                      (total_k, num_heads_kv, head_dim[_v])             with cu_seqlens_k (batch + 1,) int32;
                      (num_pages, page_size, num_heads_kv, head_dim[_v]) with page_table (batch, max_pages) int32
                                                                        and seqused_k; any page_size;
                      (batch, seqlen_k, num_heads_kv, head_dim[_v])     with neither (dense)
      seqused_k     (batch,) torch.int32: keys of each sequence attended (<= its capacity); None = all of them
                    (required with page_table)
      out           (total_q, num_heads, head_dim_v), q's dtype; allocated unless given
    max_seqlen_q / max_seqlen_k: the longest query / key sequence (upper bounds are fine: max_seqlen_q sizes the
    grid and the split workspace, max_seqlen_k feeds the num_splits heuristic); None computes them from
    cu_seqlens_q / cu_seqlens_k with one device-to-host copy (with page_table: max_pages * page_size). Pass them
    in a serving loop and under CUDA-graph capture.
    causal: bottom-right aligned per sequence: query i of a sequence of Lq queries and Lk keys sees key j iff
    j <= i + Lk - Lq; a row that sees no key gets out = 0 and lse = -inf. softmax_scale: None = 1/sqrt(head_dim).
    num_splits: 0 = the heuristic, 1 = no split, > 1 = that many KV splits (FlashDecoding; the partials go to a
    workspace on q's device that the calling thread keeps per stream, up to 64 MiB, and reuses; allocated with torch
    per call when larger and under CUDA-graph capture; they are merged on the same stream). pack_gqa: None = the
    heuristic, True / False. GQA/MQA: num_heads a multiple of num_heads_kv.
    window_size (left, right): sliding window, query i sees keys i + Lk - Lq - left .. i + Lk - Lq + right, -1 =
    unbounded on that side; with causal, right must be -1 or 0. softcap > 0: scores become
    softcap * tanh(score * softmax_scale / softcap) before the softmax. sinks: (num_heads,) torch.float32, one
    logit per query head joining each row's softmax normaliser (gpt-oss); lse includes it.
    All tensors on one CUDA device; runs asynchronously on torch's current stream. Forward only; not a torch op
    yet (under torch.compile the call is a graph break).
    FP8 KV cache (FlashAttention-3's arguments): k and v torch.float8_e4m3fn with k_descale, v_descale per_head,
    (batch, num_heads_kv) float32 (stride-0 views allowed: that is how a per-tensor scale is passed), one element,
    or None (1); the real keys are k * k_descale. q either torch.float8_e4m3fn with q_descale likewise, or
    torch.float16 / torch.bfloat16, quantised to e4m3 in the call (q_descale None: amax / 448 per KV head over
    q's rows before cu_seqlens_q[batch]; or one float32 element, a static scale: q / q_descale). out is
    torch.bfloat16 unless an fp16 out is given. Per-block descales are for dense tensors (fa3jit.flash_attn_func).
    FP8 is the e4m3 kernel of fa3jit.flash_attn_func (FA3 paper §3.3): both GEMMs in FP8, P in e4m3, fp32 accumulation.

    Returns out, or (out, lse) when return_lse (or FlashAttention-3's return_attn_probs): lse float32
    (num_heads, total_q), natural log. Rows of q past cu_seqlens_q[batch] are not written.
    Raises ValueError (fa3jit.Fa3jitValueError for what the library rejects) naming the argument; TypeError for
    a non-tensor; NotImplementedError for FlashAttention-3 arguments fa3jit does not implement yet (seqused_q,
    qv, attention_chunk, sm_margin); RuntimeError (fa3jit.Fa3jitRuntimeError) when compiling or launching fails.
    deterministic is accepted: it concerns FlashAttention-3's backward pass, and this forward is deterministic.
    scheduler_metadata: what get_scheduler_metadata returned for this batch, or None (see there).
    """
    function = "flash_attn_varlen_func"
    if not (seqused_q is None and qv is None and attention_chunk == 0 and sm_margin == 0):
        _refuse_unsupported(function, seqused_q=seqused_q, qv=qv, attention_chunk=attention_chunk,
                            sm_margin=sm_margin)
    if _attention._Tensor is None:
        _attention._bind_torch()
    # A 16-bit call without scheduler_metadata, sinks or descales whose signature an earlier call of this thread
    # passed the checks with runs from that call's plan (flash_attn_with_kvcache has the same).
    signature = None
    if (scheduler_metadata is None and sinks is None and q_descale is None and k_descale is None and
            v_descale is None):
        signature = _signature(q, k, v, (cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out), causal,
                               num_splits, pack_gqa, window_size, softcap)
        if signature is not None:
            plan = _thread_plans().get(signature)
            if plan is not None:
                kv = plan.kv
                max_q, max_k = _varlen_maxima(cu_seqlens_q, max_seqlen_q, max_seqlen_k, cu_seqlens_k, kv.capacity)
                if plan.image is not None and max_q != 0 and not (return_lse or return_attn_probs):
                    return _run_planned(plan, q, k, v, out, softmax_scale, cu_seqlens_q, max_q, cu_seqlens_k, max_k,
                                        seqused_k, page_table, causal)
                return _run(q, plan.q_stride, k, v, kv, plan.dtype_code, True, plan.batch, plan.seqlen_q,
                            plan.num_heads, plan.head_dim, cu_seqlens_q, max_q, max_k, softmax_scale, causal,
                            plan.splits, plan.packing, out, return_lse or return_attn_probs, plan.variant,
                            plan.device, plan.q_shape, index_tensors=(cu_seqlens_k, seqused_k, page_table),
                            plan=plan)
    q, k, v = _tensor(q, "q"), _tensor(k, "k"), _tensor(v, "v")
    dtype_code, quantize_q = _dtype_code(q, k, v, ("k", "v"))
    fp8 = dtype_code == _capi.DTYPE_E4M3
    if not fp8 and (q_descale is not None or k_descale is not None or v_descale is not None):
        _refuse_descales(k.dtype, ("k", "v"), q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    q_shape = _rank(q.shape, "q", "(total_q, num_heads, head_dim)")
    total_q, num_heads, head_dim = q_shape
    if cu_seqlens_q is None:
        raise ValueError("cu_seqlens_q is None; expected (batch + 1,) torch.int32 offsets (for a dense batch use "
                         "fa3jit.flash_attn_func)")
    cu_q = _index_tensor(cu_seqlens_q, "cu_seqlens_q", "(batch + 1,)", (None,))
    if cu_q.shape[0] < 1:
        raise ValueError("cu_seqlens_q has shape (0,); expected (batch + 1,) offsets")
    batch = cu_q.shape[0] - 1
    kv = _kv_layout(k, v, ("k", "v"), batch, head_dim, cu_seqlens_k, seqused_k, page_table, "seqused_k")
    if kv.page_table is not None and kv.seqused_k is None:
        raise ValueError("seqused_k is None; it is required with page_table: (batch,) torch.int32, the number of "
                         "keys of each sequence")
    q_stride = q.stride()
    _last_dim_contiguous(q_stride, q_shape[-1], "q")
    splits, packing = _checked_options(num_splits, pack_gqa)
    variant = _checked_variant(window_size, softcap, sinks, num_heads, q)
    out = None if out is None else _tensor(out, "out")
    if scheduler_metadata is not None:
        splits, packing = _metadata_plan(scheduler_metadata, q, splits, packing)
    device = _check_devices(q, _VARLEN_DEVICE_NAMES, k, v, cu_q, kv.cu_seqlens_k, kv.seqused_k, kv.page_table, out)
    plan = None
    if signature is not None and not fp8:
        plan = _keep_plan(signature, kv, dtype_code, batch, total_q, num_heads, head_dim, q_shape, q_stride, None,
                          splits, packing, variant, device)
    out_dtype, fp8_fields = None, _NO_FP8
    if fp8:
        q, q_stride, out_dtype, fp8_fields = _fp8_call(q, q_stride, quantize_q, (q_descale, k_descale, v_descale),
                                                       batch, num_heads, head_dim, kv, cu_q, out)
    max_q, max_k = _varlen_maxima(cu_q, max_seqlen_q, max_seqlen_k, kv.cu_seqlens_k, kv.capacity)
    return _run(q, q_stride, k, v, kv, dtype_code, True, batch, total_q, num_heads, head_dim, cu_q, max_q, max_k,
                softmax_scale, causal, splits, packing, out, return_lse or return_attn_probs, variant, device, q_shape,
                out_dtype, fp8_fields, plan=plan)


# ---- warm calls: the checks before the device kept per call signature -----------------------------------------

class _Plan:
    """What the checks before the device of flash_attn_varlen_func or flash_attn_with_kvcache derive from a call (its
    tensors' dtypes, shapes, strides and devices and its plain arguments: _signature): _run's arguments but the
    call's tensors. kv's tensor fields (cu_seqlens_k, seqused_k, page_table) are None: a warm call passes its own to
    _run (index_tensors), so the plan is never written after it is kept (a nested call of the same signature, from
    an allocator hook say, cannot change an outer one's). seqlen_q is total_q for a varlen call; fill_seqlens:
    flash_attn_with_kvcache's cache length as a number. image and strides are the one exception, written once, by the
    first _run of the plan that packs a call (None until then: a call with nothing to compute returns first): the bytes
    of fa3jit_forward_params from dtype through sinks as that call packed them, and the three strides each of q, k, v
    and out packed there. Every call of the signature packs the same bytes but for the addresses of its tensors and
    index tensors, max_seqlen_*, softmax_scale and lse, which _run_planned packs over the image per call (a nested
    call that fills the image first fills it with the same bytes). out_shape: the out a call allocates."""
    __slots__ = ("kv", "dtype_code", "batch", "seqlen_q", "num_heads", "head_dim", "q_shape", "q_stride",
                 "fill_seqlens", "splits", "packing", "variant", "device", "image", "strides", "out_shape")


_PLANS_MAX = 256  # signatures kept per thread; past it the thread's plans are dropped and rebuilt as calls come


def _signature(q: Any, k: Any, v: Any, optional: Tuple[Any, ...], causal: Any, num_splits: Any, pack_gqa: Any,
               window_size: Any, softcap: Any, *plain: Any) -> Any:
    """The key of a call's _Plan: the dtype, shape, strides and device of q, k, v and each of `optional` (None:
    absent), and the plain arguments the checks read, each with its type where the checks tell types apart (a bool
    is no num_splits, no window side and no cache length, though True == 1); None for a call the plans do not cover
    (an argument that is not exactly a torch.Tensor, q not on a CUDA device, causal, num_splits or pack_gqa of
    another type than bool or int, a window_size that is not a tuple of two ints, a softcap that is no int or
    float)."""
    Tensor = _attention._Tensor
    if type(q) is not Tensor or type(k) is not Tensor or type(v) is not Tensor or not q.is_cuda:
        return None
    # Plain arguments of the types the checks take, by value: anything else (a 0-dim tensor as pack_gqa, a list as
    # num_splits) takes the checks each time, so no object is kept and no mutable one is keyed by its identity.
    causal_type, splits_type, packing_type = type(causal), type(num_splits), type(pack_gqa)
    if (causal_type is not bool and causal_type is not int or splits_type is not int and splits_type is not bool or
            pack_gqa is not None and packing_type is not bool and packing_type is not int):
        return None
    metas = []
    for t in optional:
        if t is None:
            metas.append(None)
        elif type(t) is Tensor:
            metas.append((t.dtype, t.shape, t.stride(), t.get_device()))
        else:
            return None
    if window_size is not None and (type(window_size) is not tuple or len(window_size) != 2 or
                                    type(window_size[0]) is not int or type(window_size[1]) is not int):
        return None
    softcap_type = type(softcap)
    if softcap_type is not float and softcap_type is not int:
        return None
    return (q.dtype, q.shape, q.stride(), q.get_device(), k.dtype, k.shape, k.stride(), k.get_device(), v.dtype,
            v.shape, v.stride(), v.get_device(), *metas, causal_type, causal, splits_type, num_splits, packing_type,
            pack_gqa, window_size, softcap, *plain)


def _kvcache_signature(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any, page_table: Any, out: Any,
                       causal: Any, num_splits: Any, pack_gqa: Any, window_size: Any, softcap: Any) -> Any:
    """_signature of a flash_attn_with_kvcache call; cache_seqlens a tensor, an int (its value is the plan's) or
    None."""
    seqlens_type = type(cache_seqlens)
    if seqlens_type is _attention._Tensor:
        return _signature(q, k_cache, v_cache, (page_table, out, cache_seqlens), causal, num_splits, pack_gqa,
                          window_size, softcap, seqlens_type)
    if cache_seqlens is not None and seqlens_type is not int:
        return None
    return _signature(q, k_cache, v_cache, (page_table, out), causal, num_splits, pack_gqa, window_size, softcap,
                      seqlens_type, cache_seqlens)


def _thread_plans() -> dict:
    """This thread's plans, {signature: _Plan}."""
    try:
        return _local.plans
    except AttributeError:
        plans = _local.plans = {}
        return plans


def _keep_plan(signature: Any, kv: _KV, dtype_code: int, batch: int, seqlen_q: int, num_heads: int, head_dim: int,
               q_shape: Any, q_stride: Tuple[int, ...], fill_seqlens: Optional[int], splits: int, packing: int,
               variant: _Variant, device: int) -> _Plan:
    """Keeps a checked call's plan for its signature (this thread's), kv copied without its tensors; returns it."""
    plans = _thread_plans()
    if len(plans) >= _PLANS_MAX:
        plans.clear()
    kept = _KV()
    for field in _KV.__slots__:
        setattr(kept, field, getattr(kv, field))
    kept.seqused_k = kept.page_table = kept.cu_seqlens_k = None
    plan = _Plan()
    plan.kv, plan.dtype_code, plan.batch, plan.seqlen_q, plan.num_heads = kept, dtype_code, batch, seqlen_q, num_heads
    plan.head_dim, plan.q_shape, plan.q_stride, plan.fill_seqlens = head_dim, q_shape, q_stride, fill_seqlens
    plan.splits, plan.packing, plan.variant, plan.device = splits, packing, variant, device
    plan.image = plan.strides = None
    plan.out_shape = (*q_shape[:-1], kv.head_dim_v)
    plans[signature] = plan
    return plan


def flash_attn_with_kvcache(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Union[int, Any, None] = None,
                            page_table: Any = None, cu_seqlens_q: Any = None, max_seqlen_q: Optional[int] = None,
                            softmax_scale: Optional[float] = None, causal: bool = False, num_splits: int = 0,
                            pack_gqa: Optional[bool] = None, out: Any = None, return_lse: bool = False, *,
                            k: Any = None, v: Any = None, qv: Any = None, rotary_cos: Any = None,
                            rotary_sin: Any = None, cache_batch_idx: Any = None, cache_leftpad: Any = None,
                            cu_seqlens_k_new: Any = None, rotary_seqlens: Any = None, q_descale: Any = None,
                            k_descale: Any = None, v_descale: Any = None, window_size: Tuple[int, int] = (-1, -1),
                            attention_chunk: int = 0, softcap: float = 0.0, rotary_interleaved: bool = True,
                            scheduler_metadata: Any = None, sm_margin: int = 0, sinks: Any = None,
                            return_softmax_lse: bool = False) -> Any:
    """Attention of new queries over a KV cache, dense or paged (FlashAttention-3's flash_attn_with_kvcache), on
    an NVIDIA Hopper GPU: decoding (seqlen_q = 1) and chunked prefill.

    Shapes (torch.float16 or torch.bfloat16, or an FP8 cache below; head_dim and head_dim_v a multiple of 8 up
    to 256, of 16 for FP8; last dimension contiguous, other strides free multiples of 16 bytes):
      q              (batch, seqlen_q, num_heads, head_dim), or (total_q, num_heads, head_dim) with
                     cu_seqlens_q (batch + 1,) torch.int32 (then max_seqlen_q as in flash_attn_varlen_func)
      k_cache, v_cache
                     (batch, seqlen_cache, num_heads_kv, head_dim[_v]), or with page_table
                     (num_pages, page_size, num_heads_kv, head_dim[_v]), any page_size (multiples of 8
                     load as TMA boxes, others row by row)
      page_table     (batch, max_pages) torch.int32 page indices, last dimension contiguous; key j of sequence b
                     is row j % page_size of page page_table[b, j // page_size]; entries past a sequence's pages
                     may hold anything, and so may the cache slots past each sequence's keys (NaN included:
                     a cache from torch.empty)
      cache_seqlens  int or (batch,) torch.int32: keys of each sequence in the cache; None = all of them
                     (seqlen_cache, or max_pages * page_size with a page table; an int or None with a page table
                     makes a (batch,) tensor on q's device per call)
      out            q's shape with head_dim_v, q's dtype; allocated unless given
    causal: bottom-right aligned per sequence (query i of Lq sees cache key j iff j <= i + Lk - Lq, Lk its
    cache_seqlens), a row that sees no key gets out = 0 and lse = -inf. softmax_scale: None = 1/sqrt(head_dim).
    num_splits: 0 = the heuristic (FlashAttention-3's default here), 1 = no split, > 1 = that many KV splits (the
    partials go to a workspace as in flash_attn_varlen_func and are merged on the same stream). pack_gqa: None =
    the heuristic, True / False. window_size, softcap and sinks as in flash_attn_varlen_func. All tensors on one
    CUDA device; runs asynchronously on torch's current stream.
    Forward only; not a torch op yet (under torch.compile the call is a graph break).
    FP8 KV cache (k_cache and v_cache torch.float8_e4m3fn with q_descale, k_descale, v_descale) as in
    flash_attn_varlen_func.

    Returns out, or (out, lse) when return_lse (or FlashAttention-3's return_softmax_lse): lse float32
    (batch, num_heads, seqlen_q), or (num_heads, total_q) with cu_seqlens_q; natural log.
    Raises ValueError (fa3jit.Fa3jitValueError for what the library rejects) naming the argument; TypeError for
    a non-tensor; NotImplementedError for FlashAttention-3 arguments fa3jit does not implement yet (k and v
    appended into the cache, cu_seqlens_k_new, qv, rotary_cos / rotary_sin / rotary_seqlens, cache_batch_idx,
    cache_leftpad, attention_chunk, sm_margin); RuntimeError (fa3jit.Fa3jitRuntimeError) when compiling or
    launching fails. rotary_interleaved is accepted: it only qualifies rotary_cos / rotary_sin.
    scheduler_metadata: what get_scheduler_metadata returned for this batch, or None (see there).
    """
    function = "flash_attn_with_kvcache"
    if not (k is None and v is None and cu_seqlens_k_new is None and qv is None and rotary_cos is None and
            rotary_sin is None and rotary_seqlens is None and cache_batch_idx is None and cache_leftpad is None and
            attention_chunk == 0 and sm_margin == 0):
        _refuse_unsupported(function, k=k, v=v, cu_seqlens_k_new=cu_seqlens_k_new, qv=qv, rotary_cos=rotary_cos,
                            rotary_sin=rotary_sin, rotary_seqlens=rotary_seqlens, cache_batch_idx=cache_batch_idx,
                            cache_leftpad=cache_leftpad, attention_chunk=attention_chunk, sm_margin=sm_margin)
    if _attention._Tensor is None:
        _attention._bind_torch()
    torch = _attention._torch
    # A 16-bit call without cu_seqlens_q, scheduler_metadata, sinks or descales whose signature an earlier call of
    # this thread passed the checks with runs from that call's plan: the checks read nothing else.
    signature = None
    if (cu_seqlens_q is None and scheduler_metadata is None and sinks is None and q_descale is None and
            k_descale is None and v_descale is None):
        signature = _kvcache_signature(q, k_cache, v_cache, cache_seqlens, page_table, out, causal, num_splits,
                                       pack_gqa, window_size, softcap)
        if signature is not None:
            plan = _thread_plans().get(signature)
            if plan is not None:
                if plan.fill_seqlens is None:
                    used = cache_seqlens
                else:
                    used = torch.full((plan.batch,), plan.fill_seqlens, dtype=torch.int32, device=q.device)
                if plan.image is not None and not (return_lse or return_softmax_lse):
                    return _run_planned(plan, q, k_cache, v_cache, out, softmax_scale, None, plan.seqlen_q, None,
                                        plan.kv.capacity, used, page_table, causal)
                return _run(q, plan.q_stride, k_cache, v_cache, plan.kv, plan.dtype_code, False, plan.batch,
                            plan.seqlen_q, plan.num_heads, plan.head_dim, None, plan.seqlen_q, plan.kv.capacity,
                            softmax_scale, causal, plan.splits, plan.packing, out, return_lse or return_softmax_lse,
                            plan.variant, plan.device, plan.q_shape, index_tensors=(None, used, page_table), plan=plan)
    q, k_cache, v_cache = _tensor(q, "q"), _tensor(k_cache, "k_cache"), _tensor(v_cache, "v_cache")
    dtype_code, quantize_q = _dtype_code(q, k_cache, v_cache, ("k_cache", "v_cache"))
    fp8 = dtype_code == _capi.DTYPE_E4M3
    if not fp8 and (q_descale is not None or k_descale is not None or v_descale is not None):
        _refuse_descales(k_cache.dtype, ("k_cache", "v_cache"), q_descale=q_descale, k_descale=k_descale,
                         v_descale=v_descale)
    varlen_q = cu_seqlens_q is not None
    if varlen_q:
        q_shape = _rank(q.shape, "q", "(total_q, num_heads, head_dim) with cu_seqlens_q")
        seqlen_q, num_heads, head_dim = q_shape
        cu_q = _index_tensor(cu_seqlens_q, "cu_seqlens_q", "(batch + 1,)", (None,))
        if cu_q.shape[0] < 1:
            raise ValueError("cu_seqlens_q has shape (0,); expected (batch + 1,) offsets")
        batch = cu_q.shape[0] - 1
    else:
        q_shape = _rank(q.shape, "q", "(batch, seqlen_q, num_heads, head_dim)")
        batch, seqlen_q, num_heads, head_dim = q_shape
        cu_q = None
    if isinstance(cache_seqlens, bool):
        raise TypeError("cache_seqlens: expected an int, a (batch,) torch.int32 tensor or None; got a bool")
    as_int = cache_seqlens is None or isinstance(cache_seqlens, int)
    kv = _kv_layout(k_cache, v_cache, ("k_cache", "v_cache"), batch, head_dim, None,
                    None if as_int else cache_seqlens, page_table, "cache_seqlens")
    # An int, or None with a page table (whose seqused_k is required): a (batch,) tensor made once the device
    # is checked. None without a page table: every key of the dense cache, no tensor.
    fill_seqlens: Optional[int] = None
    if as_int and (cache_seqlens is not None or kv.page_table is not None):
        fill_seqlens = kv.capacity if cache_seqlens is None else cache_seqlens
        if not 0 <= fill_seqlens <= kv.capacity:
            raise ValueError(f"cache_seqlens is {fill_seqlens}; expected 0 to the cache's capacity {kv.capacity} "
                             f"(keys per sequence)")
    q_stride = q.stride()
    _last_dim_contiguous(q_stride, q_shape[-1], "q")
    splits, packing = _checked_options(num_splits, pack_gqa)
    variant = _checked_variant(window_size, softcap, sinks, num_heads, q)
    out = None if out is None else _tensor(out, "out")
    if scheduler_metadata is not None:
        splits, packing = _metadata_plan(scheduler_metadata, q, splits, packing)
    device = _check_devices(q, _KVCACHE_DEVICE_NAMES, k_cache, v_cache, cu_q, kv.seqused_k, kv.page_table, out)
    plan = None
    if signature is not None and not fp8:
        plan = _keep_plan(signature, kv, dtype_code, batch, seqlen_q, num_heads, head_dim, q_shape, q_stride,
                          fill_seqlens, splits, packing, variant, device)
    if fill_seqlens is not None:
        kv.seqused_k = torch.full((batch,), fill_seqlens, dtype=torch.int32, device=q.device)
    out_dtype, fp8_fields = None, _NO_FP8
    if fp8:
        q, q_stride, out_dtype, fp8_fields = _fp8_call(q, q_stride, quantize_q, (q_descale, k_descale, v_descale),
                                                       batch, num_heads, head_dim, kv, cu_q, out)
    if varlen_q:
        max_q = _max_length(cu_q) if max_seqlen_q is None else _checked_length(max_seqlen_q, "max_seqlen_q")
    else:
        max_q = seqlen_q
    return _run(q, q_stride, k_cache, v_cache, kv, dtype_code, varlen_q, batch, seqlen_q, num_heads, head_dim,
                cu_q, max_q, kv.capacity, softmax_scale, causal, splits, packing, out,
                return_lse or return_softmax_lse, variant, device, q_shape, out_dtype, fp8_fields, plan=plan)


def get_scheduler_metadata(batch_size: int, max_seqlen_q: int, max_seqlen_k: int, num_heads_q: int,
                           num_heads_kv: int, headdim: int, cache_seqlens: Any, qkv_dtype: Any = None,
                           headdim_v: Optional[int] = None, cu_seqlens_q: Any = None, cu_seqlens_k_new: Any = None,
                           cache_leftpad: Any = None, page_size: Optional[int] = None, max_seqlen_k_new: int = 0,
                           causal: bool = False, window_size: Tuple[int, int] = (-1, -1), attention_chunk: int = 0,
                           has_softcap: bool = False, num_splits: int = 0, pack_gqa: Optional[bool] = None,
                           sm_margin: int = 0) -> Any:
    """The schedule of one batch's attention calls, computed once ahead of them (FlashAttention-3's
    get_scheduler_metadata, same arguments): a torch.int32 CPU tensor (METADATA_LENGTH,) = (num_splits, pack_gqa),
    from the heuristics the launch uses (fa3jit_attention_plan; FA3's num_splits_heuristic and should_pack_gqa)
    over the batch's longest key length max_seqlen_k.

    flash_attn_with_kvcache and flash_attn_varlen_func given it as scheduler_metadata= run that schedule: its
    (num_splits, pack_gqa) become theirs (a num_splits or pack_gqa argument that disagrees is a ValueError), read
    from host memory, so no value comes back from the device, under CUDA graphs too. (Without it a kvcache call
    plans over the cache's capacity, max_pages * page_size or seqlen_cache, which may split differently.) A copy
    on the device (FlashAttention-3 keeps its metadata there) is checked and not read: the call then plans from its
    own arguments.

    Shapes as in FlashAttention-3: cache_seqlens (batch_size,) torch.int32 on a CUDA device (the device whose SM
    count the heuristic uses); cu_seqlens_q (batch_size + 1,) torch.int32 for packed q (max_seqlen_q then bounds
    each sequence's queries); page_size for a paged cache; qkv_dtype the cache's dtype: torch.float16,
    torch.bfloat16 (default) or torch.float8_e4m3fn (an FP8 cache, whatever q's dtype); headdim_v None = headdim;
    has_softcap: whether the calls pass a softcap. num_splits: 0 = the heuristic, 1 = none, > 1 = that many;
    pack_gqa None = the heuristic. Needs the CUDA driver (the SM count) when num_splits is 0.
    Raises ValueError naming the argument (fa3jit.Fa3jitValueError for what the library refuses);
    NotImplementedError for cu_seqlens_k_new, cache_leftpad, max_seqlen_k_new, attention_chunk and sm_margin away
    from their defaults (features fa3jit lacks).
    """
    function = "get_scheduler_metadata"
    if not (cu_seqlens_k_new is None and cache_leftpad is None and attention_chunk == 0 and sm_margin == 0):
        _refuse_unsupported(function, cu_seqlens_k_new=cu_seqlens_k_new, cache_leftpad=cache_leftpad,
                            attention_chunk=attention_chunk, sm_margin=sm_margin)
    if max_seqlen_k_new != 0:
        raise NotImplementedError(f"{function}: max_seqlen_k_new={max_seqlen_k_new!r} is not supported by fa3jit "
                                  f"yet (appending new keys and values into the cache); leave it at 0")
    if _attention._Tensor is None:
        _attention._bind_torch()
    torch = _attention._torch
    sizes = {name: _checked_length(value, name, or_none=False)
             for name, value in (("batch_size", batch_size), ("max_seqlen_q", max_seqlen_q),
                                 ("max_seqlen_k", max_seqlen_k), ("num_heads_q", num_heads_q),
                                 ("num_heads_kv", num_heads_kv), ("headdim", headdim),
                                 ("headdim_v", headdim if headdim_v is None else headdim_v))}
    batch, max_q, max_k = sizes["batch_size"], sizes["max_seqlen_q"], sizes["max_seqlen_k"]
    dtype = torch.bfloat16 if qkv_dtype is None else qkv_dtype
    code = _attention._DTYPE_CODES.get(dtype)
    if code is None:
        raise ValueError(f"qkv_dtype is {dtype!r}; expected torch.float16, torch.bfloat16 or torch.float8_e4m3fn")
    seqused = _index_tensor(cache_seqlens, "cache_seqlens", "(batch,)", (batch,))
    if not seqused.is_cuda:
        raise ValueError(f"cache_seqlens is on {seqused.device}; expected a CUDA tensor")
    cu_q = None if cu_seqlens_q is None else _index_tensor(cu_seqlens_q, "cu_seqlens_q", "(batch + 1,)",
                                                           (batch + 1,))
    if cu_q is not None and (not cu_q.is_cuda or cu_q.get_device() != seqused.get_device()):
        raise ValueError(f"cu_seqlens_q is on {cu_q.device}; expected cache_seqlens' device {seqused.device}")
    splits, packing = _checked_options(num_splits, pack_gqa)
    variant = _checked_variant(window_size, 30.0 if has_softcap else 0.0, None, sizes["num_heads_q"], None)
    # Shapes only: the plan reads no tensor. cache_seqlens stands for q (whose device the heuristic asks the driver
    # for) and for the index tensors whose presence selects the layout; none is dereferenced.
    present = seqused.data_ptr()
    fields = dict(dtype=code, causal=1 if causal else 0, batch=batch, num_heads=sizes["num_heads_q"],
                  num_heads_kv=sizes["num_heads_kv"], head_dim=sizes["headdim"], head_dim_v=sizes["headdim_v"],
                  q=_capi.Tensor(data=present), seqused_k=present, num_splits=splits, pack_gqa=packing,
                  window_left=variant.window_left, window_right=variant.window_right, softcap=variant.softcap,
                  quant=_capi.QUANT_PER_HEAD if code == _capi.DTYPE_E4M3 else _capi.QUANT_NONE)
    if cu_q is not None:
        fields.update(cu_seqlens_q=cu_q.data_ptr(), seqlen_q=batch * max_q, max_seqlen_q=max_q)
    else:
        fields.update(seqlen_q=max_q)
    if page_size is not None:
        _checked_length(page_size, "page_size", minimum=1)  # keys per page
        pages = max(1, -(-max_k // page_size))
        fields.update(page_table=present, page_size=page_size, max_pages=pages, page_table_stride=pages,
                      num_pages=max(1, batch) * pages, max_seqlen_k=max_k)
    else:
        fields.update(seqlen_k=max_k)
    plan = _capi.plan(_capi.ForwardParams(**fields))
    return torch.tensor([plan.num_splits, plan.pack_gqa], dtype=torch.int32)
