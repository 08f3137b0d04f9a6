"""fa3jit: FlashAttention-3-class attention forward for NVIDIA Hopper, kernels generated and compiled at run time.

Pure Python over the C ABI, version 2 (runtime/include/fa3jit/fa3jit.h), with ctypes; nothing is built
against torch.

    import fa3jit
    out = fa3jit.flash_attn_func(q, k, v, causal=True)          # (batch, seqlen, heads, head_dim) tensors
    info = fa3jit.compile_spec('{"dtype": "bf16", "head_dim": 128}')   # warm the kernel cache, no GPU needed
    fa3jit.capabilities()["families"]["attention_fwd"]["dtypes"]      # ["fp16", "bf16", "e4m3"]
    k128 = fa3jit.Kernel({"dtype": "bf16", "head_dim": 128, "tile": {"block_n": 128}})   # a pinned spec
    out = fa3jit.flash_attn_func(q, k, v, kernel=k128)
    out = fa3jit.flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)  # float8_e4m3fn, bf16 out
    fa3jit.fp8_quant_blocks(128)                                 # (block_m, block_n) of per-block descales
    q8, k8, v8, qd, kd, vd = fa3jit.quantize_fp8(q, k, v)          # 16-bit -> e4m3 + per-block descales (FA3 §3.3)
    out = fa3jit.flash_attn_fp8_func(q, k, v, causal=True)      # the pre-pass, then the e4m3 kernel; out in q's dtype
    out = fa3jit.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)  # packed
    out = fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, page_table)  # decode, paged cache

The shared library is found at run time (fa3jit._capi explains the order): libfa3jit.so next to this package
(a wheel bundles it there), else FA3JIT_LIBRARY, else <source tree>/build/libfa3jit.so, else the system loader.

With torch installed, importing fa3jit also registers the custom ops torch.ops.fa3jit.flash_attn_func and
torch.ops.fa3jit.flash_attn_func_out (fa3jit/_torch_ops.py), which torch.compile and torch.export record;
without torch the package imports all the same and everything but flash_attn_func works.
"""

import threading
from typing import Any, Dict, Union

from . import _torch_ops
from ._capi import (ABI_VERSION, Fa3jitError, Fa3jitRuntimeError, Fa3jitValueError, Kernel, LibraryNotFoundError,
                    Runtime, Spec, capabilities, library_path, runtime, version)
from .attention import flash_attn_func, fp8_quant_blocks
from .fp8 import flash_attn_fp8_func, quantize_fp8, v_to_d_major
from .serving import flash_attn_varlen_func, flash_attn_with_kvcache, get_scheduler_metadata

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "get_scheduler_metadata",
    "fp8_quant_blocks",
    "quantize_fp8",
    "flash_attn_fp8_func",
    "v_to_d_major",
    "Kernel",
    "compile_spec",
    "warm_manifest",
    "capabilities",
    "version",
    "library_path",
    "Runtime",
    "runtime",
    "ABI_VERSION",
    "Fa3jitError",
    "Fa3jitValueError",
    "Fa3jitRuntimeError",
    "LibraryNotFoundError",
]


def compile_spec(spec: Spec) -> Dict[str, Any]:
    """Compiles (or loads from the cache) the kernel of a spec, a JSON string or a dict
    (kernels/attention_fwd/spec.h lists the fields), with the process-wide runtime. Needs no GPU.

    Returns a dict: key (cache key, hex), kernel_name, kind (the family, "attention_fwd"), summary (dtype,
    head_dim, mask and tile in one line), cache_hit (bool), ms (this call, milliseconds), registers /
    spill_store_bytes / spill_load_bytes (ptxas, -1 = not reported), smem_bytes (dynamic shared memory per
    block), num_threads. Raises Fa3jitValueError (a ValueError) for a bad spec naming the field,
    Fa3jitRuntimeError (a RuntimeError) when NVRTC or the cache fails, TypeError for neither str nor dict.
    """
    return runtime().compile_spec(spec)


def warm_manifest(manifest: Spec, background: bool = False) -> Union[int, threading.Thread]:
    """Compiles the kernels of a serving manifest before traffic, with the process-wide runtime. Needs no GPU.

    manifest: JSON text or a dict, {"kind": "serving_manifest", "models": [{"dtype": "bf16", "head_dim": 128,
    "num_heads": 32, "num_heads_kv": 8, "causal": True, "kv": ["paged"], "page_sizes": [16],
    "decode_queries": [1]}]} (kernels/attention_fwd/manifest.h lists every field: head_dim_v, window_size,
    softcap, sinks, "packed" / "dense" K/V). The prefill and decode calls of each model are resolved to the
    kernels the runtime will pick for them (with and without split-KV) and compiled into the cubin cache, on half
    the hardware threads (1 to 8; processes sharing the cache directory compile each kernel once between them).
    background=False: blocks and returns how many kernels were compiled (not cached yet). background=True: returns
    a started daemon threading.Thread at once; calls made meanwhile run as usual, and one that needs a kernel being
    compiled waits for it rather than compiling it twice. Raises Fa3jitValueError for a bad manifest (naming the
    field), Fa3jitRuntimeError when NVRTC or the cache fails (in the thread with background=True: join it and
    read its `error` attribute, None on success).
    """
    if not background:
        return runtime().warm_manifest(manifest)
    text = _capi.spec_text(manifest)

    def work() -> None:
        try:
            thread.compiled = runtime().warm_manifest(text)  # type: ignore[attr-defined]
        except Exception as error:  # surfaced through the thread's attribute
            thread.error = error  # type: ignore[attr-defined]

    thread = threading.Thread(target=work, name="fa3jit-warm", daemon=True)
    thread.error = None  # type: ignore[attr-defined]
    thread.compiled = 0  # type: ignore[attr-defined]
    thread.start()
    return thread


_torch_ops.register()  # torch.ops.fa3jit.*, when torch imports; records why not in _torch_ops.UNAVAILABLE_REASON
