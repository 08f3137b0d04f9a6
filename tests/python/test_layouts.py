"""Layouts a serving process hands the kernel, on the GPU: q/k/v as views of one fused qkv buffer (case B3 of
the shared bug-report cases), non-contiguous heads, padded rows, released models' head layouts at seqlen 2048,
arrays given through __cuda_array_interface__, and the stream the kernel runs on."""

import pytest

from support import load_data, needs_gpu

pytestmark = needs_gpu

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402
from attention_reference import check_against_reference  # noqa: E402


def _randn(*shape, dtype=torch.bfloat16, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, device="cuda", dtype=dtype, generator=generator)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256], ids=lambda d: f"d{d}")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_fused_qkv_views(dtype, head_dim, causal):
    """B3: (batch, seqlen, num_heads + 2 * num_heads_kv, head_dim) buffer; k and v head strides are not
    num_heads_kv * head_dim. The result must be correct and bit-identical to contiguous copies."""
    batch, seqlen, num_heads, num_heads_kv = 2, 1000, 8, 2
    qkv = _randn(batch, seqlen, num_heads + 2 * num_heads_kv, head_dim, dtype=dtype, seed=head_dim)
    q = qkv[:, :, :num_heads]
    k = qkv[:, :, num_heads:num_heads + num_heads_kv]
    v = qkv[:, :, num_heads + num_heads_kv:]
    assert not k.is_contiguous()
    out, lse = fa3jit.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    check_against_reference(out, lse, q, k, v, causal)
    out_contiguous, lse_contiguous = fa3jit.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(),
                                                            causal=causal, return_lse=True)
    assert torch.equal(out, out_contiguous) and torch.equal(lse, lse_contiguous)


@pytest.mark.parametrize("layout", ["heads_outer", "padded_rows"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256], ids=lambda d: f"d{d}")
def test_non_contiguous_heads(head_dim, causal, layout):
    """heads_outer: tensors stored (batch, heads, seqlen, head_dim) and transposed, so the seq stride is
    head_dim and the head stride seqlen * head_dim (out too). padded_rows: each head row padded by 64 elements
    (128 bytes). Results must match contiguous inputs bit for bit."""
    batch, seqlen_q, seqlen_k, num_heads, num_heads_kv = 2, 777, 1031, 6, 2

    def make(seqlen, heads, seed):
        if layout == "heads_outer":
            return _randn(batch, heads, seqlen, head_dim, seed=seed).transpose(1, 2)
        return _randn(batch, seqlen, heads, head_dim + 64, seed=seed)[..., :head_dim]

    q, k, v = make(seqlen_q, num_heads, 1), make(seqlen_k, num_heads_kv, 2), make(seqlen_k, num_heads_kv, 3)
    out = make(seqlen_q, num_heads, 4).fill_(float("nan"))
    fa3jit.flash_attn_func(q, k, v, causal=causal, out=out)
    check_against_reference(out, None, q, k, v, causal)
    expected = fa3jit.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal)
    assert torch.equal(out, expected)


def _model_cases():
    return [pytest.param(m["num_heads"], m["num_heads_kv"], m["head_dim"], m.get("head_dim_v", m["head_dim"]),
                         id=m["name"]) for m in load_data("model_shapes.json")["models"]]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("num_heads, num_heads_kv, head_dim, head_dim_v", _model_cases())
def test_model_head_layouts_at_seqlen_2048(num_heads, num_heads_kv, head_dim, head_dim_v, causal):
    """Every released model of tests/data/model_shapes.json: its head counts and head dims (Phi-3's 96, DeepSeek's
    MLA prefill 192 / 128), plain attention; their softcap, sliding windows and sinks are checked through the
    serving entry points (test_serving.py: test_model_variants)."""
    q = _randn(1, 2048, num_heads, head_dim, seed=num_heads)
    k = _randn(1, 2048, num_heads_kv, head_dim, seed=num_heads_kv)
    v = _randn(1, 2048, num_heads_kv, head_dim_v, seed=head_dim)
    out, lse = fa3jit.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    assert out.shape == (1, 2048, num_heads, head_dim_v)
    check_against_reference(out, lse, q, k, v, causal)


def test_softmax_scale_is_applied():
    q, k, v = _randn(2, 300, 4, 128, seed=1), _randn(2, 300, 4, 128, seed=2), _randn(2, 300, 4, 128, seed=3)
    out, lse = fa3jit.flash_attn_func(q, k, v, softmax_scale=0.3, return_lse=True)
    check_against_reference(out, lse, q, k, v, False, softmax_scale=0.3)


