"""torch.compile, torch.library.opcheck and CUDA graphs with fa3jit attention on the GPU (Hopper, torch >= 2.5).

A small attention block (fused qkv projection -> fa3jit attention -> output projection) compiled with
fullgraph=True must match the same block in eager mode (which calls the ctypes fast path); opcheck must pass on
both ops; a CUDA graph of the compiled block, and torch.compile's own mode="reduce-overhead", must replay
correctly after the inputs change in place. test_torch_ops.py covers the same machinery on the CPU."""

import pytest

from support import needs_gpu

pytestmark = needs_gpu

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402
from attention_reference import check_against_reference  # noqa: E402

OPS = torch.ops.fa3jit


def _randn(*shape, dtype=torch.bfloat16, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, device="cuda", dtype=dtype, generator=generator)


def _qkv(batch=2, seqlen_q=300, seqlen_k=300, num_heads=8, num_heads_kv=2, head_dim=128, dtype=torch.bfloat16):
    return (_randn(batch, seqlen_q, num_heads, head_dim, dtype=dtype, seed=41),
            _randn(batch, seqlen_k, num_heads_kv, head_dim, dtype=dtype, seed=42),
            _randn(batch, seqlen_k, num_heads_kv, head_dim, dtype=dtype, seed=43))


class AttentionBlock(torch.nn.Module):
    """Fused qkv projection, fa3jit attention (GQA, causal; q, k, v are strided views of one buffer) and an
    output projection."""

    def __init__(self, dim=512, num_heads=8, num_heads_kv=2, head_dim=128, causal=True):
        super().__init__()
        self.num_heads, self.num_heads_kv, self.head_dim, self.causal = num_heads, num_heads_kv, head_dim, causal
        self.qkv = torch.nn.Linear(dim, (num_heads + 2 * num_heads_kv) * head_dim)
        self.proj = torch.nn.Linear(num_heads * head_dim, dim)

    def forward(self, x):
        h, hkv, d = self.num_heads, self.num_heads_kv, self.head_dim
        q, k, v = self.qkv(x).split([h * d, hkv * d, hkv * d], dim=-1)
        q, k, v = q.unflatten(-1, (h, d)), k.unflatten(-1, (hkv, d)), v.unflatten(-1, (hkv, d))
        return self.proj(fa3jit.flash_attn_func(q, k, v, causal=self.causal).flatten(-2))


def _block(dtype, causal=True, seed=0):
    torch.manual_seed(seed)
    return AttentionBlock(causal=causal).to(device="cuda", dtype=dtype).eval()


def _tolerance(dtype):
    # Eager and compiled run the same attention kernel; the projections may round differently once Inductor
    # fuses the bias add (a few units in the last place of the output dtype).
    return {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 4e-3, "rtol": 4e-3}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# ---- torch.compile --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, causal", [(torch.bfloat16, True), (torch.float16, False)])  # compiles are slow
def test_compiled_block_matches_eager(dtype, causal):
    block = _block(dtype, causal)
    compiled = torch.compile(block, fullgraph=True)
    with torch.no_grad():
        for seqlen in (256, 333):  # a second shape recompiles (or reuses a dynamic graph)
            x = _randn(2, seqlen, 512, dtype=dtype, seed=seqlen)
            expected = block(x)
            result = compiled(x)
            torch.testing.assert_close(result, expected, **_tolerance(dtype))


