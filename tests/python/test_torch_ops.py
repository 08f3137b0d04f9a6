"""The custom ops torch.ops.fa3jit.* without a GPU: registration and schemas, the fake implementations (shapes,
strides, dtypes, errors) on FakeTensors of device cuda, the routing of fa3jit.flash_attn_func (eager calls
never enter the dispatcher; Dynamo and FakeTensor tracing record the op), and whole torch.compile(fullgraph=True)
pipelines run on the CPU.

The CPU runs use a reference CPU kernel registered for the ops for the duration of a test (a
torch.library.Library of kind IMPL, destroyed afterwards): the ops' own implementation is the CUDA call, which
a CPU tensor makes raise. What these tests cannot show (the real kernel under compile, opcheck on the GPU,
CUDA graph replay) is in test_torch_compile.py."""

import pytest

from support import needs_torch

pytestmark = needs_torch

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402
from fa3jit import _torch_ops  # noqa: E402
from attention_reference import attention_ref  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402

OPS = torch.ops.fa3jit


# ---- a CPU kernel for the ops, so that traced graphs can run here ---------------------------------------

def _reference(q, k, v, softmax_scale, causal):
    out, lse = attention_ref(q, k, v, causal=causal, softmax_scale=softmax_scale, upcast=True)
    return out.contiguous(), lse.contiguous()


def _cpu_plain(q, k, v, softmax_scale=None, causal=False, return_lse=False, kernel_spec=None, q_descale=None,
               k_descale=None, v_descale=None, out_dtype=None):
    _cpu_calls.append(("flash_attn_func", kernel_spec))
    out, lse = _reference(q, k, v, softmax_scale, causal)
    return out, (lse if return_lse else q.new_empty((0,), dtype=torch.float32))


def _cpu_out(q, k, v, out, softmax_scale=None, causal=False, return_lse=False, kernel_spec=None, q_descale=None,
             k_descale=None, v_descale=None, out_dtype=None):
    _cpu_calls.append(("flash_attn_func_out", kernel_spec))
    result, lse = _reference(q, k, v, softmax_scale, causal)
    out.copy_(result)
    return lse if return_lse else q.new_empty((0,), dtype=torch.float32)


_cpu_calls = []


@pytest.fixture
def cpu_kernels():
    """Registers the reference CPU kernels for the test; returns the list of calls they saw."""
    library = torch.library.Library("fa3jit", "IMPL")
    library.impl("flash_attn_func", _cpu_plain, "CPU")
    library.impl("flash_attn_func_out", _cpu_out, "CPU")
    _cpu_calls.clear()
    try:
        yield _cpu_calls
    finally:
        library._destroy()


def _qkv(batch=2, seqlen_q=48, seqlen_k=64, num_heads=4, num_heads_kv=2, head_dim=64, dtype=torch.bfloat16,
         device="cpu"):
    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, generator=generator).to(dtype=dtype, device=device)

    return (randn(batch, seqlen_q, num_heads, head_dim), randn(batch, seqlen_k, num_heads_kv, head_dim),
            randn(batch, seqlen_k, num_heads_kv, head_dim))


