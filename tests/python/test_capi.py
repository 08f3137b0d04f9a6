"""The C ABI (version 2) through ctypes, without a GPU: version, status names, capabilities, the thread-local
last error, argument checks of fa3jit_attention_forward that come before any driver call, the workspace size,
kernel handles, and fa3jit_compile_spec with NVRTC and the disk cache (kernels compile on the CPU).

Tests that need a live kernel handle (fa3jit_kernel_create loads the kernel into the CUDA driver) skip with
the library's message where no driver or GPU is present."""

import ctypes
import json
import pathlib
import re
import threading

import pytest

import fa3jit
from fa3jit import _capi

from support import ROOT, needs_library

pytestmark = needs_library

SPEC_BF16_D128 = '{"dtype": "bf16", "head_dim": 128, "causal": true}'
SPEC_BF16_D128_FULL = '{"dtype": "bf16", "head_dim": 128}'


def _project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(fa3jit VERSION (\d+\.\d+\.\d+)", text).group(1)


def _status_name(status):
    return _capi.STATUS_NAMES.get(status, f"unknown status {status}")


def _last_error():
    return _capi.library().fa3jit_last_error().decode()


def test_version_is_the_project_version():
    assert fa3jit.version() == _project_version()


def test_status_names_match_error_codes():
    lib = _capi.library()
    for status, name in _capi.STATUS_NAMES.items():
        assert lib.fa3jit_status_name(status).decode() == name
    assert lib.fa3jit_status_name(42).decode() == "unknown"


# ---- capabilities ---------------------------------------------------------------------------------------

def test_capabilities_json_parses_and_lists_what_the_build_generates():
    raw = _capi.library().fa3jit_capabilities_json().decode()
    caps = json.loads(raw)
    assert caps == fa3jit.capabilities()
    assert caps["abi_version"] == _capi.ABI_VERSION == 2
    assert caps["version"] == fa3jit.version()
    attention = caps["families"]["attention_fwd"]
    assert attention["dtypes"] == ["fp16", "bf16", "e4m3"]
    assert attention["head_dims"] == [64, 96, 128, 192, 256]
    assert attention["head_dim_rule"] == {"min": 8, "max": 256, "multiple_of": 8}
    assert attention["fp8_head_dim_rule"] == {"min": 16, "max": 256, "multiple_of": 16}
    assert attention["head_dim_v_may_differ"] is True
    assert {"causal", "gqa", "mqa", "lse"} <= set(attention["features"])
    assert isinstance(attention["description"], str) and attention["description"]


def test_capabilities_has_the_documented_shape():
    """fa3jit.capabilities()'s docstring: every family has a description and a list of features; the families
    of this release and the keys the docstring names are there, with the documented types."""
    caps = fa3jit.capabilities()
    assert set(caps) == {"abi_version", "version", "families"}
    assert isinstance(caps["abi_version"], int) and isinstance(caps["version"], str)
    assert {"attention_fwd", "attention_combine"} <= set(caps["families"])
    for name, family in caps["families"].items():
        assert isinstance(family["description"], str) and family["description"], name
        assert isinstance(family["features"], list) and all(isinstance(f, str) for f in family["features"]), name
    combine = caps["families"]["attention_combine"]
    assert {"out_dtypes", "partial_dtype", "head_dim_v", "max_splits"} <= set(combine)
    assert {"min", "max", "multiple_of"} <= set(combine["head_dim_v"])
    assert {"min", "max", "default"} <= set(combine["max_splits"])


def test_capabilities_returns_a_new_dict_each_call():
    caps = fa3jit.capabilities()
    caps["families"].clear()
    assert fa3jit.capabilities()["families"]["attention_fwd"]["head_dims"] == [64, 96, 128, 192, 256]


# ---- fa3jit_attention_forward argument checks -----------------------------------------------------------

def _params(**fields):
    """bf16, batch 1, 128 x 128, 8 heads over 2 kv heads, head_dim 128, fake device pointers (never used:
    every case fails in the argument checks)."""
    fake = 0x7F0000000000
    defaults = dict(dtype=_capi.DTYPE_BF16, causal=0, batch=1, seqlen_q=128, seqlen_k=128, num_heads=8,
                    num_heads_kv=2, head_dim=128, head_dim_v=128,
                    q=_capi.Tensor(fake, 128 * 8 * 128, 8 * 128, 128),
                    k=_capi.Tensor(fake + (1 << 24), 128 * 2 * 128, 2 * 128, 128),
                    v=_capi.Tensor(fake + (2 << 24), 128 * 2 * 128, 2 * 128, 128),
                    out=_capi.Tensor(fake + (3 << 24), 128 * 8 * 128, 8 * 128, 128))
    defaults.update(fields)
    return _capi.ForwardParams(**defaults)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    with _capi.Runtime(cache_dir=tmp_path_factory.mktemp("cache")) as rt:
        yield rt


@pytest.mark.parametrize("fields, needle", [
    (dict(q=_capi.Tensor(0, 0, 0, 0)), "q.data is NULL"),
    (dict(out=_capi.Tensor(0, 0, 0, 0)), "out.data is NULL"),
    (dict(dtype=7), "dtype is 7"),
    (dict(causal=2), "causal is 2"),
    (dict(softmax_scale=float("nan")), "softmax_scale"),
    (dict(struct_size=8), "struct_size is 8"),
    # Between the header before the e4m3 fields and this one: no header's size.
    (dict(struct_size=_capi.FORWARD_PARAMS_SIZE_BEFORE_E4M3 + 8), "struct_size is 240"),
    # The e4m3 enums are read as 32-bit integers and range-checked before any other use.
    (dict(quant=3), "params.quant is 3"),
    (dict(quant=-1), "params.quant is -1"),
    (dict(out_dtype=3), "params.out_dtype is 3"),
    (dict(out_dtype=-2), "params.out_dtype is -2"),
])
def test_forward_rejects_bad_params_before_any_launch(runtime, fields, needle):
    with pytest.raises(fa3jit.Fa3jitValueError, match=re.escape(needle)) as info:
        runtime.forward(_params(**fields), 0)
    assert info.value.status_name == "invalid_argument"
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith("fa3jit_attention_forward: ")


@pytest.mark.parametrize("fields, status_name, needles", [
    (dict(head_dim=84, head_dim_v=84), "invalid_argument", ["head_dim", "84", "a multiple of 8 in [8, 256]"]),
    (dict(num_heads_kv=3), "invalid_argument", ["num_heads", "num_heads_kv"]),
    (dict(batch=0), "invalid_argument", ["batch"]),
    (dict(seqlen_k=-5), "invalid_argument", ["seqlen_k"]),
    (dict(softmax_scale=-1.0), "invalid_argument", ["softmax_scale"]),
    (dict(head_dim=64, head_dim_v=256), "unsupported", ["head_dim_v", "(256)", "no bf16 tile fits"]),
    (dict(dtype=_capi.DTYPE_E4M3), "invalid_argument", ["quant = none", "per_head or per_block"]),
    (dict(dtype=_capi.DTYPE_E4M3, quant=_capi.QUANT_PER_HEAD, head_dim=72, head_dim_v=72), "invalid_argument",
     ["head_dim = 72", "e4m3"]),
    (dict(dtype=_capi.DTYPE_E4M3, quant=_capi.QUANT_PER_HEAD, out_dtype=_capi.DTYPE_E4M3), "invalid_argument",
     ["out_dtype = e4m3", "\"bf16\", \"fp16\""]),
    (dict(quant=_capi.QUANT_PER_HEAD), "invalid_argument", ["quant = per_head", "bf16"]),
    (dict(out_dtype=_capi.DTYPE_FP16), "invalid_argument", ["out_dtype = fp16", "bf16"]),
    (dict(q_descale=_capi.Scale(0x7F0000100000, 0, 0)), "invalid_argument", ["q_descale", "must be null"]),
])
def test_runtime_shape_checks_come_before_the_driver(runtime, fields, status_name, needles):
    with pytest.raises(fa3jit.Fa3jitValueError) as info:
        runtime.forward(_params(**fields), 0)
    assert info.value.status_name == status_name
    assert all(needle in str(info.value) for needle in needles), str(info.value)


def test_a_caller_of_the_header_before_the_e4m3_fields_is_read_as_a_16_bit_call(runtime):
    """struct_size = offsetof(out_dtype): the bytes after it are not read (here they hold an invalid quant and
    out_dtype), and the call goes on to the shape checks as a 16-bit call."""
    old = _capi.FORWARD_PARAMS_SIZE_BEFORE_E4M3
    params = _params(struct_size=old, head_dim=84, head_dim_v=84, quant=99, out_dtype=99)
    with pytest.raises(fa3jit.Fa3jitValueError, match="head_dim = 84") as info:
        runtime.forward(params, 0)
    assert info.value.status_name == "invalid_argument"
    assert runtime.workspace_size(_params(struct_size=old, quant=99)) == 0
    # Such a caller cannot describe an e4m3 call (it has no quant field): refused like quant NONE.
    with pytest.raises(fa3jit.Fa3jitValueError, match="quant = none"):
        runtime.forward(_params(struct_size=old, dtype=_capi.DTYPE_E4M3, quant=_capi.QUANT_PER_HEAD), 0)


# ---- the serving fields (fa3jit.h, "Serving layouts" and "Growth") -----------------------------------------

def test_a_caller_of_the_header_before_the_serving_fields_is_read_without_them(runtime):
    """struct_size = offsetof(cu_seqlens_q): the bytes after it (here an out-of-range num_splits and pack_gqa and
    index pointers) are not read; the call is read with num_splits 1 and pack_gqa 0, so it runs as before."""
    old = _capi.FORWARD_PARAMS_SIZE_BEFORE_SERVING
    garbage = dict(num_splits=-7, pack_gqa=9, cu_seqlens_q=0x7F0000F00000, page_table=0x7F0000F10000, page_size=3)
    with pytest.raises(fa3jit.Fa3jitValueError, match="head_dim = 84"):
        runtime.forward(_params(struct_size=old, head_dim=84, head_dim_v=84, **garbage), 0)
    assert runtime.workspace_size(_params(struct_size=old, **dict(garbage, num_splits=5))) == 0
    # Its e4m3 fields are still read.
    with pytest.raises(fa3jit.Fa3jitValueError, match="params.quant is 3"):
        runtime.forward(_params(struct_size=old, quant=3, **garbage), 0)


@pytest.mark.parametrize("struct_size", [_capi.FORWARD_PARAMS_SIZE_BEFORE_SERVING + 8,
                                         ctypes.sizeof(_capi.ForwardParams) - 4])
def test_a_size_between_the_headers_is_refused(runtime, struct_size):
    with pytest.raises(fa3jit.Fa3jitValueError, match=f"struct_size is {struct_size};") as info:
        runtime.forward(_params(struct_size=struct_size), 0)
    message = str(info.value)
    assert f"or {_capi.FORWARD_PARAMS_SIZE_BEFORE_E4M3} " in message
    assert f"or {_capi.FORWARD_PARAMS_SIZE_BEFORE_SERVING} " in message


@pytest.mark.parametrize("fields, needle", [
    (dict(num_splits=-1), "params.num_splits is -1"),
    (dict(num_splits=257), "params.num_splits is 257"),
    (dict(num_splits=-(1 << 31)), "params.num_splits is -2147483648"),
    (dict(pack_gqa=2), "params.pack_gqa is 2"),
    (dict(pack_gqa=-2), "params.pack_gqa is -2"),
])
def test_serving_options_out_of_range_are_refused(runtime, fields, needle):
    with pytest.raises(fa3jit.Fa3jitValueError, match=re.escape(needle)) as info:
        runtime.forward(_params(**fields), 0)
    assert info.value.status_name == "invalid_argument"
    with pytest.raises(fa3jit.Fa3jitValueError, match=re.escape(needle)):
        runtime.workspace_size(_params(**fields))


def test_forward_params_defaults_are_off():
    """ForwardParams() as fa3jit_forward_params_init: no index tensor, no split (so no workspace), no packing."""
    params = _capi.ForwardParams()
    assert (params.num_splits, params.pack_gqa) == (1, 0)
    assert params.cu_seqlens_q is None and params.cu_seqlens_k is None and params.seqused_k is None
    assert params.page_table is None and params.max_pages == 0 and params.page_size == 0


@pytest.mark.parametrize("num_splits", [0, 3])
def test_workspace_size_of_a_split_checks_the_call(runtime, num_splits):
    """With num_splits 0 (the heuristic) or > 1 the size depends on the call, which is checked as
    fa3jit_attention_forward checks it: NULL tensors are refused (num_splits 1 reads none, above)."""
    null = _capi.Tensor(0, 0, 0, 0)
    with pytest.raises(fa3jit.Fa3jitValueError, match="q.data is NULL"):
        runtime.workspace_size(_params(q=null, k=null, v=null, out=null, num_splits=num_splits))


# ---- fa3jit_attention_quant_blocks ----------------------------------------------------------------------

def test_quant_blocks_are_the_tile_of_the_e4m3_kernel():
    """The numbers come from the tile table (kernels/attention_fwd/tile_table.cpp: FA3's fp8 tiles); a change
    of the table's e4m3 tiles changes them here too."""
    assert fa3jit.fp8_quant_blocks(128) == (128, 160)
    assert fa3jit.fp8_quant_blocks(256) == (128, 96)
    for head_dim in (64, 128, 256):
        assert fa3jit.fp8_quant_blocks(head_dim, causal=True) == _capi.quant_blocks(head_dim, True)


@pytest.mark.parametrize("head_dim, causal, needle", [
    (72, False, "head_dim = 72"),
    (1 << 40, False, "head_dim = 1099511627776"),
    (0, False, "head_dim = 0"),
])
def test_quant_blocks_reject_what_e4m3_does_not_support(head_dim, causal, needle):
    with pytest.raises(fa3jit.Fa3jitValueError, match=re.escape(needle)) as info:
        fa3jit.fp8_quant_blocks(head_dim, causal)
    assert info.value.status_name == "invalid_argument"
    assert "expected a multiple of 16 in [16, 256]" in str(info.value)


def test_quant_blocks_argument_errors():
    lib = _capi.library()
    block = ctypes.c_int32()
    assert _status_name(lib.fa3jit_attention_quant_blocks(None, 128, 2, ctypes.byref(block),
                                                          ctypes.byref(block))) == "invalid_argument"
    assert "causal is 2" in _last_error()
    assert _status_name(lib.fa3jit_attention_quant_blocks(None, 128, 0, None, ctypes.byref(block))) \
        == "invalid_argument"
    assert "block_m or block_n is NULL" in _last_error()
    with pytest.raises(TypeError, match="kernel"):
        fa3jit.fp8_quant_blocks(128, kernel="not a kernel")


@pytest.mark.parametrize("struct_type, field, value", [
    (_capi.ForwardParams, "head_dim", 2**64 + 64),    # int64: ctypes would keep 64
    (_capi.ForwardParams, "num_splits", 2**32 + 2),   # int32: would be 2
    (_capi.ForwardParams, "num_splits", -2**31 - 1),
    (_capi.QuantizeParams, "q_block_rows", 2**32 + 128),
    (_capi.Tensor, "data", -1),                       # a pointer holds no negative address
    (_capi.CallPlan, "workspace_bytes", 2**64),
])
def test_struct_fields_refuse_integers_they_cannot_hold(struct_type, field, value):
    # ctypes keeps the low bits of an integer too large for its field: the library would read a plausible value.
    with pytest.raises(ValueError, match=rf"^{field} is {value}; expected an integer in \["):
        struct_type(**{field: value})
    params = struct_type()
    with pytest.raises(ValueError, match=rf"^{field} is {value}; "):
        setattr(params, field, value)
    if "__init__" not in vars(struct_type):  # positionally, as ctypes allows (the structs with defaults take keywords)
        fields = [name for name, _ in struct_type._fields_]
        with pytest.raises(ValueError, match=rf"^{field} is {value}; "):
            struct_type(*([0] * fields.index(field) + [value]))
    # The edges of each range are accepted and read back as given.
    lowest, highest = _capi._int_bounds(dict(struct_type._fields_)[field])
    for edge in (lowest, highest):
        assert getattr(struct_type(**{field: edge}), field) in (edge, None if edge == 0 else edge)


def test_quant_blocks_refuse_a_head_dim_beyond_int64():
    with pytest.raises(ValueError, match=r"^head_dim is 18446744073709551744; expected an integer in"):
        _capi.quant_blocks(2**64 + 128)
    with pytest.raises(ValueError, match=r"^head_dim is 18446744073709551744; "):
        fa3jit.fp8_quant_blocks(2**64 + 128)
    with pytest.raises(ValueError, match=r"^head_dim_v is 1180591620717411303424; "):
        fa3jit.fp8_quant_blocks(128, head_dim_v=2**70)


def test_strings_with_a_nul_character_are_refused_by_name(runtime, tmp_path):
    # A C string ends at the NUL: the rest of the spec or path would be dropped without a word.
    with pytest.raises(ValueError, match=r"^spec contains a NUL character \(at byte 33\)"):
        runtime.compile_spec('{"dtype": "bf16", "head_dim": 64}\0{"head_dim": 256}')
    with pytest.raises(ValueError, match=r"^manifest contains a NUL character"):
        runtime.warm_manifest('{"kind": "serving_manifest"}\0')
    with pytest.raises(ValueError, match=r"^cache_dir contains a NUL character"):
        _capi.Runtime(str(tmp_path) + "\0/elsewhere")
    with pytest.raises(ValueError, match=r"^spec contains a NUL character"):
        fa3jit.Kernel('{"dtype": "bf16", "head_dim": 64}\0')


def test_forward_with_null_runtime_or_params_is_refused(runtime):
    lib = _capi.library()
    params = _params()
    status = lib.fa3jit_attention_forward(None, None, ctypes.byref(params), None)
    assert _status_name(status) == "invalid_argument"
    assert "runtime is NULL" in _last_error()
    status = lib.fa3jit_attention_forward(runtime.handle, None, None, None)
    assert _status_name(status) == "invalid_argument"
    assert "params is NULL" in _last_error()


def test_forward_with_a_destroyed_runtime_is_refused(tmp_path):
    lib = _capi.library()
    rt = _capi.Runtime(cache_dir=tmp_path / "cache")
    handle = rt.handle
    params = _params()  # made before the destroy: nothing should reuse the freed memory before the call
    rt.close()
    with pytest.raises(RuntimeError, match="closed"):
        rt.forward(params, 0)
    # The raw handle after destroy: best effort, detected while the memory still holds the dead magic.
    status = lib.fa3jit_attention_forward(handle, None, ctypes.byref(params), None)
    assert _status_name(status) == "invalid_argument"
    assert "not a live fa3jit_runtime" in _last_error()


def test_larger_struct_from_a_newer_header_is_accepted_only_with_zero_tail(runtime):
    lib = _capi.library()
    size = ctypes.sizeof(_capi.ForwardParams)
    buffer = ctypes.create_string_buffer(size + 16)
    params = _params(q=_capi.Tensor(0, 0, 0, 0))  # fails later, at q, once the struct is accepted
    params.struct_size = size + 16
    ctypes.memmove(buffer, ctypes.byref(params), size)
    status = lib.fa3jit_attention_forward(runtime.handle, None, buffer, None)
    assert _status_name(status) == "invalid_argument"
    assert "q.data is NULL" in _last_error()
    buffer[size + 3] = b"\x01"
    status = lib.fa3jit_attention_forward(runtime.handle, None, buffer, None)
    assert _status_name(status) == "invalid_argument"
    assert f"at byte {size + 3}" in _last_error()


def test_packed_params_reach_the_library_field_by_field(runtime):
    """The bytes flash_attn_func packs (PARAMS_CALL_STRUCT into a ForwardParams, passed by address) are read
    by the library as the fields they are meant to be: each bad value is reported under its own name."""
    params = _capi.ForwardParams()
    address = ctypes.addressof(params)
    lib = _capi.library()
    fake = 0x7F0000000000

    def call(**changes):
        values = dict(dtype=_capi.DTYPE_BF16, causal=0, batch=1, seqlen_q=128, seqlen_k=128, num_heads=8,
                      num_heads_kv=2, head_dim=128, head_dim_v=128, q=fake, k=fake + 4096, v=fake + 8192,
                      out=fake + 12288, lse=0, softmax_scale=0.0)
        values.update(changes)
        strides = (1 << 20, 4096, 128)
        _capi.PARAMS_CALL_STRUCT.pack_into(
            params, _capi.PARAMS_CALL_OFFSET, values["dtype"], values["causal"], values["batch"],
            values["seqlen_q"], values["seqlen_k"], values["num_heads"], values["num_heads_kv"], values["head_dim"],
            values["head_dim_v"], values["q"], *strides, values["k"], *strides, values["v"], *strides,
            values["out"], *strides, values["lse"], values["softmax_scale"])
        status = lib.fa3jit_attention_forward(runtime.handle, None, address, None)
        return _status_name(status), _last_error()

    assert call(causal=3) == ("invalid_argument", "params.causal is 3; expected 0 or 1")
    assert "dtype is 9" in call(dtype=9)[1]
    assert "seqlen_q" in call(seqlen_q=0)[1]
    assert "seqlen_k" in call(seqlen_k=0)[1]
    assert "num_heads = 8 is not a multiple of num_heads_kv = 3" in call(num_heads_kv=3)[1]
    assert "head_dim_v = 260" in call(head_dim_v=260)[1]
    assert "no bf16 tile fits" in call(head_dim=64, head_dim_v=256)[1]
    assert "k.data is NULL" in call(k=0)[1]
    assert "v.data is NULL" in call(v=0)[1]
    assert "out.data is NULL" in call(out=0)[1]
    assert "softmax_scale" in call(softmax_scale=float("inf"))[1]
    assert "lse is not 4-byte aligned" in call(lse=fake + 2)[1]


def test_last_error_is_per_call_and_per_thread(runtime):
    lib = _capi.library()
    with pytest.raises(ValueError):
        runtime.forward(_params(causal=3), 0)
    assert "causal is 3" in _last_error()

    seen_in_other_thread = []
    thread = threading.Thread(target=lambda: seen_in_other_thread.append(lib.fa3jit_last_error().decode()))
    thread.start()
    thread.join()
    assert seen_in_other_thread == [""]

    # A successful status-returning call clears it.
    handle = ctypes.c_void_p()
    assert lib.fa3jit_runtime_create(None, ctypes.byref(handle)) == 0
    assert _last_error() == ""
    lib.fa3jit_runtime_destroy(handle)


def test_runtime_create_rejects_unset_struct_size():
    lib = _capi.library()
    options = _capi.RuntimeOptions(struct_size=0, cache_dir=None)
    handle = ctypes.c_void_p(1234)
    status = lib.fa3jit_runtime_create(ctypes.byref(options), ctypes.byref(handle))
    assert _status_name(status) == "invalid_argument"
    assert "fa3jit_runtime_options.struct_size is 0" in _last_error()
    assert not handle.value  # *out is NULL on failure


# ---- fa3jit_attention_workspace_size --------------------------------------------------------------------

@pytest.mark.parametrize("fields", [dict(), dict(seqlen_q=1, seqlen_k=100000), dict(batch=64),
                                    dict(num_splits=1, pack_gqa=-1, page_size=64), dict(causal=1, seqlen_q=1)])
def test_workspace_size_is_zero_without_a_split(runtime, fields):
    assert runtime.workspace_size(_params(**fields)) == 0


@pytest.mark.parametrize("fields", [dict(causal=1), dict(causal=1, batch=64, seqlen_q=113, seqlen_k=4224)])
def test_workspace_size_of_a_causal_call_is_its_tile_counter(runtime, fields):
    """A d128 dense causal call runs the tile table's persistent grid, whose dynamic tile scheduler counts in 16 bytes
    of workspace (seqlen_q 1 above runs the non-causal kernel: no key is hidden from a single bottom-right row)."""
    assert runtime.workspace_size(_params(**fields)) == 16 == fa3jit.attention._CAUSAL_WORKSPACE_BYTES


def test_workspace_size_reads_no_pointer(runtime):
    """Without a split (num_splits 1, ForwardParams()'s default) nothing but the struct is read: NULL tensors are
    fine (a caller sizes the workspace before allocating)."""
    null = _capi.Tensor(0, 0, 0, 0)
    assert runtime.workspace_size(_params(q=null, k=null, v=null, out=null)) == 0


def test_workspace_size_argument_errors(runtime):
    lib = _capi.library()
    size = ctypes.c_size_t(77)
    params = _params()
    assert _status_name(lib.fa3jit_attention_workspace_size(None, ctypes.byref(params), ctypes.byref(size))) \
        == "invalid_argument"
    assert "runtime is NULL" in _last_error()
    assert _status_name(lib.fa3jit_attention_workspace_size(runtime.handle, None, ctypes.byref(size))) \
        == "invalid_argument"
    assert _status_name(lib.fa3jit_attention_workspace_size(runtime.handle, ctypes.byref(params), None)) \
        == "invalid_argument"
    with pytest.raises(fa3jit.Fa3jitValueError, match="struct_size is 8") as info:
        runtime.workspace_size(_params(struct_size=8))
    assert info.value.status_name == "invalid_argument"


# ---- kernel handles: argument errors (no driver needed) --------------------------------------------------

def test_kernel_create_argument_errors(runtime):
    lib = _capi.library()
    out = ctypes.c_void_p(1234)
    spec = SPEC_BF16_D128.encode()
    assert _status_name(lib.fa3jit_kernel_create(None, spec, ctypes.byref(out))) == "invalid_argument"
    assert "runtime is NULL" in _last_error()
    assert not out.value  # *out is NULL on failure
    out = ctypes.c_void_p(1234)
    assert _status_name(lib.fa3jit_kernel_create(runtime.handle, None, ctypes.byref(out))) == "invalid_argument"
    assert "spec_json is NULL" in _last_error()
    assert not out.value
    assert _status_name(lib.fa3jit_kernel_create(runtime.handle, spec, None)) == "invalid_argument"
    assert "out is NULL" in _last_error()


@pytest.mark.parametrize("spec, status_name, needle", [
    ('{"dtype": "bf16", "head_dim": 84}', "invalid_spec", "head_dim"),
    ('{"dtype": "bf16", "head_dim": 128, "bogus_field": 1}', "invalid_spec", "bogus_field"),
    ('{"dtype": "bf16", ', "invalid_spec", "not valid JSON"),
    ('{"kind": "no_such_family", "dtype": "bf16"}', "invalid_spec", "no_such_family"),
    ('{"dtype": "e4m3", "head_dim": 72}', "invalid_spec", "head_dim"),
    ('{"dtype": "bf16", "head_dim": 128, "quant": "per_head"}', "invalid_spec", "quant"),
])
def test_kernel_create_rejects_bad_specs_before_the_driver(runtime, spec, status_name, needle):
    with pytest.raises(fa3jit.Fa3jitValueError, match=re.escape(needle)) as info:
        fa3jit.Kernel(spec, runtime=runtime)
    assert info.value.status_name == status_name
    assert str(info.value).startswith("fa3jit_kernel_create: ")


def test_kernel_spec_must_be_text_or_dict(runtime):
    with pytest.raises(TypeError, match="spec"):
        fa3jit.Kernel(128, runtime=runtime)


def test_kernel_get_info_and_destroy_with_null():
    lib = _capi.library()
    info = _capi.KernelInfo()
    assert _status_name(lib.fa3jit_kernel_get_info(None, ctypes.byref(info))) == "invalid_argument"
    assert "kernel or out is NULL" in _last_error()
    lib.fa3jit_kernel_destroy(None)  # ignored


def test_forward_with_a_non_kernel_handle_is_refused(runtime):
    """A pointer that is not a kernel handle (here: the runtime's) fails the magic-number check."""
    lib = _capi.library()
    status = lib.fa3jit_attention_forward(runtime.handle, runtime.handle, ctypes.byref(_params()), None)
    assert _status_name(status) == "invalid_argument"
    assert "kernel is not a live fa3jit_kernel" in _last_error()


# ---- kernel handles: live (the kernel is loaded into the driver) ----------------------------------------

def _create_kernel_or_skip(runtime, spec):
    try:
        return fa3jit.Kernel(spec, runtime=runtime)
    except fa3jit.Fa3jitRuntimeError as error:
        if error.status_name in ("no_driver", "driver_error"):
            pytest.skip(f"a live kernel handle needs the CUDA driver and a GPU: {error}")
        raise


@pytest.fixture(scope="module")
def causal_kernel(runtime):
    kernel = _create_kernel_or_skip(runtime, SPEC_BF16_D128)
    yield kernel
    kernel.close()


def test_kernel_info_describes_the_spec(causal_kernel):
    info = causal_kernel.info()
    assert info["kind"] == "attention_fwd"
    assert re.fullmatch(r"fa3jit_attention_fwd_bf16_d128_causal_[0-9a-f]{8}", info["kernel_name"]), info
    assert info["summary"].startswith("bf16 d128 causal"), info["summary"]
    assert re.fullmatch(r"[0-9a-f]{64}", info["key"])
    assert info["num_threads"] % 128 == 0 and info["num_threads"] >= 256
    assert 0 < info["smem_bytes"] <= 232448
    assert causal_kernel.name == info["kernel_name"] and causal_kernel.summary == info["summary"]
    assert causal_kernel.summary in repr(causal_kernel)


def test_kernel_info_matches_compile_spec(runtime, causal_kernel):
    compiled = runtime.compile_spec(SPEC_BF16_D128)
    info = causal_kernel.info()
    assert compiled["key"] == info["key"] and compiled["kernel_name"] == info["kernel_name"]
    assert compiled["cache_hit"] is True


def test_kernel_get_info_checks_struct_size(causal_kernel):
    lib = _capi.library()
    info = _capi.KernelInfo(struct_size=16)
    assert _status_name(lib.fa3jit_kernel_get_info(causal_kernel.handle, ctypes.byref(info))) == "invalid_argument"
    assert "struct_size is 16" in _last_error()


def test_forward_with_a_matching_kernel_reaches_the_pointer_checks(runtime, causal_kernel):
    """The spec agrees (bf16, d128, causal), so the call gets past the agreement check to the device checks,
    which reject the fake pointers by name."""
    with pytest.raises(fa3jit.Fa3jitValueError, match=re.escape("q.data")) as info:
        runtime.forward(_params(causal=1), 0, kernel=causal_kernel)
    assert info.value.status_name == "invalid_argument"


@pytest.mark.parametrize("fields, needle", [
    (dict(causal=0), "causal"),
    (dict(causal=1, dtype=_capi.DTYPE_FP16), "dtype"),
    (dict(causal=1, head_dim=64, head_dim_v=64), "head_dim"),
])
def test_forward_with_a_kernel_of_another_spec_is_refused(runtime, causal_kernel, fields, needle):
    with pytest.raises(fa3jit.Fa3jitValueError, match="kernel spec") as info:
        runtime.forward(_params(**fields), 0, kernel=causal_kernel)
    assert info.value.status_name == "invalid_argument"
    assert needle in str(info.value)


def test_stale_kernel_handle_is_refused(runtime):
    kernel = _create_kernel_or_skip(runtime, SPEC_BF16_D128_FULL)
    lib = _capi.library()
    handle = kernel.handle
    params, info = _params(), _capi.KernelInfo()  # made before the destroy: nothing should reuse its memory
    kernel.close()
    kernel.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        runtime.forward(params, 0, kernel=kernel)
    # The raw handle after destroy: best effort, detected while the memory still holds the dead magic.
    status = lib.fa3jit_attention_forward(runtime.handle, handle, ctypes.byref(params), None)
    assert _status_name(status) == "invalid_argument"
    assert "kernel is not a live fa3jit_kernel" in _last_error()
    assert _status_name(lib.fa3jit_kernel_get_info(handle, ctypes.byref(info))) == "invalid_argument"
    assert "not a live fa3jit_kernel" in _last_error()


def test_kernel_from_a_dict_spec_is_the_same_kernel(runtime, causal_kernel):
    with fa3jit.Kernel({"causal": True, "head_dim": 128, "dtype": "bf16"}, runtime=runtime) as same:
        assert same.info()["key"] == causal_kernel.info()["key"]
        assert same.handle != causal_kernel.handle  # a handle each, one loaded kernel behind them


# ---- fa3jit_compile_spec ---------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, status_name, needle", [
    ('{"dtype": "bf16", "head_dim": 84}', "invalid_spec", "head_dim"),
    ('{"dtype": "bf16", "head_dim": 128, "bogus_field": 1}', "invalid_spec", "bogus_field"),
    ('{"dtype": "bf16", ', "invalid_spec", "not valid JSON"),
    ('{"dtype": "e4m3", "head_dim": 72}', "invalid_spec", "head_dim"),
    ('{"dtype": "e4m3", "head_dim": 128, "out_dtype": "e4m3"}', "invalid_spec", "out_dtype"),
])
def test_compile_spec_rejects_bad_specs(runtime, spec, status_name, needle):
    with pytest.raises(fa3jit.Fa3jitValueError, match=re.escape(needle)) as info:
        runtime.compile_spec(spec)
    assert info.value.status_name == status_name