def test_decode_step_causal_sees_every_key():
    """B2: seqlen_q = 1, causal, seqlen_k = 339: under bottom-right alignment the one query row sees all keys,
    so the result is the non-causal one."""
    q, k, v = _randn(4, 1, 8, 128, seed=21), _randn(4, 339, 2, 128, seed=22), _randn(4, 339, 2, 128, seed=23)
    out, lse = fa3jit.flash_attn_func(q, k, v, causal=True, return_lse=True)
    check_against_reference(out, lse, q, k, v, False)
    out_full, lse_full = fa3jit.flash_attn_func(q, k, v, causal=False, return_lse=True)
    assert (out.float() - out_full.float()).abs().max().item() <= 2 ** -7  # two bf16 rounding steps at 0.5 <= |out| < 1
    assert (lse - lse_full).abs().max().item() <= 1e-4


class _CudaArray:
    """A minimal foreign array: only __cuda_array_interface__ (as CuPy or Numba would give)."""

    def __init__(self, tensor):
        self._tensor = tensor  # keeps the memory alive
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


def test_cuda_array_interface_inputs():
    q, k, v = (_randn(1, 256, 4, 64, dtype=torch.float16, seed=s) for s in (1, 2, 3))
    out = fa3jit.flash_attn_func(_CudaArray(q), _CudaArray(k), _CudaArray(v), causal=True)
    assert torch.equal(out, fa3jit.flash_attn_func(q, k, v, causal=True))


def test_runs_on_the_current_stream():
    """q is written on a side stream after a 20+ ms spin; a kernel launched on any other stream would read
    it before the write lands."""
    source = _randn(1, 1024, 8, 128, seed=5)
    k, v = _randn(1, 1024, 8, 128, seed=6), _randn(1, 1024, 8, 128, seed=7)
    expected = fa3jit.flash_attn_func(source, k, v)
    q = torch.zeros_like(source)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)
        q.copy_(source)
        out = fa3jit.flash_attn_func(q, k, v)
    stream.synchronize()
    assert torch.equal(out, expected)


def test_degenerate_shapes_are_answered_without_a_launch():
    q, k, v = _randn(2, 0, 4, 64), _randn(2, 5, 4, 64), _randn(2, 5, 4, 64)
    out, lse = fa3jit.flash_attn_func(q, k, v, return_lse=True)
    assert out.shape == (2, 0, 4, 64) and lse.shape == (2, 4, 0)
    q, k, v = _randn(2, 3, 4, 64), _randn(2, 0, 4, 64), _randn(2, 0, 4, 64)
    out, lse = fa3jit.flash_attn_func(q, k, v, return_lse=True)
    assert torch.count_nonzero(out).item() == 0 and torch.all(lse == float("inf"))


def test_allocated_out_is_contiguous():
    """Whatever q's layout (here a transposed (batch, heads, seqlen, dim) buffer), the out that flash_attn_func
    allocates is contiguous (batch, seqlen_q, num_heads, head_dim_v), as FlashAttention-3's is."""
    q = _randn(2, 8, 333, 128, seed=41).transpose(1, 2)
    k, v = _randn(2, 333, 8, 128, seed=42), _randn(2, 333, 8, 128, seed=43)
    out, lse = fa3jit.flash_attn_func(q, k, v, return_lse=True)
    assert out.is_contiguous() and out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
    assert lse.is_contiguous() and lse.shape == (2, 8, 333)
    check_against_reference(out, lse, q, k, v, False)


def test_calls_from_several_threads():
    """Each thread packs its parameters into its own struct: results are right when threads call at once."""
    import threading

    cases = [(_randn(1, 200 + 37 * i, 4, 64, seed=60 + i), _randn(1, 300, 2, 64, seed=70 + i),
              _randn(1, 300, 2, 64, seed=80 + i)) for i in range(4)]
    expected = [fa3jit.flash_attn_func(q, k, v, causal=True) for q, k, v in cases]
    torch.cuda.synchronize()
    results, errors = {}, []
    barrier = threading.Barrier(len(cases))

    def worker(index):
        try:
            q, k, v = cases[index]
            barrier.wait()
            outs = [fa3jit.flash_attn_func(q, k, v, causal=True) for _ in range(50)]
            torch.cuda.synchronize()
            results[index] = outs
        except Exception as error:  # reported below, not swallowed
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(cases))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for index, outs in results.items():
        assert all(torch.equal(out, expected[index]) for out in outs), f"thread {index}"


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_another_device_than_the_current_one():
    """q on cuda:1 while cuda:0 is current: the call runs on cuda:1 (on its current stream) all the same."""
    generator = torch.Generator(device="cuda:1").manual_seed(5)
    q, k, v = (torch.randn(1, 256, 4, 128, device="cuda:1", dtype=torch.bfloat16, generator=generator)
               for _ in range(3))
    with torch.cuda.device(0):
        out = fa3jit.flash_attn_func(q, k, v)
    assert out.device == q.device
    with torch.cuda.device(1):
        expected = fa3jit.flash_attn_func(q, k, v)
        torch.cuda.synchronize()
    assert torch.equal(out, expected)
