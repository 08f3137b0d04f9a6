"""torch.library ops of fa3jit: torch.ops.fa3jit.flash_attn_func and torch.ops.fa3jit.flash_attn_func_out.

Registered from Python when `import fa3jit` finds torch (nothing is built against torch; without torch the
package imports and this module registers nothing), with torch.library's Library.define / Library.impl /
register_fake. The ops are what torch.compile, torch.export, FakeTensor and functionalisation see: each has a
fake (meta) implementation giving the output shapes, strides and dtypes without touching data, so a graph
holding fa3jit attention compiles with `fullgraph=True` and can be captured in a CUDA graph. Both carry
torch.Tag.pt2_compliant_tag; the out= op is functionalised by torch (auto_functionalized) like any op whose
schema marks its mutated argument.

Routing. fa3jit.flash_attn_func stays the eager fast path (a ctypes call, no dispatcher): it goes through these
ops only
  - while Dynamo traces it (torch.compiler.is_dynamo_compiling(), a plain `return False` function in eager
    mode that Dynamo folds to True while tracing: about 50 ns per eager call), and
  - when q, k or v is a tensor subclass with its own __torch_dispatch__ (FakeTensor, FunctionalTensor: make_fx,
    non-strict torch.export, torch.func.functionalize), a check made only on the path that already handles
    tensors that are not exactly torch.Tensor, so it costs the plain call nothing.
The ops' real implementation calls fa3jit.flash_attn_func on the real tensors, so eager and compiled calls run
the same kernel with the same checks and errors. A call through an op costs more host time than the plain
call (the dispatcher's argument conversion and one Python kernel; bench/host_cost.py has the row); under a CUDA
graph (torch.compile mode="reduce-overhead", or a captured graph) that cost is not paid at replay.

Schemas (SCHEMA_PLAIN, SCHEMA_OUT; defaults as in flash_attn_func):
  fa3jit::flash_attn_func(Tensor q, Tensor k, Tensor v, float? softmax_scale=None, bool causal=False,
                          bool return_lse=False, str? kernel_spec=None, Tensor? q_descale=None,
                          Tensor? k_descale=None, Tensor? v_descale=None, ScalarType? out_dtype=None)
                          -> (Tensor, Tensor)                                                   # out, lse
  fa3jit::flash_attn_func_out(Tensor q, Tensor k, Tensor v, Tensor(a!) out, float? softmax_scale=None,
                              bool causal=False, bool return_lse=False, str? kernel_spec=None,
                              Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None,
                              ScalarType? out_dtype=None) -> Tensor                              # lse
The descales and out_dtype are the FP8 arguments of flash_attn_func (float8_e4m3fn q, k, v); the fake
implementation gives out the dtype the real call writes (out_dtype, else bfloat16 for float8_e4m3fn inputs,
else q's dtype). lse is float32 (batch, num_heads, seqlen_q) when return_lse, else an empty float32 tensor of
shape (0,) (an op returns a fixed number of tensors). kernel_spec is the JSON spec of an fa3jit.Kernel: an op argument can
only be a tensor, a number, a bool or a string, so a Kernel passed to flash_attn_func under torch.compile
travels as its spec, and the op runs a Kernel of that spec made once on the process-wide runtime.

Autograd: forward only, as in eager mode (where the outputs of the ctypes call carry no autograd history):
the ops' Autograd kernel runs them below autograd, so their outputs never require grad, a training-mode graph
compiles, and no gradient flows through attention, exactly as without torch.compile.
"""

from __future__ import annotations

import json
import threading
import warnings
from typing import Any, Dict, Optional, Tuple

from . import _capi
from . import attention as _attention

NAMESPACE = "fa3jit"
REGISTERED = False                       # True once the ops exist in torch.ops.fa3jit
UNAVAILABLE_REASON: Optional[str] = None  # why they do not (torch missing or failing to import)

_torch: Any = None
_op_plain: Any = None                    # torch.ops.fa3jit.flash_attn_func.default
_op_out: Any = None                      # torch.ops.fa3jit.flash_attn_func_out.default
_base_dispatch: Any = None               # torch.Tensor.__torch_dispatch__ (disabled: a plain tensor's)
_library: Any = None                     # the torch.library.Library holding the registrations
_spec_kernels: Dict[str, _capi.Kernel] = {}
_spec_kernels_lock = threading.Lock()