def test_compile_spec_compiles_once_then_hits_memory_and_disk(tmp_path):
    cache = tmp_path / "cache"
    with _capi.Runtime(cache_dir=cache) as rt:
        cold = rt.compile_spec(SPEC_BF16_D128)
        warm = rt.compile_spec(SPEC_BF16_D128)
    assert cold["cache_hit"] is False and warm["cache_hit"] is True
    assert re.fullmatch(r"[0-9a-f]{64}", cold["key"]) and warm["key"] == cold["key"]
    assert re.fullmatch(r"fa3jit_attention_fwd_bf16_d128_causal_[0-9a-f]{8}", cold["kernel_name"]), cold
    assert cold["kind"] == "attention_fwd"
    assert cold["summary"].startswith("bf16 d128 causal"), cold["summary"]
    assert cold["registers"] > 0 and cold["spill_store_bytes"] >= 0 and cold["spill_load_bytes"] >= 0
    assert cold["num_threads"] % 128 == 0 and cold["num_threads"] >= 256
    assert 0 < cold["smem_bytes"] <= 232448
    assert (cache / f"{cold['key']}.cubin-entry").is_file()

    # A new runtime (new process, in effect) on the same directory loads from disk.
    with _capi.Runtime(cache_dir=cache) as rt:
        from_disk = rt.compile_spec(SPEC_BF16_D128)
    assert from_disk["cache_hit"] is True and from_disk["key"] == cold["key"]
    assert from_disk["registers"] == cold["registers"]


