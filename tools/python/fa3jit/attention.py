"""flash_attn_func over torch tensors, through the C ABI (no build against torch; torch is imported lazily).

The call path is written for host cost: a serving loop calls it once per layer and step, so every
microsecond counts. What it does per call, and why it is enough:
  - Python checks only what the library cannot see: that the arguments are torch tensors on CUDA, the dtype
    (the library gets a dtype code, not the tensors' dtypes), that q, k, v and out agree in shape (the
    library gets one batch, seqlen and head count per role, so it cannot tell that k has fewer batches than
    q) and that the last dimension is contiguous (the C ABI has no stride for it). Alignment, strides,
    extents, head dims, head counts and devices are checked by the library, which names the argument.
  - out is allocated with one torch.empty_like (lse only when asked for).
  - The stream is read with torch._C._cuda_getCurrentRawStream, and torch.cuda.device is entered only when
    another device than q's is current (never on a one-GPU machine): the library uses the current CUDA
    context and makes q's device's primary context current when there is none.
  - The parameters are written with one struct.pack_into into a ctypes struct kept per thread (only the
    fields a call sets), and the library is called with plain ints. An e4m3 call packs into a second per-thread
    struct that also holds out_dtype, quant and the descales, so a 16-bit call never writes those fields.
  - e4m3 (FP8) calls add, on their own path only, the checks of the descale tensors (dtype, device, shape, which
    decides per_head or per_block) and of the output dtype; a 16-bit call pays four `is None` tests for the
    arguments it does not take.
  - torch.compile, torch.export and FakeTensor tracing go through the ops torch.ops.fa3jit.*
    (fa3jit/_torch_ops.py), which call this function on the real tensors. The route costs the plain call one
    call of torch.compiler.is_dynamo_compiling (a function returning False outside Dynamo, about 50 ns) and
    nothing else: the check for traceable tensor subclasses sits on the path for tensors that are not
    exactly torch.Tensor.
"""

from __future__ import annotations

import ctypes
import math
import threading
from typing import TYPE_CHECKING, Any, Optional, Tuple, Union, overload

from . import _capi

if TYPE_CHECKING:
    import torch
    from typing import Literal

    # What q, k, v and out may be: torch tensors, or objects torch views without a copy (zero-copy DLPack or
    # __cuda_array_interface__ producers such as CuPy arrays); results are always torch tensors.
    TensorLike = Any
    OutAndLse = Tuple[torch.Tensor, torch.Tensor]

# Bound by _bind_torch() on the first call; _Tensor doubles as the "bound" flag (it is set last).
_torch: Any = None
_Tensor: Any = None
_DTYPE_CODES: dict = {}       # torch dtype -> fa3jit_dtype
_contiguous_format: Any = None
_float32: Any = None
_current_stream: Any = None   # device index -> cudaStream_t of torch's current stream there, as an int
_current_device: Any = None   # () -> torch's current CUDA device; None with one GPU (no switch is ever needed)

_float8: Any = None           # torch.float8_e4m3fn, or None on a torch without it
_fp8_out_codes: dict = {}     # torch dtype -> fa3jit_dtype of the outputs an e4m3 call may write (bf16, fp16)

_runtime_handle: Optional[int] = None  # the process-wide runtime's fa3jit_runtime*, once created
_attention_forward: Any = None         # the library's fa3jit_attention_forward, bound with torch
_uint8: Any = None
_pack_params = _capi.PARAMS_CALL_STRUCT.pack_into
_pack_workspace = _capi.WORKSPACE_STRUCT.pack_into
_WORKSPACE_OFFSET = _capi.WORKSPACE_OFFSET
# A causal call's workspace: the tile counter of a persistent grid's dynamic scheduler (fa3jit_attention_workspace_size
# of a dense call that does not split; the library refuses a smaller one by name). Made per call with torch, on the
# caller's stream: memory no other call can be using, as FA3 makes its tile_count_semaphore. The library's
# attention_fwd::kTileCounterBytes (tests/python/test_capi.py compares them).
_CAUSAL_WORKSPACE_BYTES = 16
_pack_fp8_params = _capi.PARAMS_FP8_CALL_STRUCT.pack_into
_PARAMS_OFFSET = _capi.PARAMS_CALL_OFFSET
_E4M3 = _capi.DTYPE_E4M3
_FLOAT32_MAX = 3.4028234663852886e38
# Per thread: .params and .fp8_params = (ForwardParams, its address), one struct for 16-bit calls and one for
# e4m3 calls.
_local = threading.local()
_ones: dict = {}                       # torch.device -> a float32 tensor [1.0]: the descale of a missing one
_ones_lock = threading.Lock()
# (head_dim, head_dim_v, causal) -> (block_m, block_n) of the tile table's e4m3 kernel (per-block descale shapes).
_default_blocks: dict = {}


