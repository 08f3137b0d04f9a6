"""flash_attn_func over torch tensors, through the C ABI (no build against torch; torch is imported lazily)."""

import math

from . import _capi

_TORCH_DTYPES = None  # torch dtype -> fa3jit_dtype, filled on first use


def _torch():
    try:
        import torch
    except ImportError as error:
        raise RuntimeError("fa3jit.flash_attn_func needs torch (pip install torch); the C ABI binding "
                           "(fa3jit.Runtime, fa3jit.compile_spec) does not") from error
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        table = {torch.float16: _capi.DTYPE_FP16, torch.bfloat16: _capi.DTYPE_BF16}
        if hasattr(torch, "float8_e4m3fn"):
            table[torch.float8_e4m3fn] = _capi.DTYPE_E4M3  # passed through; the library says it is unsupported
        _TORCH_DTYPES = table
    return torch


def _as_tensor(torch, x, name):
    """torch.Tensor as is; __cuda_array_interface__ and DLPack producers as zero-copy torch views."""
    if isinstance(x, torch.Tensor):
        return x
    if hasattr(x, "__cuda_array_interface__"):
        return torch.as_tensor(x, device="cuda")
    if hasattr(x, "__dlpack__"):
        return torch.from_dlpack(x)
    raise TypeError(f"{name}: expected a torch.Tensor or an object with __cuda_array_interface__ or __dlpack__; "
                    f"got {type(x).__name__}")


def _check_tensor(torch, t, name, layout, device):
    if t.dim() != 4:
        raise ValueError(f"{name} must have 4 dimensions {layout}; got shape {tuple(t.shape)}")
    if t.dtype not in _TORCH_DTYPES:
        raise ValueError(f"{name}.dtype is {t.dtype}; expected torch.float16 or torch.bfloat16")
    if t.device.type != "cuda":
        raise ValueError(f"{name} is on {t.device}; expected a CUDA tensor")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}; all tensors must be on one device")
    if t.shape[3] > 1 and t.stride(3) != 1:
        raise ValueError(f"{name}: the last dimension (head_dim) must be contiguous (stride 1); "
                         f"got strides {tuple(t.stride())}")


def _view(t):
    return _capi.Tensor(t.data_ptr(), t.stride(0), t.stride(1), t.stride(2))


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, return_lse=False, out=None):
    """Attention forward, out = softmax(softmax_scale * q k^T [+ causal mask]) v, on an NVIDIA Hopper GPU.

    Shapes (FlashAttention's layout; strides are free except that head_dim is contiguous, and every stride
    and base address must be a multiple of 16 bytes, which TMA requires):
      q   (batch, seqlen_q, num_heads,    head_dim)
      k   (batch, seqlen_k, num_heads_kv, head_dim)
      v   (batch, seqlen_k, num_heads_kv, head_dim_v)
      out (batch, seqlen_q, num_heads,    head_dim_v), dtype of q; allocated unless given
    dtype: torch.float16 or torch.bfloat16 (all of q, k, v, out alike). head_dim: 64, 128 or 256
    (head_dim_v = head_dim). GQA/MQA: num_heads must be a multiple of num_heads_kv.
    softmax_scale: None = 1/sqrt(head_dim). causal: bottom-right aligned (FlashAttention >= 2.1): query row i
    sees keys j <= i + seqlen_k - seqlen_q; a row that sees no key gets out = 0 and lse = -inf.
    Accepts torch tensors, and objects with __cuda_array_interface__ or __dlpack__ (viewed through torch).
    Runs asynchronously on torch.cuda.current_stream() of q's device. Forward only: no autograd.
    Degenerate shapes are answered here: batch or seqlen_q 0 gives empty outputs; seqlen_k 0 gives out = 0
    and lse = +inf (FlashAttention-3's convention).

    Returns out, or (out, lse) when return_lse; lse is float32 (batch, num_heads, seqlen_q), natural log of
    the sum over visible keys of exp(softmax_scale * q.k).
    Raises ValueError (fa3jit.Fa3jitValueError for what the library rejects: invalid_argument, invalid_spec,
    unsupported) for a bad argument, RuntimeError (fa3jit.Fa3jitRuntimeError) when compiling or launching
    fails, TypeError for a non-tensor argument. The library's message names the argument and what is allowed.
    """
    torch = _torch()
    q, k, v = (_as_tensor(torch, x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    _check_tensor(torch, q, "q", "(batch, seqlen_q, num_heads, head_dim)", None)
    _check_tensor(torch, k, "k", "(batch, seqlen_k, num_heads_kv, head_dim)", q.device)
    _check_tensor(torch, v, "v", "(batch, seqlen_k, num_heads_kv, head_dim_v)", q.device)
    for t, name in ((k, "k"), (v, "v")):
        if t.dtype != q.dtype:
            raise ValueError(f"{name}.dtype is {t.dtype} but q.dtype is {q.dtype}; they must match")
    batch, seqlen_q, num_heads, head_dim = q.shape
    _, seqlen_k, num_heads_kv, _ = k.shape
    head_dim_v = v.shape[3]
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(f"k has shape {tuple(k.shape)}; expected (batch={batch}, seqlen_k, num_heads_kv, "
                         f"head_dim={head_dim}) to match q {tuple(q.shape)}")
    if tuple(v.shape[:3]) != tuple(k.shape[:3]):
        raise ValueError(f"v has shape {tuple(v.shape)}; its first three dimensions must equal k's {tuple(k.shape[:3])}")
    expected_out = (batch, seqlen_q, num_heads, head_dim_v)
    if out is None:
        out = torch.empty(expected_out, dtype=q.dtype, device=q.device)
    else:
        out = _as_tensor(torch, out, "out")
        _check_tensor(torch, out, "out", "(batch, seqlen_q, num_heads, head_dim_v)", q.device)
        if tuple(out.shape) != expected_out:
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {expected_out}")
        if out.dtype != q.dtype:
            raise ValueError(f"out.dtype is {out.dtype} but q.dtype is {q.dtype}; they must match")
    if softmax_scale is None:
        scale = 0.0  # the C ABI's "1/sqrt(head_dim)"
    else:
        scale = float(softmax_scale)
        if scale == 0.0 or not math.isfinite(scale):
            raise ValueError(f"softmax_scale is {softmax_scale}; expected a finite non-zero value or None")
    lse = torch.empty((batch, num_heads, seqlen_q), dtype=torch.float32, device=q.device) if return_lse else None

    if out.numel() == 0 or seqlen_k == 0:
        out.zero_()
        if lse is not None:
            lse.fill_(math.inf)
        return (out, lse) if return_lse else out

    params = _capi.ForwardParams(
        dtype=_TORCH_DTYPES[q.dtype], causal=1 if causal else 0,
        batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, num_heads=num_heads, num_heads_kv=num_heads_kv,
        head_dim=head_dim, head_dim_v=head_dim_v,
        q=_view(q), k=_view(k), v=_view(v), out=_view(out),
        lse=lse.data_ptr() if lse is not None else None, softmax_scale=scale, spec_json=None)
    runtime = _capi.runtime()
    with torch.cuda.device(q.device):
        runtime.forward(params, torch.cuda.current_stream(q.device).cuda_stream)
    return (out, lse) if return_lse else out
