"""The C ABI through ctypes, without a GPU: version, status names, the thread-local last error, argument
checks of fa3jit_forward that come before any driver call, and fa3jit_compile_spec with NVRTC and the disk
cache (kernels compile on the CPU)."""

import ctypes
import pathlib
import re
import threading

import pytest

import fa3jit
from fa3jit import _capi

from support import ROOT, needs_library

pytestmark = needs_library

SPEC_BF16_D128 = '{"dtype": "bf16", "head_dim": 128, "causal": true}'


def _project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(fa3jit VERSION (\d+\.\d+\.\d+)", text).group(1)


def test_version_is_the_project_version():
    assert fa3jit.version() == _project_version()


def test_status_names_match_error_codes():
    lib = _capi.library()
    for status, name in _capi.STATUS_NAMES.items():
        assert lib.fa3jit_status_name(status).decode() == name
    assert lib.fa3jit_status_name(42).decode() == "unknown"


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
    (dict(spec_json=b'{"dtype": "bf16", "head_dim": 64}'), "head_dim is 128 but spec_json has head_dim 64"),
    (dict(spec_json=b'{"dtype": "fp16", "head_dim": 128}'), "dtype is bf16 but spec_json has dtype fp16"),
])
def test_forward_rejects_bad_params_before_any_launch(runtime, fields, needle):
    with pytest.raises(fa3jit.Fa3jitValueError, match=re.escape(needle)) as info:
        runtime.forward(_params(**fields), 0)
    assert info.value.status_name == "invalid_argument"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("fields, status_name, needles", [
    (dict(head_dim=80, head_dim_v=80), "invalid_argument", ["head_dim", "80", "64", "128", "256"]),
    (dict(num_heads_kv=3), "invalid_argument", ["num_heads", "num_heads_kv"]),
    (dict(batch=0), "invalid_argument", ["batch"]),
    (dict(seqlen_k=-5), "invalid_argument", ["seqlen_k"]),
    (dict(dtype=_capi.DTYPE_E4M3), "unsupported", ["e4m3"]),
    (dict(head_dim_v=64), "unsupported", ["head_dim_v"]),
])
def test_runtime_shape_checks_come_before_the_driver(runtime, fields, status_name, needles):
    with pytest.raises(fa3jit.Fa3jitValueError) as info:
        runtime.forward(_params(**fields), 0)
    assert info.value.status_name == status_name
    assert all(needle in str(info.value) for needle in needles), str(info.value)


def test_forward_with_bad_spec_json_is_invalid_spec(runtime):
    with pytest.raises(fa3jit.Fa3jitValueError, match="tile") as info:
        runtime.forward(_params(spec_json=b'{"dtype": "bf16", "head_dim": 128, "tile": 5}'), 0)
    assert info.value.status_name == "invalid_spec"


def test_forward_with_a_null_runtime_is_refused():
    lib = _capi.library()
    params = _params()
    status = lib.fa3jit_forward(None, ctypes.byref(params), None)
    assert _capi.STATUS_NAMES[status] == "invalid_argument"
    assert "runtime is NULL" in lib.fa3jit_last_error().decode()


def test_larger_struct_from_a_newer_header_is_accepted_only_with_zero_tail(runtime):
    lib = _capi.library()
    size = ctypes.sizeof(_capi.ForwardParams)
    buffer = ctypes.create_string_buffer(size + 16)
    params = _params(q=_capi.Tensor(0, 0, 0, 0))  # fails later, at q, once the struct is accepted
    params.struct_size = size + 16
    ctypes.memmove(buffer, ctypes.byref(params), size)
    handle = runtime._live_handle()
    status = lib.fa3jit_forward(handle, ctypes.cast(buffer, ctypes.POINTER(_capi.ForwardParams)), None)
    assert _capi.STATUS_NAMES[status] == "invalid_argument"
    assert "q.data is NULL" in lib.fa3jit_last_error().decode()
    buffer[size + 3] = b"\x01"
    status = lib.fa3jit_forward(handle, ctypes.cast(buffer, ctypes.POINTER(_capi.ForwardParams)), None)
    assert _capi.STATUS_NAMES[status] == "invalid_argument"
    assert f"at byte {size + 3}" in lib.fa3jit_last_error().decode()


def test_last_error_is_per_call_and_per_thread(runtime):
    lib = _capi.library()
    with pytest.raises(ValueError):
        runtime.forward(_params(causal=3), 0)
    assert "causal is 3" in lib.fa3jit_last_error().decode()

    seen_in_other_thread = []
    thread = threading.Thread(target=lambda: seen_in_other_thread.append(lib.fa3jit_last_error().decode()))
    thread.start()
    thread.join()
    assert seen_in_other_thread == [""]

    # A successful status-returning call clears it.
    handle = ctypes.c_void_p()
    assert lib.fa3jit_runtime_create(None, ctypes.byref(handle)) == 0
    assert lib.fa3jit_last_error().decode() == ""
    lib.fa3jit_runtime_destroy(handle)


def test_runtime_create_rejects_unset_struct_size():
    lib = _capi.library()
    options = _capi.RuntimeOptions(struct_size=0, cache_dir=None)
    handle = ctypes.c_void_p(1234)
    status = lib.fa3jit_runtime_create(ctypes.byref(options), ctypes.byref(handle))
    assert _capi.STATUS_NAMES[status] == "invalid_argument"
    assert "fa3jit_runtime_options.struct_size is 0" in lib.fa3jit_last_error().decode()
    assert not handle.value  # *out is NULL on failure


@pytest.mark.parametrize("spec, status_name, needle", [
    ('{"dtype": "bf16", "head_dim": 80}', "invalid_spec", "head_dim"),
    ('{"dtype": "bf16", "head_dim": 128, "bogus_field": 1}', "invalid_spec", "bogus_field"),
    ('{"dtype": "bf16", ', "invalid_spec", "not valid JSON"),
    ('{"dtype": "e4m3", "head_dim": 128}', "unsupported", "e4m3"),
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
    assert cold["kernel_name"].startswith("fa3jit_fwd_bf16_d128")
    assert cold["registers"] > 0 and cold["spill_store_bytes"] >= 0 and cold["spill_load_bytes"] >= 0
    assert cold["num_threads"] % 128 == 0 and cold["num_threads"] >= 256
    assert 0 < cold["smem_bytes"] <= 232448
    assert cold["block_m"] in (64, 128, 192) and cold["block_n"] > 0
    assert (cache / f"{cold['key']}.cubin-entry").is_file()

    # A new runtime (new process, in effect) on the same directory loads from disk.
    with _capi.Runtime(cache_dir=cache) as rt:
        from_disk = rt.compile_spec(SPEC_BF16_D128)
    assert from_disk["cache_hit"] is True and from_disk["key"] == cold["key"]
    assert from_disk["registers"] == cold["registers"]


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
    monkeypatch.setenv("FA3JIT_LIBRARY", str(tmp_path / "missing.so"))
    assert _capi.library_candidates() == [str(tmp_path / "missing.so")]
    monkeypatch.delenv("FA3JIT_LIBRARY")
    candidates = _capi.library_candidates()
    assert candidates[0] == str(pathlib.Path(_capi.__file__).resolve().parent / "libfa3jit.so")
    assert candidates[-2:] == ["libfa3jit.so.0", "libfa3jit.so"]