def _not_compiling() -> bool:
    return False


# Set by fa3jit._torch_ops.register() when torch is importable: torch.compiler.is_dynamo_compiling (False in
# eager mode, folded to True by Dynamo while it traces), the op route, and the traceable-subclass test.
_dynamo_compiling: Any = _not_compiling
_ops_call: Any = None
_ops_route: Any = None


def _bind_torch() -> None:
    global _torch, _Tensor, _DTYPE_CODES, _contiguous_format, _float32, _current_stream, _current_device
    global _attention_forward, _float8, _fp8_out_codes, _uint8
    try:
        import torch
    except ImportError as error:
        raise RuntimeError("fa3jit.flash_attn_func needs torch (pip install torch); the C ABI binding "
                           "(fa3jit.Runtime, fa3jit.compile_spec) does not") from error
    codes = {torch.float16: _capi.DTYPE_FP16, torch.bfloat16: _capi.DTYPE_BF16}
    float8 = getattr(torch, "float8_e4m3fn", None)
    if float8 is not None:
        codes[float8] = _capi.DTYPE_E4M3
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw_stream is None:  # older torch: the public (slower) way
        def raw_stream(index: int) -> int:
            return torch.cuda.current_stream(index).cuda_stream
    current_device = None
    if torch.cuda.device_count() > 1:
        current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
    _torch, _DTYPE_CODES, _contiguous_format, _float32 = torch, codes, torch.contiguous_format, torch.float32
    _current_stream, _current_device = raw_stream, current_device
    _float8, _fp8_out_codes = float8, {torch.bfloat16: _capi.DTYPE_BF16, torch.float16: _capi.DTYPE_FP16}
    _attention_forward = _capi.library().fa3jit_attention_forward  # raises LibraryNotFoundError
    _Tensor = torch.Tensor
    _uint8 = torch.uint8


def _bind_runtime() -> int:
    global _runtime_handle
    _runtime_handle = _capi.runtime().handle
    return _runtime_handle


def _thread_params() -> Tuple[_capi.ForwardParams, int]:
    # struct_size and out_dtype (DEFAULT) are set here, once; num_splits stays 1 and pack_gqa 0 (ForwardParams()'s
    # defaults, as fa3jit_forward_params_init), so no call of flash_attn_func splits the keys (the serving functions
    # of fa3jit.serving choose that); the workspace is packed on each call (a causal call's tile counter); quant stays
    # NONE and the descales NULL (e4m3 calls use _thread_fp8_params), and every other field is packed on each
    # call.
    params = _capi.ForwardParams()
    entry = (params, ctypes.addressof(params))
    _local.params = entry
    return entry


def _thread_fp8_params() -> Tuple[_capi.ForwardParams, int]:
    # Every field from dtype to v_descale is packed on each e4m3 call; struct_size is set here, and the serving
    # fields keep ForwardParams()'s defaults (no split, no packing).
    params = _capi.ForwardParams()
    entry = (params, ctypes.addressof(params))
    _local.fp8_params = entry
    return entry


def _thread_fp8_vt_params() -> Tuple[_capi.ForwardParams, int]:
    # The same for the calls of a d_major kernel: v_layout D_MAJOR is set here, once.
    params = _capi.ForwardParams(v_layout=_capi.V_LAYOUT_D_MAJOR)
    entry = (params, ctypes.addressof(params))
    _local.fp8_vt_params = entry
    return entry


# ---- slow paths: conversions and error messages, out of the hot function --------------------------------

def _as_tensor(x: Any, name: str) -> Any:
    """torch.Tensor (or a subclass) as is; __cuda_array_interface__ and DLPack producers as zero-copy views."""
    if isinstance(x, _Tensor):
        return x
    if hasattr(x, "__cuda_array_interface__"):
        return _torch.as_tensor(x, device="cuda")
    if hasattr(x, "__dlpack__"):
        return _torch.from_dlpack(x)
    raise TypeError(f"{name}: expected a torch.Tensor or an object with __cuda_array_interface__ or __dlpack__; "
                    f"got {type(x).__name__}")


def _allowed_dtypes() -> str:
    return "torch.float16, torch.bfloat16" + (" or torch.float8_e4m3fn" if _float8 is not None else "")


def _dtype_error(q: Any, k: Any, v: Any) -> ValueError:
    if q.dtype not in _DTYPE_CODES:
        return ValueError(f"q.dtype is {q.dtype}; expected {_allowed_dtypes()}")
    for t, name in ((k, "k"), (v, "v")):
        if t.dtype is not q.dtype:
            return ValueError(f"{name}.dtype is {t.dtype} but q.dtype is {q.dtype}; q, k and v must have one dtype "
                              f"(an e4m3 call takes float8_e4m3fn q, k and v, with fp32 descales)")
    return ValueError("dtype check failed")  # not reached