def _kernel_for_spec(spec: str) -> _capi.Kernel:
    """The process runtime's Kernel of a spec, made on first use (loading it needs the CUDA driver)."""
    kernel = _spec_kernels.get(spec)
    if kernel is None:
        with _spec_kernels_lock:
            kernel = _spec_kernels.get(spec)
            if kernel is None:
                kernel = _spec_kernels[spec] = _capi.Kernel(spec)
    return kernel


def kernel_spec(kernel: Any) -> Optional[str]:
    """The spec a Kernel travels as through the ops (None for None). Raises TypeError for a non-Kernel,
    ValueError for a closed one, as flash_attn_func does."""
    if kernel is None:
        return None
    if not isinstance(kernel, _capi.Kernel):
        raise TypeError(f"kernel: expected an fa3jit.Kernel or None; got {type(kernel).__name__}")
    if kernel._handles is None:
        raise ValueError("kernel: this fa3jit.Kernel is closed")
    return kernel.spec


def call(q: Any, k: Any, v: Any, softmax_scale: Optional[float], causal: bool, return_lse: bool, out: Any,
         kernel: Any, q_descale: Any = None, k_descale: Any = None, v_descale: Any = None,
         out_dtype: Any = None) -> Any:
    """flash_attn_func through the custom ops (what Dynamo and FakeTensor tracing record); same arguments,
    results and errors as fa3jit.flash_attn_func."""
    spec = kernel_spec(kernel)
    if softmax_scale is not None:
        softmax_scale = float(softmax_scale)
    if out is None:
        out, lse = _op_plain(q, k, v, softmax_scale, bool(causal), bool(return_lse), spec, q_descale, k_descale,
                             v_descale, out_dtype)
    else:
        lse = _op_out(q, k, v, out, softmax_scale, bool(causal), bool(return_lse), spec, q_descale, k_descale,
                      v_descale, out_dtype)
    return (out, lse) if return_lse else out


def routes_subclass(q: Any, k: Any, v: Any) -> bool:
    """True when a tensor among q, k, v is a subclass that dispatches itself (FakeTensor, FunctionalTensor,
    other wrapper subclasses): such a call must go through the op. nn.Parameter and other subclasses without
    their own __torch_dispatch__ hold real data and take the plain path."""
    if not REGISTERED:
        return False
    tensor = _torch.Tensor
    for t in (q, k, v):
        if isinstance(t, tensor) and type(t).__torch_dispatch__ is not _base_dispatch:
            return True
    return False


# ---- op bodies ------------------------------------------------------------------------------------------

def _empty_lse(q: Any) -> Any:
    return q.new_empty((0,), dtype=_torch.float32)


def _real_plain(q: Any, k: Any, v: Any, softmax_scale: Optional[float] = None, causal: bool = False,
                return_lse: bool = False, kernel_spec: Optional[str] = None, q_descale: Any = None,
                k_descale: Any = None, v_descale: Any = None, out_dtype: Any = None) -> Tuple[Any, Any]:
    flash_attn_func = _attention.flash_attn_func
    kernel = None if kernel_spec is None else _kernel_for_spec(kernel_spec)
    if return_lse:
        return flash_attn_func(q, k, v, softmax_scale, causal, True, None, kernel, q_descale, k_descale, v_descale,
                               out_dtype)
    return (flash_attn_func(q, k, v, softmax_scale, causal, False, None, kernel, q_descale, k_descale, v_descale,
                            out_dtype), _empty_lse(q))


def _real_out(q: Any, k: Any, v: Any, out: Any, softmax_scale: Optional[float] = None, causal: bool = False,
              return_lse: bool = False, kernel_spec: Optional[str] = None, q_descale: Any = None,
              k_descale: Any = None, v_descale: Any = None, out_dtype: Any = None) -> Any:
    flash_attn_func = _attention.flash_attn_func
    kernel = None if kernel_spec is None else _kernel_for_spec(kernel_spec)
    if return_lse:
        return flash_attn_func(q, k, v, softmax_scale, causal, True, out, kernel, q_descale, k_descale, v_descale,
                               out_dtype)[1]
    flash_attn_func(q, k, v, softmax_scale, causal, False, out, kernel, q_descale, k_descale, v_descale, out_dtype)
    return _empty_lse(q)