class AttentionBlock(torch.nn.Module):
    """A fused qkv projection, fa3jit attention (GQA, causal) and an output projection."""

    def __init__(self, dim=256, num_heads=4, num_heads_kv=2, head_dim=64, return_lse=False, use_out=False):
        super().__init__()
        self.num_heads, self.num_heads_kv, self.head_dim = num_heads, num_heads_kv, head_dim
        self.return_lse, self.use_out = return_lse, use_out
        self.qkv = torch.nn.Linear(dim, (num_heads + 2 * num_heads_kv) * head_dim)
        self.proj = torch.nn.Linear(num_heads * head_dim, dim)

    def forward(self, x):
        h, hkv, d = self.num_heads, self.num_heads_kv, self.head_dim
        q, k, v = self.qkv(x).split([h * d, hkv * d, hkv * d], dim=-1)
        q, k, v = q.unflatten(-1, (h, d)), k.unflatten(-1, (hkv, d)), v.unflatten(-1, (hkv, d))
        if self.use_out:
            out = torch.empty_like(q)
            attention = fa3jit.flash_attn_func(q, k, v, causal=True, out=out)
        elif self.return_lse:
            attention, lse = fa3jit.flash_attn_func(q, k, v, causal=True, return_lse=True)
            attention = attention + (lse.transpose(1, 2).unsqueeze(-1) * 0).to(attention.dtype)  # lse is used
        else:
            attention = fa3jit.flash_attn_func(q, k, v, causal=True)
        return self.proj(attention.flatten(-2))

    def reference(self, x):
        h, hkv, d = self.num_heads, self.num_heads_kv, self.head_dim
        q, k, v = self.qkv(x).split([h * d, hkv * d, hkv * d], dim=-1)
        q, k, v = q.unflatten(-1, (h, d)), k.unflatten(-1, (hkv, d)), v.unflatten(-1, (hkv, d))
        return self.proj(_reference(q, k, v, None, True)[0].flatten(-2))


class GraphRecorder:
    """A torch.compile backend that keeps the FX graphs it is given and runs them as they are."""

    def __init__(self):
        self.graphs = []

    def __call__(self, graph_module, example_inputs):
        self.graphs.append(graph_module)
        return graph_module.forward

    def targets(self):
        return [node.target for graph in self.graphs for node in graph.graph.nodes if node.op == "call_function"]


# ---- registration ---------------------------------------------------------------------------------------

def test_ops_are_registered_with_the_documented_schemas():
    assert _torch_ops.REGISTERED and _torch_ops.UNAVAILABLE_REASON is None
    assert str(OPS.flash_attn_func.default._schema) == "fa3jit::flash_attn_func" + _torch_ops.SCHEMA_PLAIN
    assert str(OPS.flash_attn_func_out.default._schema) == "fa3jit::flash_attn_func_out" + _torch_ops.SCHEMA_OUT
    assert torch.Tag.pt2_compliant_tag in OPS.flash_attn_func.default.tags
    assert _torch_ops.register() is True  # idempotent


# ---- fake implementations -------------------------------------------------------------------------------