def test_compiled_with_dynamic_shapes_matches_eager():
    block = _block(torch.bfloat16)
    compiled = torch.compile(block, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for batch, seqlen in ((1, 128), (3, 77), (2, 1031)):
            x = _randn(batch, seqlen, 512, seed=batch * seqlen)
            torch.testing.assert_close(compiled(x), block(x), **_tolerance(torch.bfloat16))


def test_compiled_attention_matches_the_reference():
    """The op as Inductor calls it computes attention (not just the same thing as eager): FA3's pass rule."""
    q, k, v = _qkv(seqlen_q=113, seqlen_k=1031)

    def attend(q, k, v):
        return fa3jit.flash_attn_func(q, k, v, causal=True, return_lse=True)

    out, lse = torch.compile(attend, fullgraph=True)(q, k, v)
    check_against_reference(out, lse, q, k, v, True)


def test_compiled_out_variant_writes_the_callers_tensor():
    q, k, v = _qkv()

    def attend(q, k, v, out):
        fa3jit.flash_attn_func(q, k, v, causal=True, out=out)
        return out.float().sum()

    out = torch.full_like(q, float("nan"))
    total = torch.compile(attend, fullgraph=True)(q, k, v, out)
    check_against_reference(out, None, q, k, v, True)
    torch.testing.assert_close(total, out.float().sum())


def test_compiled_call_with_a_kernel_handle():
    q, k, v = _qkv(num_heads=4, num_heads_kv=4)
    with fa3jit.Kernel({"dtype": "bf16", "head_dim": 128, "tile": {"block_n": 128}}) as kernel:
        compiled = torch.compile(lambda q, k, v: fa3jit.flash_attn_func(q, k, v, kernel=kernel), fullgraph=True)
        check_against_reference(compiled(q, k, v), None, q, k, v, False)


def test_compiled_block_in_training_mode_runs_backward_around_attention():
    """Forward only: attention passes no gradient, under torch.compile as in eager mode."""
    block = AttentionBlock().to(device="cuda", dtype=torch.bfloat16)
    x = _randn(1, 128, 512)
    torch.compile(block, fullgraph=True)(x).float().sum().backward()
    assert block.proj.weight.grad is not None and block.qkv.weight.grad is None


# ---- opcheck --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{}, {"causal": True, "return_lse": True}, {"softmax_scale": 0.1}])
def test_opcheck_flash_attn_func(kwargs):
    q, k, v = _qkv(seqlen_q=77, seqlen_k=200)
    torch.library.opcheck(OPS.flash_attn_func.default, (q, k, v), kwargs)


@pytest.mark.parametrize("return_lse", [False, True])
def test_opcheck_flash_attn_func_out(return_lse):
    q, k, v = _qkv(seqlen_q=77, seqlen_k=200)
    torch.library.opcheck(OPS.flash_attn_func_out.default, (q, k, v, torch.empty_like(q)),
                          {"causal": True, "return_lse": return_lse})


def test_opcheck_with_inputs_that_require_grad():
    """The autograd-registration check runs only when an input requires grad."""
    q, k, v = (t.requires_grad_() for t in _qkv(seqlen_q=64, seqlen_k=64))
    torch.library.opcheck(OPS.flash_attn_func.default, (q, k, v), {"causal": True})


# ---- CUDA graphs ----------------------------------------------------------------------------------------

def test_cuda_graph_of_the_compiled_block_replays_after_inputs_change_in_place():
    dtype = torch.bfloat16
    block = _block(dtype)
    compiled = torch.compile(block, fullgraph=True)
    static_x = _randn(2, 256, 512, dtype=dtype, seed=1)
    with torch.no_grad():
        # Warm-up on a side stream (torch's recipe): compiles the graph and loads the fa3jit kernel, so that
        # nothing is compiled, loaded or allocated outside the graph's pool while capturing.
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                compiled(static_x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = compiled(static_x)
        for seed in (2, 3, 4):
            static_x.copy_(_randn(2, 256, 512, dtype=dtype, seed=seed))
            graph.replay()
            torch.cuda.synchronize()
            torch.testing.assert_close(static_y, block(static_x), **_tolerance(dtype))


def test_reduce_overhead_mode_replays_after_inputs_change_in_place():
    from torch._dynamo.utils import counters

    dtype = torch.bfloat16
    block = _block(dtype)
    compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)
    x = _randn(2, 256, 512, dtype=dtype, seed=5)
    counters.clear()
    with torch.no_grad():
        for seed in (6, 7, 8, 9):  # the first calls warm up and record, the later ones replay
            x.copy_(_randn(2, 256, 512, dtype=dtype, seed=seed))
            result = compiled(x).clone()  # a replay's output lives in the graph's pool until the next replay
            torch.testing.assert_close(result, block(x), **_tolerance(dtype))
    # Inductor counts each graph it declines to run as a CUDA graph (an op it deems unsafe, CPU tensors, ...).
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
