"""FP8 attention from 16-bit inputs: the pre-pass fa3jit_quantize_fp8 (C ABI) over torch tensors, and the
pre-pass followed by the e4m3 attention forward in one call.

Method (FlashAttention-3 paper, arXiv 2407.08608, §3.3; kernels/quantize_fp8/spec.h): optional RoPE on q and k,
then the Hadamard rotation x -> H.D.x / sqrt(head_dim) of every head vector of q and k (H the Sylvester
Walsh-Hadamard matrix, D the +-1 diagonal of `seed`; q and k share it, so q k^T is unchanged while outliers
spread over all coordinates), then block quantisation to e4m3 with descale = amax / 448 per block (1 for an
all-zero block): per block of block_m query rows and of block_n key rows of one head, per channel of v.

Outputs are allocated with torch (its caching allocator) on q's device; the kernels run on torch's current
stream of that device; nothing synchronises. Not a hot path like flash_attn_func: one ctypes struct per call.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple, Union

from . import _capi
from . import attention as _attention

if TYPE_CHECKING:
    import torch

_UINT64_LIMIT = 1 << 64
_QUANTS = ("per_block",)
_V_LAYOUTS = ("seq_major", "d_major")
_INPUT_DTYPES = "torch.float16 or torch.bfloat16"
_LAYOUTS = {"q": "(batch, seqlen_q, num_heads, head_dim)", "k": "(batch, seqlen_k, num_heads_kv, head_dim)",
            "v": "(batch, seqlen_k, num_heads_kv, head_dim_v)"}


def _bound() -> Any:
    if _attention._Tensor is None:
        _attention._bind_torch()
    return _attention._torch


def _as_tensor(x: Any, name: str) -> Any:
    if isinstance(x, _attention._Tensor):
        return x
    return _attention._as_tensor(x, name)  # zero-copy views of array producers, else TypeError naming `name`


def _input_codes(torch: Any) -> dict:
    return {torch.float16: _capi.DTYPE_FP16, torch.bfloat16: _capi.DTYPE_BF16}


def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, int)) or value not in (0, 1):
        raise TypeError(f"{name}: expected a bool; got {value!r} ({type(value).__name__})")
    return bool(value)


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int in [0, 2**64); got {type(seed).__name__}")
    if not 0 <= seed < _UINT64_LIMIT:
        raise ValueError(f"seed is {seed}; expected an int in [0, 2**64) (the Hadamard sign diagonal's seed)")
    return seed


def _check_block(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int (a multiple of 16 in [16, 256]) or None; got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} is {value}; expected a multiple of 16 in [16, 256], the attention kernel's tile "
                         f"(None = fa3jit.fp8_quant_blocks(head_dim))")
    # Above int32 ctypes would pass the library the low bits (a plausible block size) while the descales are sized
    # by the value given; the library checks the rest of the rule (its field: fa3jit_quantize_params.q_block_rows).
    _capi.check_int(name, value, ctypes.c_int32)
    return value


def _checked_inputs(q: Any, k: Any, v: Any) -> Tuple[Any, Any, Any, int, Tuple[int, ...]]:
    """q, k, v as tensors, their dtype code and (batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim,
    head_dim_v). Raises TypeError for a non-tensor, ValueError naming the argument for a dtype or shape fault."""
    torch = _bound()
    q, k, v = _as_tensor(q, "q"), _as_tensor(k, "k"), _as_tensor(v, "v")
    codes = _input_codes(torch)
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if t.dtype not in codes:
            hint = ""
            if t.dtype is _attention._float8:
                hint = ("; e4m3 tensors are already quantised: pass them with their descales to "
                        "fa3jit.flash_attn_func")
            raise ValueError(f"{name}.dtype is {t.dtype} (shape {tuple(t.shape)}); quantize_fp8 takes "
                             f"{_INPUT_DTYPES} q, k and v{hint}")
    for t, name in ((k, "k"), (v, "v")):
        if t.dtype is not q.dtype:
            raise ValueError(f"{name}.dtype is {t.dtype} but q.dtype is {q.dtype}; q, k and v must have one dtype "
                             f"({_INPUT_DTYPES})")
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dimensions {_LAYOUTS[name]}; got shape {tuple(t.shape)}")
    batch, seqlen_q, num_heads, head_dim = q.shape
    batch_k, seqlen_k, num_heads_kv, head_dim_k = k.shape
    batch_v, seqlen_v, num_heads_v, head_dim_v = v.shape
    if batch_k != batch or head_dim_k != head_dim:
        raise ValueError(f"k has shape {tuple(k.shape)}; expected (batch={batch}, seqlen_k, num_heads_kv, "
                         f"head_dim={head_dim}) to match q {tuple(q.shape)}")
    if batch_v != batch_k or seqlen_v != seqlen_k or num_heads_v != num_heads_kv:
        raise ValueError(f"v has shape {tuple(v.shape)}; its first three dimensions must equal k's "
                         f"{tuple(k.shape[:3])}")
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if t.shape[3] > 1 and t.stride(3) != 1:
            raise ValueError(f"{name}: the last dimension (head_dim) must be contiguous (stride 1); got strides "
                             f"{tuple(t.stride())}")
    sizes = (batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, head_dim_v)
    return q, k, v, codes[q.dtype], sizes


def _checked_rope(rope: Any, seqlen_q: int, seqlen_k: int, head_dim: int) -> Optional[Tuple[Any, Any]]:
    """The (cos, sin) tables, checked: fp32, 2-dimensional (rows, rotary_dim / 2), equal shapes, rows >=
    max(seqlen_q, seqlen_k), rotary_dim <= head_dim, contiguous. None without RoPE."""
    if rope is None:
        return None
    if isinstance(rope, _attention._Tensor) or not isinstance(rope, (tuple, list)) or len(rope) != 2:
        raise TypeError(f"rope: expected None or a (cos, sin) pair of float32 tensors of shape (seqlen, "
                        f"rotary_dim / 2); got {type(rope).__name__}")
    cos, sin = _as_tensor(rope[0], "rope[0] (cos)"), _as_tensor(rope[1], "rope[1] (sin)")
    rows_needed = max(seqlen_q, seqlen_k)
    for t, name in ((cos, "rope[0] (cos)"), (sin, "rope[1] (sin)")):
        if t.dtype is not _attention._float32:
            raise ValueError(f"{name}.dtype is {t.dtype} (shape {tuple(t.shape)}); expected torch.float32")
        if t.dim() != 2:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected 2 dimensions (seqlen, rotary_dim / 2) "
                             f"with seqlen >= max(seqlen_q, seqlen_k) = {rows_needed}")
    if cos.shape != sin.shape:
        raise ValueError(f"rope: cos has shape {tuple(cos.shape)} but sin {tuple(sin.shape)}; expected one shape "
                         f"(seqlen, rotary_dim / 2)")
    rows, half = cos.shape
    if rows < rows_needed:
        raise ValueError(f"rope tables have shape {tuple(cos.shape)}: {rows} rows, fewer than max(seqlen_q, "
                         f"seqlen_k) = {rows_needed} (row s is token s)")
    if half < 1 or 2 * half > head_dim:
        raise ValueError(f"rope tables have shape {tuple(cos.shape)}: rotary_dim = 2 x {half} = {2 * half}; "
                         f"expected rotary_dim in [8, head_dim = {head_dim}] (interleaved: a multiple of 8; "
                         f"neox: a power of two >= 16)")
    for t, name in ((cos, "rope[0] (cos)"), (sin, "rope[1] (sin)")):
        if not t.is_contiguous():
            raise ValueError(f"{name} has strides {tuple(t.stride())}; expected a contiguous tensor "
                             f"(call .contiguous())")
    return cos, sin


def _check_devices(**tensors: Any) -> Any:
    """q's device, after checking that every tensor is a CUDA tensor on it."""
    device = None
    for name, t in tensors.items():
        if not t.is_cuda:
            raise ValueError(f"{name} is on {t.device} (shape {tuple(t.shape)}); expected a CUDA tensor")
        if device is None:
            device = t.device
        elif t.device != device:
            raise ValueError(f"{name} is on {t.device}; expected q's device {device} (all tensors on one GPU)")
    return device