def _not_fp8_error(q_descale: Any, k_descale: Any, v_descale: Any, out_dtype: Any, dtype: Any) -> None:
    """Raises for the e4m3-only arguments of a 16-bit call (out_dtype equal to q's dtype is allowed)."""
    for t, name in ((q_descale, "q_descale"), (k_descale, "k_descale"), (v_descale, "v_descale")):
        if t is not None:
            raise ValueError(f"{name} is given but q.dtype is {dtype}; descales belong to torch.float8_e4m3fn "
                             f"inputs only")
    if out_dtype is not None and out_dtype is not dtype:
        raise ValueError(f"out_dtype is {out_dtype} but q.dtype is {dtype}; a {dtype} call writes out in q's dtype "
                         f"(out_dtype None or {dtype})")


def _device_error(**tensors: Any) -> ValueError:
    for name, t in tensors.items():
        if not t.is_cuda:
            return ValueError(f"{name} is on {t.device}; expected a CUDA tensor")
    return ValueError("device check failed")  # not reached


_LAYOUTS = {"q": "(batch, seqlen_q, num_heads, head_dim)", "k": "(batch, seqlen_k, num_heads_kv, head_dim)",
            "v": "(batch, seqlen_k, num_heads_kv, head_dim_v)", "out": "(batch, seqlen_q, num_heads, head_dim_v)"}


_V_D_MAJOR_LAYOUT = "(batch, num_heads_kv, head_dim_v, seqlen_k rounded up to 16) (the kernel's v_layout is d_major)"


def _rank_error(v_d_major: bool = False, **tensors: Any) -> ValueError:
    for name, t in tensors.items():
        if t.dim() != 4:
            layout = _V_D_MAJOR_LAYOUT if name == "v" and v_d_major else _LAYOUTS[name]
            return ValueError(f"{name} must have 4 dimensions {layout}; got shape {tuple(t.shape)}")
    return ValueError("rank check failed")  # not reached


def _check_last_dim(**tensors: Any) -> None:
    """Raises unless every tensor's last dimension is contiguous; a size-1 dimension's stride never matters."""
    for name, t in tensors.items():
        if t.shape[3] > 1 and t.stride(3) != 1:
            raise ValueError(f"{name}: the last dimension (head_dim) must be contiguous (stride 1); "
                             f"got strides {tuple(t.stride())}")


def _checked_scale(softmax_scale: Any) -> float:
    scale = float(softmax_scale)
    if scale == 0.0 or not math.isfinite(scale) or abs(scale) > _FLOAT32_MAX:
        raise ValueError(f"softmax_scale is {softmax_scale}; expected a finite non-zero float32 value or None")
    return scale


def _checked_out(out: Any, q: Any, shape: Tuple[int, int, int, int], out_dtype: Any) -> Any:
    if not isinstance(out, _Tensor):
        out = _as_tensor(out, "out")
    if not out.is_cuda:
        raise ValueError(f"out is on {out.device}; expected a CUDA tensor")
    if out.shape != shape:
        raise ValueError(f"out has shape {tuple(out.shape)}; expected {shape}")
    if out.dtype is not out_dtype:
        if q.dtype is _float8:
            raise ValueError(f"out.dtype is {out.dtype} but the call writes {out_dtype} (out_dtype, default "
                             f"torch.bfloat16 for float8_e4m3fn inputs; torch.bfloat16 or torch.float16 allowed)")
        raise ValueError(f"out.dtype is {out.dtype} but q.dtype is {q.dtype}; they must match")
    return out


def _fp8_out_dtype(out_dtype: Any, out: Any) -> Tuple[Any, int]:
    """(torch dtype, fa3jit_dtype code) of an e4m3 call's output: out_dtype, else out's dtype when out is given,
    else bfloat16 (FlashAttention-3's output dtype for FP8)."""
    if out_dtype is None:
        out_dtype = getattr(out, "dtype", None) if out is not None else _torch.bfloat16
        if out_dtype not in _fp8_out_codes:
            raise ValueError(f"out.dtype is {out_dtype}; an e4m3 call writes torch.bfloat16 or torch.float16")
    code = _fp8_out_codes.get(out_dtype)
    if code is None:
        raise ValueError(f"out_dtype is {out_dtype}; an e4m3 call writes torch.bfloat16 (the default) or "
                         f"torch.float16")
    return out_dtype, code


def _ones_on(device: Any) -> Any:
    """A float32 tensor [1.0] on `device`, made once per device: the descale of a missing one (FlashAttention-3
    reads a missing descale as 1). Made on the first e4m3 call without descales on the device, so do that call
    once before capturing a CUDA graph."""
    ones = _ones.get(device)  # a CUDA tensor's device always has its index
    if ones is None:
        with _ones_lock:
            ones = _ones.get(device)
            if ones is None:
                ones = _ones[device] = _torch.ones(1, dtype=_float32, device=device)
    return ones


