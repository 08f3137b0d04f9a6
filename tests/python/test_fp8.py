"""FP8 (torch.float8_e4m3fn) attention through fa3jit.flash_attn_func.

Without a GPU (torch and the library): the argument checks that come before the device check (dtype mixes,
e4m3-only arguments on 16-bit calls, out_dtype), the descale rules (which shapes are per_head and which per_block,
strides, dtype, device, the messages) on CPU tensors, fa3jit.fp8_quant_blocks, and the custom ops' fake
implementations (output dtype, errors) on FakeTensors of device cuda.
On an sm_90 GPU: results against the float64 reference on the dequantised inputs with FlashAttention-3's FP8 rule
(attention_reference.check_fp8_against_reference: error <= 2x that of a baseline that rounds P to e4m3, + 2x the
output's rounding noise), per_head and per_block descales, causal, GQA, seqlens 1, 113, 239, 1023."""

import math

import pytest

from support import needs_gpu, needs_library, needs_torch

torch = pytest.importorskip("torch")
if not hasattr(torch, "float8_e4m3fn"):
    pytest.skip("this torch has no float8_e4m3fn", allow_module_level=True)

import fa3jit  # noqa: E402
from fa3jit import _capi  # noqa: E402
from fa3jit import attention as _attention  # noqa: E402
from attention_reference import check_fp8_against_reference, quantize_e4m3  # noqa: E402

# Every test needs the library and torch (with the ops registered); the GPU tests are marked needs_gpu on top.
pytestmark = [needs_library, needs_torch]

E4M3 = torch.float8_e4m3fn
OPS = torch.ops.fa3jit


@pytest.fixture(autouse=True)
def bound():
    """flash_attn_func's torch bindings, so that its helpers can be called directly."""
    _attention._bind_torch()


def _qkv(batch=2, seqlen_q=48, seqlen_k=64, num_heads=4, num_heads_kv=2, head_dim=128, dtype=E4M3, device="cpu"):
    return (torch.zeros(batch, seqlen_q, num_heads, head_dim, device=device).to(dtype),
            torch.zeros(batch, seqlen_k, num_heads_kv, head_dim, device=device).to(dtype),
            torch.zeros(batch, seqlen_k, num_heads_kv, head_dim, device=device).to(dtype))


# ---- argument checks before the device (CPU) ------------------------------------------------------------

@pytest.mark.parametrize("make, needle", [
    (lambda q, k, v: (q, k.bfloat16(), v), "k.dtype is torch.bfloat16 but q.dtype is torch.float8_e4m3fn"),
    (lambda q, k, v: (q, k, v.half()), "v.dtype is torch.float16 but q.dtype is torch.float8_e4m3fn"),
    (lambda q, k, v: (q.bfloat16(), k, v), "k.dtype is torch.float8_e4m3fn but q.dtype is torch.bfloat16"),
    (lambda q, k, v: (q.to(torch.float8_e5m2), k, v), "q.dtype is torch.float8_e5m2; expected torch.float16"),
])
def test_fp8_with_other_partners_is_refused(make, needle):
    with pytest.raises(ValueError) as info:
        fa3jit.flash_attn_func(*make(*_qkv()))
    assert needle in str(info.value)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(q_descale=torch.ones(2, 2)), "q_descale is given but q.dtype is torch.bfloat16"),
    (dict(v_descale=torch.ones(())), "v_descale is given but q.dtype is torch.bfloat16"),
    (dict(out_dtype=torch.float16), "out_dtype is torch.float16 but q.dtype is torch.bfloat16"),
])
def test_16_bit_calls_refuse_the_fp8_arguments(kwargs, needle):
    with pytest.raises(ValueError) as info:
        fa3jit.flash_attn_func(*_qkv(dtype=torch.bfloat16), **kwargs)
    assert needle in str(info.value)