@pytest.mark.parametrize("return_lse", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fake_gives_the_shapes_strides_and_dtypes_of_the_real_call(dtype, return_lse):
    with FakeTensorMode():
        q = torch.empty(3, 100, 8, 128, device="cuda", dtype=dtype)
        kv = torch.empty(3, 70, 2, 256, device="cuda", dtype=dtype)[..., :128]  # strided k, v: free strides
        out, lse = OPS.flash_attn_func(q, kv, kv, None, True, return_lse)
        assert isinstance(out, FakeTensor)
        assert out.shape == (3, 100, 8, 128) and out.stride() == (102400, 1024, 128, 1)
        assert out.dtype == dtype and out.device == q.device
        if return_lse:
            assert lse.shape == (3, 8, 100) and lse.stride() == (800, 100, 1)
        else:
            assert lse.shape == (0,)
        assert lse.dtype == torch.float32 and lse.device == q.device


def test_fake_of_the_out_variant_returns_lse_only():
    with FakeTensorMode():
        q = torch.empty(1, 33, 4, 64, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(1, 33, 4, 64, device="cuda", dtype=torch.bfloat16)
        lse = OPS.flash_attn_func_out(q, q, q, out, 0.5, False, True)
        assert lse.shape == (1, 4, 33) and lse.dtype == torch.float32
        assert OPS.flash_attn_func_out(q, q, q, out).shape == (0,)


@pytest.mark.parametrize("make, needle", [
    (lambda q, k, v: (q.float(), k.float(), v.float()), "q.dtype is torch.float32"),
    (lambda q, k, v: (q, k.half(), v), "k.dtype is torch.float16"),
    (lambda q, k, v: (q, k, v.half()), "v.dtype is torch.float16"),
    (lambda q, k, v: (q[0], k, v), "q must have 4 dimensions"),
    (lambda q, k, v: (q, k[:1], v), "k has shape (1, 64, 2, 64)"),
    (lambda q, k, v: (q, k[..., :32], v), "k has shape (2, 64, 2, 32)"),
    (lambda q, k, v: (q, k, v[:, :10]), "v has shape (2, 10, 2, 64)"),
])
def test_fake_rejects_what_flash_attn_func_rejects(make, needle):
    with FakeTensorMode():
        q, k, v = make(*_qkv(device="cuda"))
        with pytest.raises(ValueError) as info:
            fa3jit.flash_attn_func(q, k, v)
        assert needle in str(info.value)


def test_fake_checks_out():
    with FakeTensorMode():
        q, k, v = _qkv(device="cuda")
        with pytest.raises(ValueError, match="out has shape"):
            fa3jit.flash_attn_func(q, k, v, out=torch.empty(2, 48, 4, 32, device="cuda", dtype=q.dtype))
        with pytest.raises(ValueError, match="out.dtype"):
            fa3jit.flash_attn_func(q, k, v, out=torch.empty_like(q, dtype=torch.float16))


# ---- routing --------------------------------------------------------------------------------------------

def test_fake_tensors_route_through_the_op():
    """FakeTensor calls (make_fx, non-strict export, FakeTensorMode) record the op instead of reaching ctypes."""
    with FakeTensorMode():
        q, k, v = _qkv(device="cuda")
        out, lse = fa3jit.flash_attn_func(q, k, v, causal=True, return_lse=True)
        assert isinstance(out, FakeTensor) and out.shape == q.shape and lse.shape == (2, 4, 48)
        given = torch.empty_like(q)
        assert fa3jit.flash_attn_func(q, k, v, out=given) is given


def test_eager_calls_do_not_enter_the_dispatcher(cpu_kernels):
    """The eager path is the ctypes call: a CPU tensor is refused by fa3jit's own check even while a CPU kernel
    of the op exists, which the op route would have used."""
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        fa3jit.flash_attn_func(q, k, v)
    assert cpu_kernels == []


def test_parameters_take_the_plain_path():
    q = torch.nn.Parameter(torch.empty(1, 1, 1, 64), requires_grad=False)
    assert not _torch_ops.routes_subclass(q, q, q)
    with FakeTensorMode():
        fake = torch.empty(1, 1, 1, 64)
    assert _torch_ops.routes_subclass(fake, fake, fake)


def test_the_op_rejects_cpu_tensors_without_a_cpu_kernel():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        OPS.flash_attn_func(q, k, v)


def test_a_closed_or_foreign_kernel_is_refused_on_the_op_route():
    closed = object.__new__(fa3jit.Kernel)
    closed._handle, closed._handles, closed.spec = None, None, "{}"
    with FakeTensorMode():
        q, k, v = _qkv(device="cuda")
        with pytest.raises(ValueError, match="closed"):
            fa3jit.flash_attn_func(q, k, v, kernel=closed)
        with pytest.raises(TypeError, match="fa3jit.Kernel"):
            fa3jit.flash_attn_func(q, k, v, kernel="bf16")


# ---- torch.compile on the CPU ---------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["plain", "return_lse", "out"])
def test_compiled_block_records_the_op_with_fullgraph(cpu_kernels, variant):
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = AttentionBlock(return_lse=variant == "return_lse", use_out=variant == "out").to(torch.bfloat16).eval()
    x = torch.randn(2, 40, 256, dtype=torch.bfloat16)
    recorder = GraphRecorder()
    with torch.no_grad():
        compiled = torch.compile(block, backend=recorder, fullgraph=True)
        result = compiled(x)
        expected = block.reference(x)
    op = OPS.flash_attn_func_out.default if variant == "out" else OPS.flash_attn_func.default
    assert op in recorder.targets()
    assert len(recorder.graphs) == 1
    torch.testing.assert_close(result, expected)
    assert [name for name, _ in cpu_kernels] == [op.__name__.split(".")[0]]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_block_runs_through_aot_autograd_and_inductor(cpu_kernels, backend):
    torch._dynamo.reset()
    torch.manual_seed(1)
    block = AttentionBlock().to(torch.bfloat16).eval()
    compiled = torch.compile(block, backend=backend, fullgraph=True)
    with torch.no_grad():
        for seqlen in (40, 72):  # a second shape: recompiles (or runs the dynamic graph) with new sizes
            x = torch.randn(2, seqlen, 256, dtype=torch.bfloat16)
            torch.testing.assert_close(compiled(x), block.reference(x))
    assert len(cpu_kernels) == 2


def test_dynamic_shapes_compile_one_graph(cpu_kernels):
    """The fake implementation works on symbolic sizes (its checks become runtime assertions, not guards that
    pin the traced sizes): batch and seqlen change without a recompile."""
    torch._dynamo.reset()
    torch.manual_seed(3)
    block = AttentionBlock().to(torch.bfloat16).eval()
    recorder = GraphRecorder()
    compiled = torch.compile(block, backend=recorder, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for batch, seqlen in ((2, 40), (3, 72), (4, 17)):  # not 1: torch specialises sizes 0 and 1
            x = torch.randn(batch, seqlen, 256, dtype=torch.bfloat16)
            torch.testing.assert_close(compiled(x), block.reference(x))
    assert len(recorder.graphs) == 1


def test_compiled_out_variant_is_functionalised(cpu_kernels):
    torch._dynamo.reset()

    def attend(q, k, v, out):
        lse = fa3jit.flash_attn_func(q, k, v, causal=True, out=out, return_lse=True)[1]
        return out * 2, lse

    q, k, v = _qkv()
    out = torch.zeros_like(q)
    doubled, lse = torch.compile(attend, backend="aot_eager", fullgraph=True)(q, k, v, out)
    expected, expected_lse = _reference(q, k, v, None, True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(doubled, expected * 2)
    torch.testing.assert_close(lse, expected_lse)


def test_a_kernel_travels_as_its_spec(cpu_kernels):
    torch._dynamo.reset()
    kernel = object.__new__(fa3jit.Kernel)  # a stand-in: a real Kernel needs the CUDA driver to load
    kernel._handle, kernel._handles, kernel.spec = None, (1, 2), '{"dtype": "bf16", "head_dim": 64}'
    recorder = GraphRecorder()
    q, k, v = _qkv()
    torch.compile(lambda q, k, v: fa3jit.flash_attn_func(q, k, v, kernel=kernel), backend=recorder,
                  fullgraph=True)(q, k, v)
    assert cpu_kernels == [("flash_attn_func", kernel.spec)]


def test_training_mode_compiles_and_attention_passes_no_gradient(cpu_kernels):
    """Forward only, as in eager mode: the op's outputs are non-differentiable, so a graph with parameters that
    require grad compiles, and backward reaches the output projection but not the qkv projection."""
    torch._dynamo.reset()
    torch.manual_seed(2)
    block = AttentionBlock().to(torch.bfloat16)
    x = torch.randn(1, 32, 256, dtype=torch.bfloat16)
    result = torch.compile(block, backend="aot_eager", fullgraph=True)(x)
    result.sum().backward()
    assert block.proj.weight.grad is not None
    assert block.qkv.weight.grad is None


def test_opcheck_on_the_cpu_kernel(cpu_kernels):
    """torch.library.opcheck's schema, fake-tensor and AOT-dispatch checks, with the reference CPU kernel in the
    role of the real one (test_torch_compile.py runs it on the GPU kernel)."""
    q, k, v = _qkv(seqlen_q=16, seqlen_k=24)
    torch.library.opcheck(OPS.flash_attn_func.default, (q, k, v), {"causal": True, "return_lse": True})
    torch.library.opcheck(OPS.flash_attn_func.default, (q, k, v, 0.25, False, False))
    torch.library.opcheck(OPS.flash_attn_func_out.default, (q, k, v, torch.empty_like(q)), {"causal": True})
    # With inputs that require grad opcheck also checks the autograd registration (non-differentiable here).
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    torch.library.opcheck(OPS.flash_attn_func.default, (q, k, v), {"causal": True})
    out, lse = OPS.flash_attn_func(q, k, v, None, True, True)
    assert not out.requires_grad and not lse.requires_grad