def _quant_blocks(head_dim: int, causal: bool, kernel: Any, head_dim_v: Optional[int] = None) -> Tuple[int, int]:
    """(block_m, block_n) of the kernel an e4m3 call runs, cached: `kernel`'s tile, else the tile table's for
    (head_dim, head_dim_v, causal) (fa3jit_attention_quant_blocks for head_dim_v = head_dim, fa3jit_attention_plan
    for other pairs, whose tile differs)."""
    if kernel is not None:
        _kernel_handles(kernel)  # TypeError / ValueError for what is not a live fa3jit.Kernel
        blocks = getattr(kernel, "_quant_blocks", None)
        if blocks is None:
            blocks = kernel._quant_blocks = _capi.quant_blocks(head_dim, causal, kernel)
        return blocks
    if head_dim_v is None:
        head_dim_v = head_dim
    key = (head_dim, head_dim_v, causal)
    blocks = _default_blocks.get(key)
    if blocks is None:
        if head_dim_v == head_dim:
            blocks = _capi.quant_blocks(head_dim, causal)
        else:
            # A per_block call of these head dims, no split: the plan's tile is its descale blocks (never a tuned one,
            # and independent of the lengths: per_block calls take no decode tile).
            rows = 1024
            params = _capi.ForwardParams(dtype=_E4M3, quant=_capi.QUANT_PER_BLOCK, causal=1 if causal else 0, batch=1,
                                         seqlen_q=rows, seqlen_k=rows, num_heads=1, num_heads_kv=1, head_dim=head_dim,
                                         head_dim_v=head_dim_v)
            plan = _capi.plan(params)
            blocks = (plan.block_m, plan.block_n)
        _default_blocks[key] = blocks
    return blocks


_PER_HEAD_SHAPE = "(batch, num_heads_kv) or one element (per tensor)"
_PER_BLOCK_SHAPES = {"q_descale": "(batch, num_heads, ceil(seqlen_q / block_m))",
                     "k_descale": "(batch, num_heads_kv, ceil(seqlen_k / block_n))",
                     "v_descale": "(batch, num_heads_kv, head_dim_v)"}