def _tensor(t: Any) -> _capi.Tensor:
    stride_batch, stride_seq, stride_head, _ = t.stride()
    return _capi.Tensor(t.data_ptr(), stride_batch, stride_seq, stride_head)


def _tensor_d_major(t: Any) -> _capi.Tensor:
    """A (batch, num_heads_kv, head_dim_v, keys) d_major tensor as the C ABI's view: stride_seq between channels."""
    sb, sh, sc, _ = t.stride()
    return _capi.Tensor(data=t.data_ptr(), stride_batch=sb, stride_seq=sc, stride_head=sh)


def quantize_fp8(q: Any, k: Any, v: Any, hadamard: bool = True, seed: int = 0,
                 rope: Optional[Sequence[Any]] = None, quant: str = "per_block", block_m: Optional[int] = None,
                 block_n: Optional[int] = None, rotary_interleaved: bool = False,
                 v_layout: str = "seq_major") -> Tuple[Any, ...]:
    """FP8 pre-pass: 16-bit q, k, v -> e4m3 q8, k8, v8 and their per-block float32 descales, the inputs of an
    FP8 `fa3jit.flash_attn_func(q8, k8, v8, q_descale=..., k_descale=..., v_descale=...)`.

    Inputs (FlashAttention's layout; torch.float16 or torch.bfloat16, one dtype, CUDA tensors on one device;
    head_dim contiguous, other strides free but multiples of 16 bytes, base 16-byte aligned):
      q (batch, seqlen_q, num_heads, head_dim), k (batch, seqlen_k, num_heads_kv, head_dim),
      v (batch, seqlen_k, num_heads_kv, head_dim_v); head_dim and head_dim_v 64, 128 or 256.
    Method (FlashAttention-3 paper §3.3): with rope, RoPE on q and k (token s at position s); with hadamard, every
      head vector x of q and k becomes H.D.x / sqrt(head_dim) (H Walsh-Hadamard, D the +-1 diagonal of `seed`,
      kernels/quantize_fp8/params.h: hadamard_sign), which keeps q k^T and spreads outliers; v is not rotated.
      Then descale = amax / 448 of each block (1 for an all-zero block) and stored = e4m3(x / descale),
      round-to-nearest-even, saturating: the real value is stored * descale.
    rope: None, or (cos, sin), float32 tensors of shape (seqlen, rotary_dim / 2) on q's device, contiguous, with
      seqlen >= max(seqlen_q, seqlen_k); row s rotates token s. rotary_interleaved: False pairs (i, i +
      rotary_dim / 2) (rotate halves; rotary_dim a power of two >= 16), True pairs (2i, 2i + 1) (rotary_dim a
      multiple of 8), as FlashAttention's apply_rotary_emb.
    seed: an int in [0, 2**64) choosing D. quant: "per_block", the only layout the pre-pass writes.
    block_m, block_n: query rows per q_descale entry and key rows per k_descale entry, multiples of 16 in
      [16, 256]; None = fa3jit.fp8_quant_blocks(head_dim, head_dim_v=v's) (non-causal), the tile of the e4m3 kernel
      flash_attn_func runs. A causal call (seqlen_q > 1) or a pinned kernel may have another tile: pass
      fa3jit.fp8_quant_blocks(head_dim, causal, kernel) (fa3jit.flash_attn_fp8_func does).

    v_layout: "seq_major" (v8 of v's shape) or "d_major": v8 written transposed, (batch, num_heads_kv, head_dim_v,
      seqlen_k rounded up to 16), as fa3jit.v_to_d_major lays it out, for an e4m3 kernel with "v_layout":
      "d_major", which then skips its V transpose.

    Returns (q8, k8, v8, q_descale, k_descale, v_descale): q8, k8, v8 torch.float8_e4m3fn, contiguous, of q's,
    k's, v's shapes (q8, k8 rotated when hadamard; v8 transposed with v_layout "d_major"); q_descale float32 (batch, num_heads, ceil(seqlen_q /
    block_m)), k_descale float32 (batch, num_heads_kv, ceil(seqlen_k / block_n)), v_descale float32 (batch,
    num_heads_kv, head_dim_v), all contiguous: flash_attn_func's per_block descales.
    Allocates with torch on q's device and launches three kernels on torch's current stream; no
    synchronisation. Forward only: no autograd.
    Raises TypeError for a non-tensor argument, a rope that is not a pair, or non-int seed/block sizes;
    ValueError naming the argument, its shape, dtype or device and what is allowed for float8 (or other) inputs,
    mismatched dtypes, shapes or devices, a zero size, bad rope tables, a quant other than "per_block";
    fa3jit.Fa3jitValueError for what the library refuses (block sizes, rotary_dim, strides, alignment, head
    dims), fa3jit.Fa3jitRuntimeError when compiling or launching fails.
    """
    if quant not in _QUANTS:
        raise ValueError(f"quant is {quant!r}; the pre-pass writes only \"per_block\" descales (one per block_m "
                         f"query rows, block_n key rows and v channel)")
    if v_layout not in _V_LAYOUTS:
        raise ValueError(f"v_layout is {v_layout!r}; expected one of {', '.join(map(repr, _V_LAYOUTS))}")
    hadamard = _check_flag(hadamard, "hadamard")
    rotary_interleaved = _check_flag(rotary_interleaved, "rotary_interleaved")
    seed = _check_seed(seed)
    q, k, v, dtype_code, sizes = _checked_inputs(q, k, v)
    batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, head_dim_v = sizes
    if min(batch, seqlen_q, seqlen_k, num_heads, num_heads_kv) < 1:
        raise ValueError(f"q has shape {tuple(q.shape)} and k {tuple(k.shape)}; batch, seqlen_q, seqlen_k, "
                         f"num_heads and num_heads_kv must be >= 1 (there is nothing to quantise)")
    tables = _checked_rope(rope, seqlen_q, seqlen_k, head_dim)
    if block_m is None or block_n is None:
        default_m, default_n = _attention._quant_blocks(head_dim, False, None, head_dim_v)
        block_m = default_m if block_m is None else block_m
        block_n = default_n if block_n is None else block_n
    block_m, block_n = _check_block(block_m, "block_m"), _check_block(block_n, "block_n")
    devices = dict(q=q, k=k, v=v)
    if tables is not None:
        devices.update({"rope[0] (cos)": tables[0], "rope[1] (sin)": tables[1]})
    device = _check_devices(**devices)

    torch = _attention._torch
    float32, float8 = _attention._float32, _attention._float8
    q8 = torch.empty(q.shape, dtype=float8, device=device)
    k8 = torch.empty(k.shape, dtype=float8, device=device)
    d_major = v_layout == "d_major"
    v8_shape = (batch, num_heads_kv, head_dim_v, _capi.d_major_keys(seqlen_k)) if d_major else v.shape
    v8 = torch.empty(v8_shape, dtype=float8, device=device)
    q_descale = torch.empty((batch, num_heads, -(-seqlen_q // block_m)), dtype=float32, device=device)
    k_descale = torch.empty((batch, num_heads_kv, -(-seqlen_k // block_n)), dtype=float32, device=device)
    v_descale = torch.empty((batch, num_heads_kv, head_dim_v), dtype=float32, device=device)

    params = _capi.QuantizeParams(
        dtype=dtype_code, hadamard=1 if hadamard else 0,
        batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, num_heads=num_heads, num_heads_kv=num_heads_kv,
        head_dim=head_dim, head_dim_v=head_dim_v,
        q=_tensor(q), k=_tensor(k), v=_tensor(v), q8=_tensor(q8), k8=_tensor(k8),
        v8=_tensor_d_major(v8) if d_major else _tensor(v8),
        v_layout=_capi.V_LAYOUT_D_MAJOR if d_major else _capi.V_LAYOUT_SEQ_MAJOR,
        q_descale=q_descale.data_ptr(), k_descale=k_descale.data_ptr(), v_descale=v_descale.data_ptr(),
        q_block_rows=block_m, k_block_rows=block_n, seed=seed)
    if tables is not None:
        params.rope = _capi.ROPE_INTERLEAVED if rotary_interleaved else _capi.ROPE_NEOX
        params.rotary_dim = 2 * tables[0].shape[1]
        params.rope_cos, params.rope_sin = tables[0].data_ptr(), tables[1].data_ptr()
        params.rope_max_seqlen = tables[0].shape[0]
    runtime_handle = _attention._runtime_handle or _attention._bind_runtime()
    index = q.get_device()
    stream = _attention._current_stream(index)
    function = _capi.library().fa3jit_quantize_fp8
    if _attention._current_device is not None and _attention._current_device() != index:
        with torch.cuda.device(index):
            status = function(runtime_handle, ctypes.addressof(params), stream or None)
    else:
        status = function(runtime_handle, ctypes.addressof(params), stream or None)
    if status:
        raise _capi.error_for(status, "fa3jit_quantize_fp8")
    return q8, k8, v8, q_descale, k_descale, v_descale


def flash_attn_fp8_func(q: Any, k: Any, v: Any, softmax_scale: Optional[float] = None, causal: bool = False,
                        hadamard: bool = True, seed: int = 0, rope: Optional[Sequence[Any]] = None,
                        return_lse: bool = False, out: Optional[Any] = None,
                        v_layout: str = "d_major") -> Union[Any, Tuple[Any, Any]]:
    """FP8 attention of 16-bit inputs: quantize_fp8 (per-block descales with the tile of the e4m3 kernel that
    runs, fa3jit.fp8_quant_blocks(head_dim, causal)) then fa3jit.flash_attn_func on the e4m3 tensors, both on
    torch's current stream, no synchronisation. The FlashAttention-3 recipe (paper §3.3): the Hadamard rotation
    spreads outliers before block quantisation; q k^T is unchanged by it.

    q (batch, seqlen_q, num_heads, head_dim), k (batch, seqlen_k, num_heads_kv, head_dim), v (batch, seqlen_k,
    num_heads_kv, head_dim_v), torch.float16 or torch.bfloat16, one dtype, CUDA tensors on one device (GQA/MQA:
    num_heads a multiple of num_heads_kv; head_dim_v = head_dim, 64, 128 or 256). softmax_scale: None =
    1 / sqrt(head_dim). causal: bottom-right aligned, as flash_attn_func. hadamard, seed, rope: as quantize_fp8
    (with rope the attention is over the rotated-position q and k).
    out: None, or a (batch, seqlen_q, num_heads, head_dim_v) tensor of q's dtype on q's device.
    v_layout: "d_major" (default): the pre-pass writes V transposed and the e4m3 kernel with spec field v_layout
    "d_major" reads it without a V transpose (a call with seqlen_q <= 64 runs the tile table's decode kernel with V
    as it is instead); "seq_major": the tile table's kernel, which transposes V in shared memory. The d_major kernel
    has its own tile (d128 128x192, d256 128x128: bench/NOTES.md), and the descales are quantised with its blocks.

    Returns out in q's dtype (the e4m3 kernel's out_dtype), or (out, lse) when return_lse: lse float32 (batch,
    num_heads, seqlen_q), natural log of the sum of exp(softmax_scale * q.k) over visible keys (q, k as
    dequantised). Degenerate shapes as flash_attn_func: batch or seqlen_q 0 gives empty outputs, seqlen_k 0 gives
    out = 0 and lse = +inf. Raises what quantize_fp8 and flash_attn_func raise (TypeError, ValueError naming the
    argument, fa3jit.Fa3jitValueError, fa3jit.Fa3jitRuntimeError).
    """
    q, k, v, _, sizes = _checked_inputs(q, k, v)
    batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, head_dim_v = sizes
    causal = _check_flag(causal, "causal")
    if v_layout not in _V_LAYOUTS:
        raise ValueError(f"v_layout is {v_layout!r}; expected one of {', '.join(map(repr, _V_LAYOUTS))}")
    if min(batch, seqlen_q, seqlen_k, num_heads, num_heads_kv) < 1:
        # Nothing to quantise; flash_attn_func's answer for these shapes, computed on the 16-bit tensors.
        return _attention.flash_attn_func(q, k, v, softmax_scale, causal, return_lse, out)
    # A decode-shaped call (seqlen_q <= 64) takes the tile table's own kernel choice (the decode tile), which a
    # pinned d_major kernel would bypass.
    d_major = v_layout == "d_major" and seqlen_q > 64
    v_layout = "d_major" if d_major else "seq_major"
    kernel = _d_major_kernel(head_dim, head_dim_v, causal, q.dtype) if d_major else None
    block_m, block_n = _attention._quant_blocks(head_dim, causal and seqlen_q > 1, kernel, head_dim_v)
    q8, k8, v8, q_descale, k_descale, v_descale = quantize_fp8(q, k, v, hadamard=hadamard, seed=seed, rope=rope,
                                                               block_m=block_m, block_n=block_n, v_layout=v_layout)
    return _attention.flash_attn_func(q8, k8, v8, softmax_scale, causal, return_lse, out, kernel,
                                      q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                                      out_dtype=q.dtype)


_d_major_kernels: dict = {}  # (head_dim, head_dim_v, causal, out dtype) -> the process runtime's d_major Kernel


def _d_major_kernel(head_dim: int, head_dim_v: int, causal: bool, out_dtype: Any) -> _capi.Kernel:
    """The e4m3 per_block kernel with v_layout d_major for a class, its tile from the tile table (spec.h: the
    fields left out: the d_major rows, tile_table.h variant_tile), made once per process; flash_attn_fp8_func quantises
    with this kernel's blocks."""
    key = (head_dim, head_dim_v, causal, out_dtype)
    kernel = _d_major_kernels.get(key)
    if kernel is None:
        out_name = "bf16" if out_dtype == _attention._torch.bfloat16 else "fp16"
        kernel = _d_major_kernels[key] = _capi.Kernel({"dtype": "e4m3", "head_dim": head_dim, "head_dim_v": head_dim_v,
                                                       "causal": causal, "quant": "per_block", "out_dtype": out_name,
                                                       "v_layout": "d_major"})
    return kernel


_key_order: Any = None  # v_to_d_major's source key of each position (a list, from fa3jit_fp8_key_positions)
_key_order_tensors: dict = {}  # device -> that list as an int64 tensor, made once per device (no copy per call)


def v_to_d_major(v: Any) -> "torch.Tensor":
    """V transposed for an e4m3 kernel whose spec has "v_layout": "d_major" (FA3's layout has no such option;
    kernels/attention_fwd/launch.h: ForwardArgs::v): from v (batch, seqlen_k, num_heads_kv, head_dim_v) to a new
    contiguous tensor (batch, num_heads_kv, head_dim_v, seqlen_k rounded up to 16) of v's dtype and device, keys
    contiguous, key 16 g + j of every row at 16 g + fa3jit_fp8_key_positions()[j] (the order in which the kernel
    packs its probabilities for the FP8 tensor cores), zeros past seqlen_k. Such a kernel then loads V by TMA
    without transposing it in shared memory. Usually made once per KV tensor (it is a copy of V).

    Pass the result to flash_attn_func(q8, k8, v_t, kernel=fa3jit.Kernel({... "v_layout": "d_major"})).
    Raises ValueError for a tensor that is not 4-dimensional, TypeError for a non-tensor."""
    global _key_order
    torch = _bound()
    v = _as_tensor(v, "v")
    if v.dim() != 4:
        raise ValueError(f"v has shape {tuple(v.shape)}; expected {_LAYOUTS['v']}")
    batch, seqlen_k, num_heads_kv, head_dim_v = v.shape
    keys = _capi.d_major_keys(seqlen_k)
    if _key_order is None:
        positions = _capi.fp8_key_positions()
        inverse = [0] * 16
        for j, position in enumerate(positions):
            inverse[position] = j  # position p holds key inverse[p]
        _key_order = inverse
    order = _key_order_tensors.get(v.device)
    if order is None:
        order = _key_order_tensors[v.device] = torch.tensor(_key_order, dtype=torch.int64, device=v.device)
    raw = v.view(torch.uint8) if v.element_size() == 1 else v
    natural = raw.new_zeros((batch, num_heads_kv, head_dim_v, keys))
    natural[..., :seqlen_k] = raw.permute(0, 2, 3, 1)
    grouped = natural.view(batch, num_heads_kv, head_dim_v, keys // 16, 16).index_select(4, order)
    return grouped.reshape(batch, num_heads_kv, head_dim_v, keys).view(v.dtype)