def test_16_bit_calls_take_out_dtype_equal_to_their_dtype():
    """Reaches the device check, which a CPU tensor fails: out_dtype = q's dtype was accepted."""
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        fa3jit.flash_attn_func(*_qkv(dtype=torch.bfloat16), out_dtype=torch.bfloat16)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(out_dtype=torch.float32), "out_dtype is torch.float32; an e4m3 call writes torch.bfloat16"),
    (dict(out_dtype=E4M3), "out_dtype is torch.float8_e4m3fn"),
    (dict(out=torch.empty(2, 48, 4, 128)), "out.dtype is torch.float32; an e4m3 call writes"),
])
def test_fp8_out_dtype_is_bf16_or_fp16(kwargs, needle):
    with pytest.raises(ValueError) as info:
        fa3jit.flash_attn_func(*_qkv(), **kwargs)
    assert needle in str(info.value)


@pytest.mark.parametrize("out_dtype", [None, torch.bfloat16, torch.float16])
def test_fp8_calls_with_valid_out_dtype_reach_the_device_check(out_dtype):
    with pytest.raises(ValueError, match="q is on cpu; expected a CUDA tensor"):
        fa3jit.flash_attn_func(*_qkv(), out_dtype=out_dtype)


def test_fp8_out_dtype_resolution():
    resolve = _attention._fp8_out_dtype
    assert resolve(None, None) == (torch.bfloat16, _capi.DTYPE_BF16)  # FlashAttention-3's output dtype
    assert resolve(torch.float16, None) == (torch.float16, _capi.DTYPE_FP16)
    assert resolve(None, torch.empty(1, dtype=torch.float16)) == (torch.float16, _capi.DTYPE_FP16)
    # out_dtype wins over out's dtype; the mismatch is then out's error (test_fake_rejects_..., and on the GPU).
    assert resolve(torch.bfloat16, torch.empty(1, dtype=torch.float16)) == (torch.bfloat16, _capi.DTYPE_BF16)


# ---- descales: which shapes mean what (CPU tensors) -----------------------------------------------------

BATCH, SEQLEN_Q, SEQLEN_K, HEADS, HEADS_KV, HEAD_DIM = 2, 300, 257, 8, 2, 128


def _fields(q_descale=None, k_descale=None, v_descale=None, q=None, causal=False, head_dim=HEAD_DIM,
            seqlen_q=SEQLEN_Q):
    q = torch.empty(1, dtype=E4M3) if q is None else q
    return _attention._descale_fields(q, (q_descale, k_descale, v_descale), BATCH, HEADS, HEADS_KV, seqlen_q,
                                      SEQLEN_K, head_dim, head_dim, causal, None)