def _descale_fields(q: Any, descales: Tuple[Any, Any, Any], batch: int, num_heads: int, num_heads_kv: int,
                    seqlen_q: int, seqlen_k: int, head_dim: int, head_dim_v: int, causal: bool,
                    kernel: Any) -> Tuple[int, ...]:
    """quant and the three fa3jit_scale (pointer, stride_batch, stride_head) of an e4m3 call, in
    PARAMS_FP8_CALL_STRUCT's order. The descales' shapes decide the quant: 3-dimensional tensors are per_block,
    (batch, num_heads_kv) or one-element tensors (0-d, (1,), (1, 1)) per_head; None is a descale of 1 (per_head).
    Raises TypeError for a non-tensor, ValueError naming the argument for a wrong dtype, device or shape."""
    names = ("q_descale", "k_descale", "v_descale")
    device = q.device
    per_block = False
    for t, name in zip(descales, names):
        if t is None:
            continue
        if not isinstance(t, _Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor (float32, on q's device) or None; got {type(t).__name__}")
        if t.dtype is not _float32:
            raise ValueError(f"{name}.dtype is {t.dtype}; expected torch.float32 (shape {tuple(t.shape)}, "
                             f"device {t.device})")
        if t.device != device:
            raise ValueError(f"{name} is on {t.device}; expected q's device {device} (shape {tuple(t.shape)})")
        if t.dim() == 3:
            per_block = True
        elif t.dim() > 3 or (t.dim() in (0, 1) and t.numel() != 1):
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected per_head {_PER_HEAD_SHAPE} or per_block "
                             f"{_PER_BLOCK_SHAPES[name]}")
    fields = [_capi.QUANT_PER_BLOCK if per_block else _capi.QUANT_PER_HEAD]
    if per_block:
        block_m, block_n = _quant_blocks(head_dim, bool(causal) and seqlen_q > 1, kernel, head_dim_v)
        expected = {"q_descale": (batch, num_heads, -(-seqlen_q // block_m)),
                    "k_descale": (batch, num_heads_kv, -(-seqlen_k // block_n)),
                    "v_descale": (batch, num_heads_kv, head_dim_v)}
        for t, name in zip(descales, names):
            shape = expected[name]
            if t is None or tuple(t.shape) != shape:
                got = "None" if t is None else f"shape {tuple(t.shape)}"
                raise ValueError(f"{name} is {got}; per_block descales (a 3-dimensional descale was given) need all "
                                 f"three, {name} of shape {_PER_BLOCK_SHAPES[name]} = {shape} with block_m "
                                 f"{block_m}, block_n {block_n} (fa3jit.fp8_quant_blocks); per_head descales are "
                                 f"{_PER_HEAD_SHAPE}")
            if shape[2] > 1 and t.stride(2) != 1:
                raise ValueError(f"{name}: the last dimension must be contiguous (stride 1); got strides "
                                 f"{tuple(t.stride())}")
            fields += (t.data_ptr(), t.stride(0), t.stride(1))
        return tuple(fields)
    for t, name in zip(descales, names):
        if t is None:
            fields += (_ones_on(device).data_ptr(), 0, 0)
        elif t.numel() == 1 and t.dim() <= 2:
            fields += (t.data_ptr(), 0, 0)  # one scale broadcast to every (batch, head)
        elif tuple(t.shape) == (batch, num_heads_kv):
            fields += (t.data_ptr(), t.stride(0), t.stride(1))
        else:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected per_head {_PER_HEAD_SHAPE} = "
                             f"({batch}, {num_heads_kv}), or per_block {_PER_BLOCK_SHAPES[name]}")
    return tuple(fields)


def _kernel_handles(kernel: Any) -> Tuple[int, int]:
    if not isinstance(kernel, _capi.Kernel):
        raise TypeError(f"kernel: expected an fa3jit.Kernel or None; got {type(kernel).__name__}")
    handles = kernel._handles
    if handles is None:
        raise ValueError("kernel: this fa3jit.Kernel is closed")
    return handles


def _degenerate(out: Any, lse: Any, return_lse: bool) -> Any:
    # FlashAttention-3's convention: no key at all gives out = 0 and lse = +inf; empty outputs stay empty.
    out.zero_()
    if lse is not None:
        lse.fill_(math.inf)
    return (out, lse) if return_lse else out


def _forward_on_device(device: int, *args: Any) -> int:
    with _torch.cuda.device(device):
        return _attention_forward(*args)


# ---- the call -------------------------------------------------------------------------------------------

@overload
def flash_attn_func(q: TensorLike, k: TensorLike, v: TensorLike, softmax_scale: Optional[float] = None,
                    causal: bool = False, return_lse: Literal[False] = False, out: Optional[TensorLike] = None,
                    kernel: Optional[_capi.Kernel] = None, q_descale: Optional[TensorLike] = None,
                    k_descale: Optional[TensorLike] = None, v_descale: Optional[TensorLike] = None,
                    out_dtype: Optional[torch.dtype] = None) -> torch.Tensor: ...


@overload
def flash_attn_func(q: TensorLike, k: TensorLike, v: TensorLike, softmax_scale: Optional[float] = None,
                    causal: bool = False, *, return_lse: Literal[True], out: Optional[TensorLike] = None,
                    kernel: Optional[_capi.Kernel] = None, q_descale: Optional[TensorLike] = None,
                    k_descale: Optional[TensorLike] = None, v_descale: Optional[TensorLike] = None,
                    out_dtype: Optional[torch.dtype] = None) -> OutAndLse: ...


@overload
def flash_attn_func(q: TensorLike, k: TensorLike, v: TensorLike, softmax_scale: Optional[float],
                    causal: bool, return_lse: Literal[True], out: Optional[TensorLike] = None,
                    kernel: Optional[_capi.Kernel] = None, q_descale: Optional[TensorLike] = None,
                    k_descale: Optional[TensorLike] = None, v_descale: Optional[TensorLike] = None,
                    out_dtype: Optional[torch.dtype] = None) -> OutAndLse: ...


@overload
def flash_attn_func(q: TensorLike, k: TensorLike, v: TensorLike, softmax_scale: Optional[float] = None,
                    causal: bool = False, return_lse: bool = False, out: Optional[TensorLike] = None,
                    kernel: Optional[_capi.Kernel] = None, q_descale: Optional[TensorLike] = None,
                    k_descale: Optional[TensorLike] = None, v_descale: Optional[TensorLike] = None,
                    out_dtype: Optional[torch.dtype] = None) -> Union[torch.Tensor, OutAndLse]: ...


def flash_attn_func(q: TensorLike, k: TensorLike, v: TensorLike, softmax_scale: Optional[float] = None,
                    causal: bool = False, return_lse: bool = False, out: Optional[TensorLike] = None,
                    kernel: Optional[_capi.Kernel] = None, q_descale: Optional[TensorLike] = None,
                    k_descale: Optional[TensorLike] = None, v_descale: Optional[TensorLike] = None,
                    out_dtype: Optional[torch.dtype] = None) -> Union[torch.Tensor, OutAndLse]:
    """Attention forward, out = softmax(softmax_scale * q k^T [+ causal mask]) v, on an NVIDIA Hopper GPU.

    Shapes (FlashAttention's layout; strides are free except that head_dim is contiguous, and every stride
    and base address must be a multiple of 16 bytes, which TMA requires):
      q   (batch, seqlen_q, num_heads,    head_dim)
      k   (batch, seqlen_k, num_heads_kv, head_dim)
      v   (batch, seqlen_k, num_heads_kv, head_dim_v)
      out (batch, seqlen_q, num_heads,    head_dim_v), dtype out_dtype; allocated contiguous unless given
    dtype: torch.float16 or torch.bfloat16 (q, k, v and out alike), or torch.float8_e4m3fn (FP8) q, k, v
    (below); head_dim and head_dim_v each a multiple of 8 up to 256 (of 16 for e4m3), e.g. 192 / 128
    (fa3jit.capabilities() lists what the build generates). GQA/MQA: num_heads must be a multiple of
    num_heads_kv. softmax_scale: None = 1/sqrt(head_dim). causal: bottom-right aligned (FlashAttention >= 2.1):
    query row i sees keys j <= i + seqlen_k - seqlen_q; a row that sees no key gets out = 0 and lse = -inf.
    kernel: an fa3jit.Kernel whose spec agrees with the call (dtype, out_dtype, quant, head dims, causal), or
    None for the tile table's kernel of the call's class (compiled or loaded on the first call of the class).
    Accepts torch tensors, and objects with __cuda_array_interface__ or __dlpack__ (viewed through torch).
    Runs asynchronously on torch's current stream of q's device. Forward only: no autograd.
    Degenerate shapes are answered here: batch or seqlen_q 0 gives empty outputs; seqlen_k 0 gives out = 0
    and lse = +inf (FlashAttention-3's convention).

    FP8 (FlashAttention-3's arguments): q, k, v torch.float8_e4m3fn; the real inputs are q * q_descale,
    k * k_descale, v * v_descale, and softmax_scale applies on top. out_dtype: torch.bfloat16 (default, as
    FlashAttention-3) or torch.float16; with out given and out_dtype None, out's dtype. Descales are float32
    tensors on q's device, any strides (expand()ed stride-0 views too); their shapes choose the quantisation
    (spec field "quant", kernels/attention_fwd/spec.h):
      per_head : each of q_descale, k_descale, v_descale (batch, num_heads_kv) (FlashAttention-3's contract:
                 q's descale is per kv head), or one element (0-d, (1,), (1, 1)) broadcast as a per-tensor scale;
                 None = 1, as FlashAttention-3 reads a missing descale;
      per_block: all three 3-dimensional: q_descale (batch, num_heads, ceil(seqlen_q / block_m)), k_descale
                 (batch, num_heads_kv, ceil(seqlen_k / block_n)), v_descale (batch, num_heads_kv, head_dim_v),
                 last dimension contiguous; block_m, block_n from fa3jit.fp8_quant_blocks(head_dim, causal)
                 (or the kernel's spec).
    A missing descale makes a one-element tensor of ones on the first such call on a device (kept for the
    process): make that call once before capturing a CUDA graph. 16-bit calls take no descales and out_dtype
    None or q's dtype.

    Returns out, or (out, lse) when return_lse; lse is float32 (batch, num_heads, seqlen_q), contiguous,
    natural log of the sum over visible keys of exp(softmax_scale * q.k) (dequantised q, k for FP8).
    Raises ValueError (fa3jit.Fa3jitValueError for what the library rejects: invalid_argument, invalid_spec,
    unsupported) for a bad argument or a closed kernel, RuntimeError (fa3jit.Fa3jitRuntimeError) when
    compiling or launching fails, TypeError for a non-tensor argument or a kernel that is not an fa3jit.Kernel.
    The message names the argument, its shape, dtype or device, and what is allowed.

    Under torch.compile (fullgraph=True works), torch.export and FakeTensor tracing the call is recorded as the
    op torch.ops.fa3jit.flash_attn_func (torch.ops.fa3jit.flash_attn_func_out with out=), whose fake
    implementation gives the output shapes and dtypes; the compiled graph runs this same call and can be
    captured in a CUDA graph once its kernel is loaded (after a first call of the shape class).
    """
    if _dynamo_compiling():
        return _ops_call(q, k, v, softmax_scale, causal, return_lse, out, kernel, q_descale, k_descale, v_descale,
                         out_dtype)
    if _Tensor is None:
        _bind_torch()
    Tensor = _Tensor
    if type(q) is not Tensor or type(k) is not Tensor or type(v) is not Tensor:
        if _ops_route is not None and _ops_route(q, k, v):  # FakeTensor, FunctionalTensor: record the op
            return _ops_call(q, k, v, softmax_scale, causal, return_lse, out, kernel, q_descale, k_descale,
                             v_descale, out_dtype)
        q, k, v = _as_tensor(q, "q"), _as_tensor(k, "k"), _as_tensor(v, "v")
    dtype = q.dtype
    dtype_code = _DTYPE_CODES.get(dtype)
    if dtype_code is None or k.dtype is not dtype or v.dtype is not dtype:
        raise _dtype_error(q, k, v)
    fp8 = dtype_code == _E4M3
    if fp8:
        if out is not None and type(out) is not Tensor:
            out = _as_tensor(out, "out")
        out_dtype, out_dtype_code = _fp8_out_dtype(out_dtype, out)
    else:
        if q_descale is not None or k_descale is not None or v_descale is not None or out_dtype is not None:
            _not_fp8_error(q_descale, k_descale, v_descale, out_dtype, dtype)
        out_dtype = dtype
    if not (q.is_cuda and k.is_cuda and v.is_cuda):
        raise _device_error(q=q, k=k, v=v)
    # A d_major kernel (spec field v_layout) takes v transposed: (batch, num_heads_kv, head_dim_v, seqlen_k rounded
    # up to 16), as fa3jit.v_to_d_major writes it.
    v_d_major = kernel is not None and getattr(kernel, "_v_d_major", False) is True
    try:
        batch, seqlen_q, num_heads, head_dim = q.shape
        batch_k, seqlen_k, num_heads_kv, head_dim_k = k.shape
        if v_d_major:
            batch_v, num_heads_v, head_dim_v, keys_v = v.shape
        else:
            batch_v, seqlen_v, num_heads_v, head_dim_v = v.shape
    except ValueError:  # not 4 values to unpack
        raise _rank_error(v_d_major, q=q, k=k, v=v) from None
    if batch_k != batch or head_dim_k != head_dim:
        raise ValueError(f"k has shape {tuple(k.shape)}; expected (batch={batch}, seqlen_k, num_heads_kv, "
                         f"head_dim={head_dim}) to match q {tuple(q.shape)}")
    if v_d_major:
        if batch_v != batch or num_heads_v != num_heads_kv or keys_v != _capi.d_major_keys(seqlen_k):
            raise ValueError(f"v has shape {tuple(v.shape)}; the kernel's v_layout is d_major, which expects "
                             f"(batch={batch}, num_heads_kv={num_heads_kv}, head_dim_v, seqlen_k={seqlen_k} rounded "
                             f"up to 16 = {_capi.d_major_keys(seqlen_k)}) (fa3jit.v_to_d_major)")
    elif batch_v != batch_k or seqlen_v != seqlen_k or num_heads_v != num_heads_kv:
        raise ValueError(f"v has shape {tuple(v.shape)}; its first three dimensions must equal k's "
                         f"{tuple(k.shape[:3])}")
    q_sb, q_ss, q_sh, q_sd = q.stride()
    k_sb, k_ss, k_sh, k_sd = k.stride()
    if v_d_major:  # the C ABI's stride_seq of a d_major v is the stride between channels
        v_sb, v_sh, v_ss, v_sd = v.stride()
    else:
        v_sb, v_ss, v_sh, v_sd = v.stride()
    if q_sd != 1 or k_sd != 1 or v_sd != 1:
        _check_last_dim(q=q, k=k, v=v)
    scale = 0.0 if softmax_scale is None else _checked_scale(softmax_scale)  # 0 = the C ABI's 1/sqrt(head_dim)
    if fp8:  # before any output is made: a bad descale allocates nothing
        scale_fields = _descale_fields(q, (q_descale, k_descale, v_descale), batch, num_heads, num_heads_kv,
                                       seqlen_q, seqlen_k, head_dim, head_dim_v, causal, kernel)

    if out is None:
        # Contiguous, so its strides are known without asking torch; empty_like is the cheapest allocation
        # (no shape, dtype or device to parse) and is right whenever out has q's shape and dtype.
        if head_dim_v == head_dim and not fp8:
            out = _torch.empty_like(q, memory_format=_contiguous_format)
        else:
            out = q.new_empty((batch, seqlen_q, num_heads, head_dim_v), dtype=out_dtype)
        o_sh = head_dim_v
        o_ss = num_heads * head_dim_v
        o_sb = seqlen_q * o_ss
    else:
        expected = (batch, seqlen_q, num_heads, head_dim_v)
        if type(out) is not Tensor or out.dtype is not out_dtype or not out.is_cuda or out.shape != expected:
            out = _checked_out(out, q, expected, out_dtype)  # converts a foreign array, or raises naming the fault
        o_sb, o_ss, o_sh, o_sd = out.stride()
        if o_sd != 1:
            _check_last_dim(out=out)
    if return_lse:
        lse = _torch.empty((batch, num_heads, seqlen_q), dtype=_float32, device=q.device)
        lse_ptr = lse.data_ptr()
    else:
        lse, lse_ptr = None, 0
    if seqlen_k == 0 or batch * seqlen_q * num_heads * head_dim_v == 0:
        # Nothing to compute, but shapes no call with data could run (a head dim without a kernel, num_heads not a
        # multiple of num_heads_kv, ...) are still errors: the library's rules on the same shapes, each empty extent
        # taken as 1 (fa3jit_attention_plan; num_splits 1, so no driver is asked).
        _capi.plan(_capi.ForwardParams(dtype=dtype_code, quant=scale_fields[0] if fp8 else _capi.QUANT_NONE,
                                       causal=1 if causal else 0, batch=max(batch, 1), seqlen_q=max(seqlen_q, 1),
                                       seqlen_k=max(seqlen_k, 1), num_heads=num_heads or num_heads_kv,
                                       num_heads_kv=num_heads_kv, head_dim=head_dim, head_dim_v=head_dim_v,
                                       v_layout=_capi.V_LAYOUT_D_MAJOR if v_d_major else _capi.V_LAYOUT_SEQ_MAJOR),
                   kernel)
        return _degenerate(out, lse, return_lse)

    if kernel is None:
        runtime_handle = _runtime_handle or _bind_runtime()
        kernel_handle = None
    else:
        runtime_handle, kernel_handle = _kernel_handles(kernel)
    if fp8:
        try:
            params, address = _local.fp8_vt_params if v_d_major else _local.fp8_params
        except AttributeError:
            params, address = _thread_fp8_vt_params() if v_d_major else _thread_fp8_params()
        _pack_fp8_params(params, _PARAMS_OFFSET, dtype_code, 1 if causal else 0,
                         batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, head_dim_v,
                         q.data_ptr(), q_sb, q_ss, q_sh,
                         k.data_ptr(), k_sb, k_ss, k_sh,
                         v.data_ptr(), v_sb, v_ss, v_sh,
                         out.data_ptr(), o_sb, o_ss, o_sh,
                         lse_ptr, scale, 0, 0, out_dtype_code, *scale_fields)
    else:
        try:
            params, address = _local.params
        except AttributeError:
            params, address = _thread_params()
        _pack_params(params, _PARAMS_OFFSET, dtype_code, 1 if causal else 0,
                     batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, head_dim_v,
                     q.data_ptr(), q_sb, q_ss, q_sh,
                     k.data_ptr(), k_sb, k_ss, k_sh,
                     v.data_ptr(), v_sb, v_ss, v_sh,
                     out.data_ptr(), o_sb, o_ss, o_sh,
                     lse_ptr, scale)
    if causal:  # held until the call returns: the caching allocator keeps it for this stream's work
        workspace = q.new_empty((_CAUSAL_WORKSPACE_BYTES,), dtype=_uint8)
        _pack_workspace(params, _WORKSPACE_OFFSET, workspace.data_ptr(), _CAUSAL_WORKSPACE_BYTES)
    else:
        _pack_workspace(params, _WORKSPACE_OFFSET, 0, 0)
    device = q.get_device()
    stream = _current_stream(device)
    if _current_device is not None and _current_device() != device:
        status = _forward_on_device(device, runtime_handle, kernel_handle, address, stream)
    else:
        status = _attention_forward(runtime_handle, kernel_handle, address, stream)
    if status:
        raise _capi.error_for(status, "fa3jit_attention_forward")
    return (out, lse) if return_lse else out


def fp8_quant_blocks(head_dim: int, causal: bool = False, kernel: Optional[_capi.Kernel] = None,
                     head_dim_v: Optional[int] = None) -> Tuple[int, int]:
    """(block_m, block_n) of per-block e4m3 descales: q_descale holds one value per block_m query rows
    (batch, num_heads, ceil(seqlen_q / block_m)), k_descale one per block_n key rows (batch, num_heads_kv,
    ceil(seqlen_k / block_n)). For `kernel` when given (its spec's tile), else for the tile table's e4m3 kernel
    of (head_dim, head_dim_v, causal), the one flash_attn_func runs (kernels/attention_fwd/tile_table.cpp, e.g.
    128 x 160 at head_dim 128; read through fa3jit_attention_quant_blocks, or fa3jit_attention_plan when head_dim_v
    differs from head_dim, so the numbers are never copied here). head_dim_v None = head_dim. A causal call with
    seqlen_q = 1 runs the non-causal kernel: use causal=False for it.
    Needs no GPU and no torch. Raises fa3jit.Fa3jitValueError for head dims that e4m3 does not support,
    ValueError for a closed kernel, TypeError for a kernel that is not an fa3jit.Kernel."""
    if kernel is not None and not isinstance(kernel, _capi.Kernel):
        raise TypeError(f"kernel: expected an fa3jit.Kernel or None; got {type(kernel).__name__}")
    if kernel is not None:
        return _capi.quant_blocks(head_dim, causal, kernel)
    return _quant_blocks(int(head_dim), bool(causal), None, None if head_dim_v is None else int(head_dim_v))