def test_compile_spec_accepts_a_dict(tmp_path):
    with _capi.Runtime(cache_dir=tmp_path / "cache") as rt:
        a = rt.compile_spec(SPEC_BF16_D128)
        b = rt.compile_spec({"dtype": "bf16", "head_dim": 128, "causal": True})
    assert a["key"] == b["key"] and b["cache_hit"] is True


def test_compile_spec_info_struct_size_is_checked(runtime):
    lib = _capi.library()
    info = _capi.KernelInfo(struct_size=0)
    status = lib.fa3jit_compile_spec(runtime.handle, SPEC_BF16_D128.encode(), ctypes.byref(info))
    assert _status_name(status) == "invalid_argument"
    assert "struct_size is 0" in _last_error()
    assert lib.fa3jit_compile_spec(runtime.handle, SPEC_BF16_D128.encode(), None) == 0  # info is optional


def test_concurrent_compile_spec_compiles_once(tmp_path):
    results, errors = [], []

    def worker(rt):
        try:
            results.append(rt.compile_spec(SPEC_BF16_D128))
        except Exception as error:  # reported below, not swallowed
            errors.append(error)

    with _capi.Runtime(cache_dir=tmp_path / "cache") as rt:
        threads = [threading.Thread(target=worker, args=(rt,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    assert len({r["key"] for r in results}) == 1
    assert sorted(r["cache_hit"] for r in results) == [False, True, True, True]


def test_spec_key_order_and_spelled_out_defaults_give_the_same_key(tmp_path):
    with _capi.Runtime(cache_dir=tmp_path / "cache") as rt:
        a = rt.compile_spec(SPEC_BF16_D128)
        b = rt.compile_spec('{"causal": true, "head_dim": 128, "head_dim_v": 128, "dtype": "bf16", "stages": 2}')
    assert a["key"] == b["key"] and b["cache_hit"] is True


def test_library_lookup_honours_fa3jit_library(monkeypatch, tmp_path):
    monkeypatch.setattr(_capi, "bundled_library", lambda: tmp_path / "no-bundled" / "libfa3jit.so")
    monkeypatch.setenv("FA3JIT_LIBRARY", str(tmp_path / "missing.so"))
    assert _capi.library_candidates() == [str(tmp_path / "missing.so")]
    monkeypatch.delenv("FA3JIT_LIBRARY")
    candidates = _capi.library_candidates()
    assert candidates[-2:] == ["libfa3jit.so.0", "libfa3jit.so"]


def test_library_lookup_puts_the_bundled_library_first(monkeypatch, tmp_path):
    """A wheel's own libfa3jit.so (built with this Python code) wins over FA3JIT_LIBRARY and a build tree."""
    bundled = tmp_path / "fa3jit" / "libfa3jit.so"
    bundled.parent.mkdir()
    bundled.write_bytes(b"")
    monkeypatch.setattr(_capi, "bundled_library", lambda: bundled)
    monkeypatch.setenv("FA3JIT_LIBRARY", str(tmp_path / "other.so"))
    assert _capi.library_candidates() == [str(bundled), str(tmp_path / "other.so")]
    monkeypatch.delenv("FA3JIT_LIBRARY")
    candidates = _capi.library_candidates()
    assert candidates[0] == str(bundled) and candidates[-2:] == ["libfa3jit.so.0", "libfa3jit.so"]


def test_bundled_library_is_in_the_package_directory():
    assert _capi.bundled_library() == pathlib.Path(_capi.__file__).resolve().parent / "libfa3jit.so"


MANIFEST = {"kind": "serving_manifest",
            "models": [{"name": "tiny", "dtype": "fp16", "head_dim": 64, "num_heads": 8, "num_heads_kv": 8,
                        "kv": ["packed"], "decode_queries": [1]}]}


def test_warm_manifest_compiles_the_kernels_of_a_serving_manifest(tmp_path):
    """fa3jit_warm_manifest through the runtime and fa3jit.warm_manifest (background thread), no GPU needed."""
    with fa3jit.Runtime(cache_dir=str(tmp_path / "cache")) as runtime:
        compiled = runtime.warm_manifest(MANIFEST)
        assert compiled >= 2  # a prefill and a decode kernel at least (and split variants, their combine)
        assert runtime.warm_manifest(json.dumps(MANIFEST)) == 0  # every kernel is cached now
        entries = [p for p in (tmp_path / "cache").iterdir() if p.name.endswith(".cubin-entry")]
        assert len(entries) == compiled
        bad = dict(MANIFEST, models=[dict(MANIFEST["models"][0], page_sizes=[16])])
        with pytest.raises(fa3jit.Fa3jitValueError, match=r"models\[0\]\.page_sizes") as info:
            runtime.warm_manifest(bad)
        assert info.value.status_name == "invalid_spec"
    thread = fa3jit.warm_manifest(MANIFEST, background=True)
    thread.join(120)
    assert not thread.is_alive() and thread.error is None and thread.compiled >= 0