def _per_block(head_dim=HEAD_DIM, causal=False):
    block_m, block_n = fa3jit.fp8_quant_blocks(head_dim, causal)
    return (torch.ones(BATCH, HEADS, -(-SEQLEN_Q // block_m)), torch.ones(BATCH, HEADS_KV, -(-SEQLEN_K // block_n)),
            torch.ones(BATCH, HEADS_KV, head_dim))


def test_per_head_descales_pass_their_pointers_and_strides():
    qd = torch.rand(HEADS_KV, BATCH).t()              # a transposed view: strides (1, BATCH)
    kd = torch.rand(BATCH, HEADS_KV)                  # contiguous
    vd = torch.tensor(0.5).expand(BATCH, HEADS_KV)    # a broadcast scalar: strides (0, 0)
    fields = _fields(qd, kd, vd)
    assert fields == (_capi.QUANT_PER_HEAD, qd.data_ptr(), 1, BATCH, kd.data_ptr(), HEADS_KV, 1, vd.data_ptr(), 0, 0)


@pytest.mark.parametrize("scalar", [torch.tensor(0.25), torch.tensor([0.25]), torch.tensor([[0.25]])],
                         ids=["0-d", "(1,)", "(1, 1)"])
def test_one_element_descales_are_per_tensor(scalar):
    fields = _fields(scalar, scalar, scalar)
    assert fields[0] == _capi.QUANT_PER_HEAD
    assert fields[1:] == (scalar.data_ptr(), 0, 0) * 3


def test_missing_descales_are_one_as_in_flash_attention_3():
    kd = torch.rand(BATCH, HEADS_KV)
    fields = _fields(None, kd, None)
    ones = _attention._ones_on(torch.device("cpu"))
    assert ones.dtype == torch.float32 and ones.tolist() == [1.0]
    assert fields == (_capi.QUANT_PER_HEAD, ones.data_ptr(), 0, 0, kd.data_ptr(), HEADS_KV, 1, ones.data_ptr(), 0, 0)
    assert _attention._ones_on(torch.device("cpu")) is ones  # made once per device


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_per_block_descales_are_chosen_by_shape(head_dim):
    qd, kd, vd = _per_block(head_dim)
    fields = _fields(qd, kd, vd, head_dim=head_dim)
    assert fields == (_capi.QUANT_PER_BLOCK, qd.data_ptr(), qd.stride(0), qd.stride(1), kd.data_ptr(), kd.stride(0),
                      kd.stride(1), vd.data_ptr(), vd.stride(0), vd.stride(1))


def test_per_block_shapes_follow_the_quant_blocks():
    block_m, block_n = fa3jit.fp8_quant_blocks(HEAD_DIM)
    qd, kd, vd = _per_block()
    assert qd.shape[2] == -(-SEQLEN_Q // block_m) and kd.shape[2] == -(-SEQLEN_K // block_n)
    wrong = torch.ones(BATCH, HEADS_KV, kd.shape[2] + 1)
    with pytest.raises(ValueError) as info:
        _fields(qd, wrong, vd)
    message = str(info.value)
    assert f"k_descale is shape {tuple(wrong.shape)}" in message
    assert f"(batch, num_heads_kv, ceil(seqlen_k / block_n)) = {tuple(kd.shape)}" in message
    assert f"block_n {block_n}" in message and "fa3jit.fp8_quant_blocks" in message


@pytest.mark.parametrize("which, needle", [
    (lambda qd, kd, vd: (qd, kd, None), "v_descale is None; per_block descales"),
    (lambda qd, kd, vd: (qd, torch.ones(BATCH, HEADS_KV), vd), "k_descale is shape (2, 2); per_block descales"),
    (lambda qd, kd, vd: (torch.tensor(1.0), kd, vd), "q_descale is shape (); per_block descales"),
    (lambda qd, kd, vd: (qd, kd, torch.ones(BATCH, HEADS_KV, 2 * HEAD_DIM)[..., ::2]),
     "v_descale: the last dimension must be contiguous"),
])
def test_per_block_descales_must_all_be_per_block(which, needle):
    with pytest.raises(ValueError) as info:
        _fields(*which(*_per_block()))
    assert needle in str(info.value)


@pytest.mark.parametrize("descale, error, needle", [
    (torch.ones(BATCH, HEADS_KV, dtype=torch.float64), ValueError,
     "q_descale.dtype is torch.float64; expected torch.float32 (shape (2, 2), device cpu)"),
    (torch.ones(BATCH, HEADS_KV, dtype=torch.bfloat16), ValueError, "q_descale.dtype is torch.bfloat16"),
    (torch.ones(BATCH, HEADS), ValueError, "q_descale has shape (2, 8); expected per_head (batch, num_heads_kv)"),
    (torch.ones(3), ValueError, "q_descale has shape (3,); expected per_head"),
    (torch.ones(1, 1, 1, 1), ValueError, "q_descale has shape (1, 1, 1, 1); expected per_head"),
    ([1.0], TypeError, "q_descale: expected a torch.Tensor"),
    (0.5, TypeError, "q_descale: expected a torch.Tensor"),
])
def test_bad_descales_are_named(descale, error, needle):
    with pytest.raises(error) as info:
        _fields(descale)
    assert needle in str(info.value)


def test_descales_must_be_on_qs_device():
    q = torch.empty(1, dtype=E4M3, device="meta")
    with pytest.raises(ValueError, match=r"k_descale is on cpu; expected q's device meta \(shape \(2, 2\)\)"):
        _fields(None, torch.ones(BATCH, HEADS_KV), None, q=q)


# ---- fp8_quant_blocks -----------------------------------------------------------------------------------

def test_fp8_quant_blocks_come_from_the_library():
    assert fa3jit.fp8_quant_blocks(128) == _capi.quant_blocks(128) == (128, 160)
    assert fa3jit.fp8_quant_blocks(256, causal=True) == (128, 96)
    # d96 is generated for e4m3 (a multiple of 16) on d96's 16-bit tile rows; 88 is a multiple of 8 only.
    assert fa3jit.fp8_quant_blocks(96) == _capi.quant_blocks(96) == (192, 128)
    with pytest.raises(fa3jit.Fa3jitValueError, match=r"head_dim = 88 is not supported for dtype e4m3; expected a "
                                                      r"multiple of 16 in \[16, 256\]"):
        fa3jit.fp8_quant_blocks(88)


# ---- the custom ops' fake implementations ---------------------------------------------------------------

def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode()


@pytest.mark.parametrize("out_dtype, expected", [(None, torch.bfloat16), (torch.float16, torch.float16),
                                                 (torch.bfloat16, torch.bfloat16)])
def test_fake_gives_the_fp8_output_dtype(out_dtype, expected):
    with _fake_mode():
        q, k, v = _qkv(device="cuda")
        scale = torch.ones(2, 2, device="cuda")
        out, lse = OPS.flash_attn_func(q, k, v, None, True, True, None, scale, scale, scale, out_dtype)
        assert out.dtype == expected and out.shape == q.shape and out.device == q.device
        assert lse.dtype == torch.float32 and lse.shape == (2, 4, 48)
        routed = fa3jit.flash_attn_func(q, k, v, causal=True, out_dtype=out_dtype)
        assert routed.dtype == expected
        given = torch.empty(q.shape, dtype=expected, device="cuda")
        assert fa3jit.flash_attn_func(q, k, v, out=given, q_descale=scale) is given


@pytest.mark.parametrize("kwargs, needle", [
    (dict(out_dtype=torch.float32), "out_dtype is torch.float32; an e4m3 call writes"),
    (dict(q_descale="float64"), "q_descale.dtype is torch.float64; expected torch.float32"),
    (dict(q_descale="3d"), "per_block descales (a 3-dimensional descale was given) need all three"),
    (dict(out="float16", out_dtype=torch.bfloat16), "out.dtype is torch.float16 but the call writes torch.bfloat16"),
])
def test_fake_rejects_what_flash_attn_func_rejects_for_fp8(kwargs, needle):
    with _fake_mode():
        q, k, v = _qkv(device="cuda")
        made = {"float64": torch.ones(2, 2, dtype=torch.float64, device="cuda"),
                "3d": torch.ones(2, 2, 1, device="cuda"),
                "float16": torch.empty(q.shape, dtype=torch.float16, device="cuda")}
        kwargs = {name: made.get(value, value) if isinstance(value, str) else value for name, value in kwargs.items()}
        with pytest.raises(ValueError) as info:
            fa3jit.flash_attn_func(q, k, v, **kwargs)
        assert needle in str(info.value)


def test_fake_reads_a_d_major_v_by_its_kernel_spec():
    """A Kernel whose spec has v_layout d_major travels as its spec; the fake output takes head_dim_v from the
    transposed v (batch, num_heads_kv, head_dim_v, seqlen_k rounded up to 16), and a seq-major v is refused."""
    spec = '{"dtype": "e4m3", "head_dim": 128, "v_layout": "d_major"}'
    with _fake_mode():
        q, k, _ = _qkv(seqlen_k=70, device="cuda")
        v_t = torch.empty(2, 2, 128, 80, device="cuda").to(E4M3)
        out, _ = OPS.flash_attn_func(q, k, v_t, None, False, False, spec)
        assert out.shape == q.shape and out.dtype == torch.bfloat16
        v = torch.empty(2, 70, 2, 128, device="cuda").to(E4M3)
        with pytest.raises(ValueError, match="d_major"):
            OPS.flash_attn_func(q, k, v, None, False, False, spec)


def test_fake_refuses_descales_on_16_bit_calls():
    with _fake_mode():
        q, k, v = _qkv(dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ValueError, match="q_descale is given but q.dtype is torch.bfloat16"):
            OPS.flash_attn_func(q, k, v, None, False, False, None, torch.ones(2, 2, device="cuda"))
        with pytest.raises(ValueError, match="out_dtype is torch.float16 but q.dtype is torch.bfloat16"):
            OPS.flash_attn_func(q, k, v, None, False, False, None, None, None, None, torch.float16)


# ---- on the GPU: results against the float64 reference -----------------------------------------------

def _quantize_case(batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, quant, causal, seed):
    """Random normal q, k, v quantised to e4m3 with power-of-two descales per scale group of `quant`. Returns
    (q8, k8, v8, descales as flash_attn_func takes them, dequantised q, k, v in float32)."""
    generator = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(shape, generator=generator).cuda()

    group = num_heads // num_heads_kv
    b = torch.arange(batch, device="cuda")[:, None, None, None]
    s_q = torch.arange(seqlen_q, device="cuda")[None, :, None, None]
    s_k = torch.arange(seqlen_k, device="cuda")[None, :, None, None]
    h = torch.arange(num_heads, device="cuda")[None, None, :, None]
    hk = torch.arange(num_heads_kv, device="cuda")[None, None, :, None]
    c = torch.arange(head_dim, device="cuda")[None, None, None, :]
    q_shape, k_shape = (batch, seqlen_q, num_heads, head_dim), (batch, seqlen_k, num_heads_kv, head_dim)
    if quant == "per_head":
        # FlashAttention-3's contract: every descale is per (batch, kv head), q's over the heads of its group.
        groups = {"q": ((b * num_heads_kv + h // group).expand(q_shape), (batch, num_heads_kv)),
                  "k": ((b * num_heads_kv + hk).expand(k_shape), (batch, num_heads_kv)),
                  "v": ((b * num_heads_kv + hk).expand(k_shape), (batch, num_heads_kv))}
    else:
        block_m, block_n = fa3jit.fp8_quant_blocks(head_dim, causal and seqlen_q > 1)
        m_blocks, n_blocks = -(-seqlen_q // block_m), -(-seqlen_k // block_n)
        groups = {"q": (((b * num_heads + h) * m_blocks + s_q // block_m).expand(q_shape),
                        (batch, num_heads, m_blocks)),
                  "k": (((b * num_heads_kv + hk) * n_blocks + s_k // block_n).expand(k_shape),
                        (batch, num_heads_kv, n_blocks)),
                  "v": (((b * num_heads_kv + hk) * head_dim + c).expand(k_shape), (batch, num_heads_kv, head_dim))}
    result = {}
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", k_shape)):
        ids, descale_shape = groups[name]
        x8, descale = quantize_e4m3(randn(*shape), ids, math.prod(descale_shape), generator)
        result[name] = (x8, descale.reshape(descale_shape), x8.float() * descale[ids])
    q8, k8, v8 = (result[n][0] for n in "qkv")
    descales = {f"{n}_descale": result[n][1] for n in "qkv"}
    return q8, k8, v8, descales, tuple(result[n][2] for n in "qkv")


SEQLENS = [(1, 239), (113, 203), (239, 1), (1023, 1023), (113, 1023), (1023, 113)]


@needs_gpu
@pytest.mark.parametrize("seqlen_q, seqlen_k", SEQLENS, ids=lambda p: str(p))
@pytest.mark.parametrize("heads", [(6, 6), (8, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("quant", ["per_head", "per_block"])
@pytest.mark.parametrize("head_dim", [64, 128, 256], ids=lambda d: f"d{d}")
def test_fp8_matches_the_float64_reference(head_dim, quant, causal, heads, seqlen_q, seqlen_k):
    num_heads, num_heads_kv = heads
    q8, k8, v8, descales, (q, k, v) = _quantize_case(2, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim,
                                                     quant, causal, seed=seqlen_q * 7 + seqlen_k)
    out, lse = fa3jit.flash_attn_func(q8, k8, v8, causal=causal, return_lse=True, **descales)
    assert out.dtype == torch.bfloat16 and out.shape == (2, seqlen_q, num_heads, head_dim)
    check_fp8_against_reference(out, lse, q, k, v, causal)


@needs_gpu
@pytest.mark.parametrize("form", ["expanded", "scalar", "missing"])
def test_per_tensor_descales(form):
    """One scale for the whole tensor: an expand()ed (batch, num_heads_kv) view, a 0-d tensor, or none (1)."""
    generator = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 239, 8, 128, generator=generator).cuda() for _ in range(3))
    k, v = k[:, :, :2].contiguous(), v[:, :, :2].contiguous()
    descale = 1.0 if form == "missing" else 2.0 ** -4
    q8, k8, v8 = ((t / descale).to(E4M3) for t in (q, k, v))
    if form == "missing":
        kwargs = {}
    elif form == "scalar":
        kwargs = {name: torch.tensor(descale, device="cuda") for name in ("q_descale", "k_descale", "v_descale")}
    else:
        one = torch.tensor(descale, device="cuda")
        kwargs = {name: one.expand(2, 2) for name in ("q_descale", "k_descale", "v_descale")}
    out, lse = fa3jit.flash_attn_func(q8, k8, v8, causal=True, return_lse=True, **kwargs)
    check_fp8_against_reference(out, lse, q8.float() * descale, k8.float() * descale, v8.float() * descale, True)


@needs_gpu
def test_fp16_output_and_out_argument():
    q8, k8, v8, descales, (q, k, v) = _quantize_case(1, 113, 239, 8, 2, 128, "per_head", False, seed=3)
    out = fa3jit.flash_attn_func(q8, k8, v8, out_dtype=torch.float16, **descales)
    assert out.dtype == torch.float16
    check_fp8_against_reference(out, None, q, k, v, False)
    given = torch.full((1, 113, 8, 128), float("nan"), dtype=torch.float16, device="cuda")
    assert fa3jit.flash_attn_func(q8, k8, v8, out=given, **descales) is given
    torch.testing.assert_close(given, out, rtol=0, atol=0)


@needs_gpu
def test_descale_on_another_device_or_dtype_is_refused_on_the_gpu():
    q8, k8, v8, descales, _ = _quantize_case(1, 64, 64, 2, 2, 128, "per_head", False, seed=4)
    with pytest.raises(ValueError, match="k_descale is on cpu; expected q's device cuda:0"):
        fa3jit.flash_attn_func(q8, k8, v8, **{**descales, "k_descale": descales["k_descale"].cpu()})
    with pytest.raises(ValueError, match="v_descale.dtype is torch.float16"):
        fa3jit.flash_attn_func(q8, k8, v8, **{**descales, "v_descale": descales["v_descale"].half()})


@needs_gpu
def test_a_pinned_per_block_kernel_uses_its_own_blocks():
    spec = {"dtype": "e4m3", "head_dim": 128, "quant": "per_block", "tile": {"block_n": 128}}
    with fa3jit.Kernel(spec) as kernel:
        block_m, block_n = fa3jit.fp8_quant_blocks(128, kernel=kernel)
        assert block_n == 128
        q8, k8, v8, _, _ = _quantize_case(1, 239, 1023, 4, 2, 128, "per_head", False, seed=6)
        # One power-of-two descale everywhere keeps the dequantised values near 1: with descale 1 the raw e4m3
        # values (up to 448) give scores in the thousands, where the FP8 GEMM's rounding decides the argmax key.
        d = 2.0 ** -6
        qd = torch.full((1, 4, -(-239 // block_m)), d, device="cuda")
        kd = torch.full((1, 2, -(-1023 // block_n)), d, device="cuda")
        vd = torch.full((1, 2, 128), d, device="cuda")
        out = fa3jit.flash_attn_func(q8, k8, v8, kernel=kernel, q_descale=qd, k_descale=kd, v_descale=vd)
        check_fp8_against_reference(out, None, q8.float() * d, k8.float() * d, v8.float() * d, False, block_n=block_n)
        # The tile table's blocks (block_n 160) would not fit this kernel's k_descale.
        with pytest.raises(ValueError, match="k_descale"):
            fa3jit.flash_attn_func(q8, k8, v8, kernel=kernel, q_descale=qd,
                                   k_descale=torch.full((1, 2, -(-1023 // 160)), d, device="cuda"), v_descale=vd)


# ---- v_layout d_major: V given transposed ------------------------------------------------------------------

def test_v_to_d_major_puts_each_key_at_its_position():
    """Every element lands where the layout says (fa3jit_fp8_key_positions), zeros past seqlen_k; CPU tensors."""
    positions = _capi.fp8_key_positions()
    assert sorted(positions) == list(range(16))
    batch, seqlen_k, heads, dv = 2, 37, 3, 32
    # Distinct e4m3 bit patterns per (s, d): the test reads the bytes back.
    codes = (torch.arange(batch * seqlen_k * heads * dv) % 120 + 1).to(torch.uint8)
    v = codes.view(batch, seqlen_k, heads, dv).view(E4M3)
    t = fa3jit.v_to_d_major(v).view(torch.uint8)
    assert t.shape == (batch, heads, dv, 48) and t.is_contiguous() and t.dtype == torch.uint8
    src = v.view(torch.uint8)
    for s in range(seqlen_k):
        torch.testing.assert_close(t[:, :, :, s // 16 * 16 + positions[s % 16]], src[:, s],
                                   rtol=0, atol=0)
    filled = {s // 16 * 16 + positions[s % 16] for s in range(seqlen_k)}
    for p in set(range(48)) - filled:
        assert int(t[:, :, :, p].to(torch.int32).sum()) == 0


@needs_gpu
@pytest.mark.parametrize("head_dim, causal, quant, seqlen_q, seqlen_k", [
    (128, False, "per_head", 239, 1023), (128, True, "per_block", 1023, 1023), (64, True, "per_head", 113, 799),
    (256, False, "per_block", 799, 113), (256, True, "per_head", 1, 4224)])
def test_a_d_major_kernel_gives_the_transposing_kernels_output_bit_for_bit(head_dim, causal, quant, seqlen_q,
                                                                            seqlen_k):
    """The same tile with V transposed in the kernel or given transposed (fa3jit.v_to_d_major) computes the same
    sums in the same order: out and lse identical, and within FA3's fp8 rule of the reference."""
    block_m, block_n = fa3jit.fp8_quant_blocks(head_dim, causal=causal)
    spec = {"dtype": "e4m3", "head_dim": head_dim, "causal": causal, "quant": quant,
            "tile": {"block_m": block_m, "block_n": block_n}}
    q8, k8, v8, descales, (q, k, v) = _quantize_case(2, seqlen_q, seqlen_k, 8, 2, head_dim, quant, causal, seed=11)
    with fa3jit.Kernel(spec) as plain, fa3jit.Kernel({**spec, "v_layout": "d_major"}) as d_major:
        out, lse = fa3jit.flash_attn_func(q8, k8, v8, causal=causal, return_lse=True, kernel=plain, **descales)
        v_t = fa3jit.v_to_d_major(v8)
        assert v_t.shape == (2, 2, head_dim, (seqlen_k + 15) // 16 * 16)
        out_t, lse_t = fa3jit.flash_attn_func(q8, k8, v_t, causal=causal, return_lse=True, kernel=d_major,
                                              **descales)
        torch.testing.assert_close(out_t, out, rtol=0, atol=0)
        torch.testing.assert_close(lse_t, lse, rtol=0, atol=0)
        check_fp8_against_reference(out_t, lse_t, q, k, v, causal, block_n=block_n)
        # A seq-major v given to the d_major kernel is refused by shape, naming the layout.
        with pytest.raises(ValueError, match="d_major"):
            fa3jit.flash_attn_func(q8, k8, v8, causal=causal, kernel=d_major, **descales)