def _out_dtype(q: Any, out_dtype: Any, out: Any = None) -> Any:
    """The dtype the real call writes out in, with flash_attn_func's checks and messages (ValueError)."""
    torch = _torch
    float8 = getattr(torch, "float8_e4m3fn", None)
    if float8 is None or q.dtype != float8:
        if out_dtype is not None and out_dtype != q.dtype:
            raise ValueError(f"out_dtype is {out_dtype} but q.dtype is {q.dtype}; a {q.dtype} call writes out in "
                             f"q's dtype (out_dtype None or {q.dtype})")
        if out is not None and out.dtype != q.dtype:
            raise ValueError(f"out.dtype is {out.dtype} but q.dtype is {q.dtype}; they must match")
        return q.dtype
    allowed = (torch.bfloat16, torch.float16)
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else torch.bfloat16
        if out_dtype not in allowed:
            raise ValueError(f"out.dtype is {out_dtype}; an e4m3 call writes torch.bfloat16 or torch.float16")
    if out_dtype not in allowed:
        raise ValueError(f"out_dtype is {out_dtype}; an e4m3 call writes torch.bfloat16 (the default) or "
                         f"torch.float16")
    if out is not None and out.dtype != out_dtype:
        raise ValueError(f"out.dtype is {out.dtype} but the call writes {out_dtype} (out_dtype, default "
                         f"torch.bfloat16 for float8_e4m3fn inputs; torch.bfloat16 or torch.float16 allowed)")
    return out_dtype


def _check_meta_descales(q: Any, descales: Tuple[Any, Any, Any]) -> None:
    """flash_attn_func's descale checks that need no sizes: e4m3 only, float32, 0 to 3 dimensions, all
    3-dimensional (per_block) or none. Shapes against the call's sizes and block sizes are the real call's."""
    names = ("q_descale", "k_descale", "v_descale")
    given = [(t, name) for t, name in zip(descales, names) if t is not None]
    if not given:
        return
    if q.dtype != getattr(_torch, "float8_e4m3fn", None):
        raise ValueError(f"{given[0][1]} is given but q.dtype is {q.dtype}; descales belong to "
                         f"torch.float8_e4m3fn inputs only")
    for t, name in given:
        if t.dtype != _torch.float32:
            raise ValueError(f"{name}.dtype is {t.dtype}; expected torch.float32 (shape {tuple(t.shape)}, "
                             f"device {t.device})")
        if t.dim() > 3:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected per_head (batch, num_heads_kv) or "
                             f"per_block (3 dimensions)")
    if any(t.dim() == 3 for t, _ in given) and (len(given) < 3 or any(t.dim() != 3 for t, _ in given)):
        shapes = ", ".join(f"{name} {'None' if t is None else tuple(t.shape)}" for t, name in zip(descales, names))
        raise ValueError(f"per_block descales (a 3-dimensional descale was given) need all three 3-dimensional; "
                         f"got {shapes}")


def _v_d_major(kernel_spec: Optional[str]) -> bool:
    """Whether the kernel a call travels with reads v transposed (spec field v_layout, fa3jit.v_to_d_major):
    v is then (batch, num_heads_kv, head_dim_v, seqlen_k rounded up to 16)."""
    return kernel_spec is not None and json.loads(kernel_spec).get("v_layout") == "d_major"


def _head_dim_v(v: Any, kernel_spec: Optional[str]) -> Any:
    return v.shape[2] if _v_d_major(kernel_spec) else v.shape[3]


