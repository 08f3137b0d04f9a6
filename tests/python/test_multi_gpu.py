"""Two GPUs in one process: every kernel family and the serving entry points on cuda:0 and cuda:1 (the two-GPU
issue). Skipped unless torch sees at least two CUDA devices.

The same inputs, copied to each device, must give bit-identical outputs on both (the kernels are deterministic and
the two devices of one host have the same SM count, so the split heuristic agrees): a kernel launched through
another device's function or context, a tensor map or workspace of the other device, or a launch on the wrong
stream shows as an error or a different result. The first case also checks against the float64 reference. Two
threads run calls alternately on both devices with the other device current; a CUDA graph is captured on each
device and replayed after its inputs change in place.
"""

import math
import threading

import pytest

from support import needs_gpu, needs_library, needs_torch

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402
from attention_reference import attention_ref  # noqa: E402

pytestmark = [needs_library, needs_torch, needs_gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two GPUs")]

DEVICES = ("cuda:0", "cuda:1")


def _inputs(seed, device, batch=2, seqlen_q=239, seqlen_k=1023, heads=8, heads_kv=2, head_dim=128,
            dtype=torch.bfloat16):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, s, h, head_dim, generator=generator).to(device=device, dtype=dtype)
                 for s, h in ((seqlen_q, heads), (seqlen_k, heads_kv), (seqlen_k, heads_kv)))


def _on_each_device(make_call):
    """make_call(device) -> a function of no arguments returning tensors: run it on each device with the other one
    current, and the results moved to the CPU."""
    results = []
    for device, other in zip(DEVICES, reversed(DEVICES)):
        call = make_call(device)
        with torch.cuda.device(other):
            out = call()
        torch.cuda.synchronize(device)
        results.append([t.cpu() for t in (out if isinstance(out, tuple) else (out,))])
    return results


def _assert_identical(results):
    for a, b in zip(*results):
        assert torch.equal(a, b), "cuda:0 and cuda:1 disagree on the same inputs"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_dense_attention_on_both_devices(causal):
    def make(device):
        q, k, v = _inputs(1, device)
        return lambda: fa3jit.flash_attn_func(q, k, v, causal=causal, return_lse=True)

    results = _on_each_device(make)
    _assert_identical(results)
    q, k, v = (t.cpu() for t in _inputs(1, "cpu"))
    ref, _ = attention_ref(q.double(), k.double(), v.double(), causal, upcast=False)
    lowp, _ = attention_ref(q, k, v, causal, upcast=False, reorder_ops=True)
    err = (results[0][0].double() - ref).abs().max().item()
    assert err <= 2 * (lowp.double() - ref).abs().max().item() + 2 * 2.0 ** -8


def test_serving_decode_split_paged_on_both_devices():
    """flash_attn_with_kvcache over a paged cache with the split heuristic (split kernel + combine kernel) and a
    packed chunked prefill through flash_attn_varlen_func."""
    def make(device):
        generator = torch.Generator().manual_seed(2)
        batch, heads, heads_kv, d, page = 4, 32, 8, 128, 16
        lengths = [4096, 1, 777, 2049]
        pages_per = [-(-n // page) for n in lengths]
        k_cache = torch.randn(sum(pages_per) + 3, page, heads_kv, d, generator=generator).to(device, torch.bfloat16)
        v_cache = torch.randn(k_cache.shape, generator=generator).to(device, torch.bfloat16)
        table = torch.zeros(batch, max(pages_per), dtype=torch.int32)
        order = torch.randperm(sum(pages_per), generator=generator)
        start = 0
        for b, n in enumerate(pages_per):
            table[b, :n] = order[start:start + n]
            start += n
        table = table.to(device)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
        q = torch.randn(batch, 1, heads, d, generator=generator).to(device, torch.bfloat16)
        q_packed = torch.randn(sum([5, 1, 37, 2]), heads, d, generator=generator).to(device, torch.bfloat16)
        cu_q = torch.tensor([0, 5, 6, 43, 45], dtype=torch.int32, device=device)

        def call():
            decode = fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, seqlens, table, causal=True, num_splits=0,
                                                    return_lse=True)
            prefill = fa3jit.flash_attn_varlen_func(q_packed, k_cache, v_cache, cu_q, max_seqlen_q=37,
                                                    seqused_k=seqlens, page_table=table, causal=True)
            return (*decode, prefill)
        return call

    _assert_identical(_on_each_device(make))


def test_fp8_prepass_and_attention_on_both_devices():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")

    def make(device):
        q, k, v = _inputs(3, device, seqlen_q=1023, seqlen_k=1023)
        return lambda: (*fa3jit.quantize_fp8(q, k, v), fa3jit.flash_attn_fp8_func(q, k, v, causal=True))

    results = _on_each_device(make)
    for a, b in zip(*results):
        assert torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                           b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)


def test_two_threads_alternate_between_devices():
    """Each thread runs 40 calls, alternating cuda:0 and cuda:1, thread 1 starting on the other device and keeping
    the opposite device current; every output equals its device's single-threaded result."""
    inputs = {device: _inputs(4, device) for device in DEVICES}
    expected = {device: fa3jit.flash_attn_func(*inputs[device], causal=True) for device in DEVICES}
    for device in DEVICES:
        torch.cuda.synchronize(device)
    errors = []

    def work(first):
        try:
            for i in range(40):
                device = DEVICES[(first + i) % 2]
                with torch.cuda.device(DEVICES[(first + i + 1) % 2]):
                    out = fa3jit.flash_attn_func(*inputs[device], causal=True)
                torch.cuda.synchronize(device)
                if not torch.equal(out, expected[device]):
                    errors.append(f"thread {first} call {i} on {device}: a different result")
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(f"thread {first}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(first,)) for first in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


@pytest.mark.parametrize("device", DEVICES)
def test_cuda_graph_on_each_device(device):
    """A split decode step captured on `device`'s stream and replayed after q and the lengths change in place."""
    generator = torch.Generator().manual_seed(5)
    batch, heads, heads_kv, d, capacity = 4, 32, 8, 128, 4096
    k = torch.randn(batch, capacity, heads_kv, d, generator=generator).to(device, torch.bfloat16)
    v = torch.randn(k.shape, generator=generator).to(device, torch.bfloat16)
    q = torch.randn(batch, 1, heads, d, generator=generator).to(device, torch.bfloat16)
    seqlens = torch.tensor([4096, 100, 2000, 1], dtype=torch.int32, device=device)
    out = torch.empty_like(q)
    with torch.cuda.device(device):
        fa3jit.flash_attn_with_kvcache(q, k, v, seqlens, causal=True, num_splits=0, out=out)  # warm
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fa3jit.flash_attn_with_kvcache(q, k, v, seqlens, causal=True, num_splits=0, out=out)
        for step in range(3):
            q.copy_(torch.randn(q.shape, generator=generator).to(device, torch.bfloat16))
            seqlens.copy_(torch.tensor([4096 - step, 100 + step, 2000, 1 + step], dtype=torch.int32))
            graph.replay()
            eager = fa3jit.flash_attn_with_kvcache(q, k, v, seqlens, causal=True, num_splits=0)
            torch.cuda.synchronize()
            assert torch.equal(out, eager), f"replay {step} on {device} differs from the eager call"
    assert math.isfinite(out.float().abs().max().item())
