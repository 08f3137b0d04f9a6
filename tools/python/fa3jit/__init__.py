"""fa3jit: FlashAttention-3-class attention forward for NVIDIA Hopper, kernels generated and compiled at run time.

Pure Python over the C ABI (runtime/include/fa3jit/fa3jit.h) with ctypes; nothing is built against torch.

    import fa3jit
    out = fa3jit.flash_attn_func(q, k, v, causal=True)          # (batch, seqlen, heads, head_dim) tensors
    info = fa3jit.compile_spec('{"dtype": "bf16", "head_dim": 128}')   # warm the kernel cache, no GPU needed

The shared library is found at run time (fa3jit._capi explains the order): FA3JIT_LIBRARY, else
libfa3jit.so next to this package, else <source tree>/build/libfa3jit.so, else the system loader.
"""

import json as _json

from ._capi import (Fa3jitError, Fa3jitRuntimeError, Fa3jitValueError, LibraryNotFoundError, Runtime,
                    library_path, runtime, version)
from .attention import flash_attn_func

__all__ = [
    "flash_attn_func",
    "compile_spec",
    "version",
    "library_path",
    "Runtime",
    "runtime",
    "Fa3jitError",
    "Fa3jitValueError",
    "Fa3jitRuntimeError",
    "LibraryNotFoundError",
]


def compile_spec(spec):
    """Compiles (or loads from the cache) the kernel of a spec, a JSON string or a dict
    (generator/spec.h lists the fields), with the process-wide runtime. Needs no GPU.

    Returns a dict: key (cache key, hex), kernel_name, cache_hit (bool), ms (this call, milliseconds),
    registers / spill_store_bytes / spill_load_bytes (ptxas, -1 = not reported), smem_bytes (dynamic shared
    memory per block), num_threads, block_m, block_n. Raises Fa3jitValueError (a ValueError) for a bad spec
    naming the field, Fa3jitRuntimeError (a RuntimeError) when NVRTC or the cache fails.
    """
    text = spec if isinstance(spec, str) else _json.dumps(spec)
    return runtime().compile_spec(text)