def _check_meta(q: Any, k: Any, v: Any, out: Any = None, descales: Tuple[Any, Any, Any] = (None, None, None),
                out_dtype: Any = None, kernel_spec: Optional[str] = None) -> Any:
    """The checks flash_attn_func makes in Python, on metadata only, so that a traced call fails at trace time
    with the eager message (ValueError); returns the output dtype. The device is not checked here: the real
    call checks it (a CPU kernel registered for tests runs the traced graph on the CPU)."""
    torch = _torch
    float8 = getattr(torch, "float8_e4m3fn", None)
    if q.dtype not in (torch.float16, torch.bfloat16) and (float8 is None or q.dtype != float8):
        raise ValueError(f"q.dtype is {q.dtype}; expected torch.float16, torch.bfloat16"
                         f"{' or torch.float8_e4m3fn' if float8 is not None else ''}")
    for t, name in ((k, "k"), (v, "v")):
        if t.dtype != q.dtype:
            raise ValueError(f"{name}.dtype is {t.dtype} but q.dtype is {q.dtype}; q, k and v must have one dtype "
                             f"(an e4m3 call takes float8_e4m3fn q, k and v, with fp32 descales)")
    _check_meta_descales(q, descales)
    resolved_out_dtype = _out_dtype(q, out_dtype, out)
    layouts = {"q": q, "k": k, "v": v, "out": out}
    for name, t in layouts.items():
        if t is not None and t.dim() != 4:
            raise ValueError(f"{name} must have 4 dimensions; got shape {tuple(t.shape)}")
    # torch._check_value: a ValueError, and on symbolic sizes a deferred runtime assertion rather than a
    # specialisation of the graph to the traced sizes (so one comparison per call: `and` would force a bool).
    check = torch._check_value
    for dim in (0, 3):
        check(k.shape[dim] == q.shape[dim],
              lambda: f"k has shape {tuple(k.shape)}; expected (batch, seqlen_k, num_heads_kv, head_dim) to match "
                      f"q {tuple(q.shape)}")
    if _v_d_major(kernel_spec):
        expected_v = (k.shape[0], k.shape[2], v.shape[2], _capi.d_major_keys(k.shape[1]))
        for dim in (0, 1, 3):
            check(v.shape[dim] == expected_v[dim],
                  lambda: f"v has shape {tuple(v.shape)}; the kernel's v_layout is d_major, which expects (batch, "
                          f"num_heads_kv, head_dim_v, seqlen_k rounded up to 16) (fa3jit.v_to_d_major)")
    else:
        for dim in (0, 1, 2):
            check(v.shape[dim] == k.shape[dim],
                  lambda: f"v has shape {tuple(v.shape)}; its first three dimensions must equal k's "
                          f"{tuple(k.shape[:3])}")
    if out is not None:
        expected = (q.shape[0], q.shape[1], q.shape[2], _head_dim_v(v, kernel_spec))
        for dim in range(4):
            check(out.shape[dim] == expected[dim],
                  lambda: f"out has shape {tuple(out.shape)}; expected {tuple(expected)}")
    return resolved_out_dtype


def _fake_lse(q: Any, return_lse: bool) -> Any:
    if return_lse:
        return q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=_torch.float32)
    return _empty_lse(q)


def _fake_plain(q: Any, k: Any, v: Any, softmax_scale: Optional[float] = None, causal: bool = False,
                return_lse: bool = False, kernel_spec: Optional[str] = None, q_descale: Any = None,
                k_descale: Any = None, v_descale: Any = None, out_dtype: Any = None) -> Tuple[Any, Any]:
    resolved = _check_meta(q, k, v, None, (q_descale, k_descale, v_descale), out_dtype, kernel_spec)
    # The real call allocates out contiguous on q's device in the output dtype, lse contiguous float32.
    out = q.new_empty((q.shape[0], q.shape[1], q.shape[2], _head_dim_v(v, kernel_spec)), dtype=resolved)
    return out, _fake_lse(q, return_lse)


def _fake_out(q: Any, k: Any, v: Any, out: Any, softmax_scale: Optional[float] = None, causal: bool = False,
              return_lse: bool = False, kernel_spec: Optional[str] = None, q_descale: Any = None,
              k_descale: Any = None, v_descale: Any = None, out_dtype: Any = None) -> Any:
    _check_meta(q, k, v, out, (q_descale, k_descale, v_descale), out_dtype, kernel_spec)
    return _fake_lse(q, return_lse)


# The schemas, written out rather than inferred from type hints: they are the ops' interface (what a saved graph
# or an exported program records), so they are spelled here once, as the module docstring gives them.
_SCHEMA_FP8 = "Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, ScalarType? out_dtype=None"
SCHEMA_PLAIN = ("(Tensor q, Tensor k, Tensor v, float? softmax_scale=None, bool causal=False, bool return_lse=False, "
                f"str? kernel_spec=None, {_SCHEMA_FP8}) -> (Tensor, Tensor)")
SCHEMA_OUT = ("(Tensor q, Tensor k, Tensor v, Tensor(a!) out, float? softmax_scale=None, bool causal=False, "
              f"bool return_lse=False, str? kernel_spec=None, {_SCHEMA_FP8}) -> Tensor")


def register() -> bool:
    """Defines torch.ops.fa3jit.* when torch can be imported (idempotent) and points fa3jit.flash_attn_func's
    tracing route at them. Returns REGISTERED; when False, UNAVAILABLE_REASON says why. Imports torch."""
    global REGISTERED, UNAVAILABLE_REASON, _torch, _op_plain, _op_out, _base_dispatch, _library
    if REGISTERED:
        return True
    try:
        import torch
        is_dynamo_compiling = torch.compiler.is_dynamo_compiling
    except Exception as error:  # not installed, too old, or failing to import: the C ABI binding still works
        UNAVAILABLE_REASON = f"torch is not usable ({type(error).__name__}: {error})"
        return False
    _torch = torch
    _base_dispatch = torch.Tensor.__torch_dispatch__
    try:
        library = torch.library.Library(NAMESPACE, "DEF")
        tags = [torch.Tag.pt2_compliant_tag]
        # Inductor hands the op its inputs with the strides they had when traced (torch 2.11's default for
        # custom ops, spelled out for older ones): layouts that were valid in eager mode stay valid.
        for layout in ("needs_exact_strides", "needs_fixed_stride_order"):
            if hasattr(torch.Tag, layout):
                tags.append(getattr(torch.Tag, layout))
                break
        library.define("flash_attn_func" + SCHEMA_PLAIN, tags=tags)
        library.define("flash_attn_func_out" + SCHEMA_OUT, tags=tags)
        _op_plain = torch.ops.fa3jit.flash_attn_func.default
        _op_out = torch.ops.fa3jit.flash_attn_func_out.default
        # The real call for every backend (a tensor that is not on CUDA gets flash_attn_func's ValueError).
        library.impl("flash_attn_func", _real_plain, "CompositeExplicitAutograd")
        library.impl("flash_attn_func_out", _real_out, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::flash_attn_func", _fake_plain, lib=library)
        torch.library.register_fake(f"{NAMESPACE}::flash_attn_func_out", _fake_out, lib=library)
        library.impl("flash_attn_func", _make_autograd_kernel(torch, _op_plain, _real_plain, None), "Autograd",
                     with_keyset=True)
        library.impl("flash_attn_func_out", _make_autograd_kernel(torch, _op_out, _real_out, 3), "Autograd",
                     with_keyset=True)
    except Exception as error:  # a torch whose library API differs: eager flash_attn_func still works
        UNAVAILABLE_REASON = (f"registering torch.ops.{NAMESPACE}.* failed with torch {torch.__version__} "
                              f"({type(error).__name__}: {error})")
        warnings.warn(f"fa3jit: {UNAVAILABLE_REASON}; torch.compile will not trace fa3jit.flash_attn_func",
                      RuntimeWarning, stacklevel=2)
        return False
    _library = library  # the registrations live as long as this object
    _attention._dynamo_compiling = is_dynamo_compiling
    _attention._ops_call = call
    _attention._ops_route = routes_subclass
    REGISTERED, UNAVAILABLE_REASON = True, None
    return True


def _make_autograd_kernel(torch: Any, op: Any, real: Any, mutated_index: Optional[int]) -> Any:
    """The op's kernel for the Autograd dispatch key: forward only, outputs without autograd history.

    torch's recipe for a non-differentiable op (the one torch.library.opcheck's autograd check names) is an
    Autograd kernel that re-dispatches below autograd. This one also takes a shortcut: for plain CUDA tensors
    with no dispatch mode active (the runtime of a compiled graph) nothing below autograd could act but the
    real call, so it makes the real call at once, one Python hop instead of two (torch.library.custom_op's
    layers cost several times the attention call's own host work). FakeTensors, FunctionalTensor, other
    subclasses, dispatch modes (make_fx, opcheck's schema check) and other devices re-dispatch as usual.
    For the out= op, `out`'s version counter is bumped, as for any in-place op."""
    plain_tensor = torch.Tensor
    dispatch_modes = torch._C._len_torch_dispatch_stack
    below_autograd = torch._C._AutoDispatchBelowAutograd
    after_autograd = torch._C._after_autograd_keyset
    bump_version = torch._C._increment_version

    def autograd_kernel(keyset: Any, q: Any, k: Any, v: Any, *rest: Any) -> Any:
        if mutated_index is not None:
            bump_version((rest[mutated_index - 3],))
        if (type(q) is plain_tensor and type(k) is plain_tensor and type(v) is plain_tensor and q.is_cuda
                and not dispatch_modes()):
            return real(q, k, v, *rest)
        with below_autograd():
            return op.redispatch(keyset & after_autograd, q, k, v, *rest)

    return autograd_kernel
