"""tests/llamabuild.py: the CPU class and the cache key of the real-model server's build."""

from __future__ import annotations

import llamabuild
import pytest
from llamabuild import Unavailable, build_flags, build_key, cpu_class, cpu_flags, supports

# /proc/cpuinfo flag lines (shortened) of the two x86 classes CI lands on.
EPYC_ROME = "fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand bmi1 avx2 bmi2 sha_ni"
XEON_SPR = EPYC_ROME + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16 amx_tile amx_int8"
ZEN5 = EPYC_ROME + " avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 avx_vnni"
CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: {}\nbugs\t\t: sysret_ss_attrs\n\nprocessor\t: 1\n"


@pytest.mark.parametrize(
    "flags, expected",
    [
        (EPYC_ROME, "avx2"),
        (XEON_SPR, "avx512vnni"),
        (ZEN5, "avx512vnni"),
        (EPYC_ROME + " avx512f avx512bw avx512vl avx512dq", "avx2"),  # AVX-512 without VNNI
    ],
)
def test_x86_classes(flags, expected):
    assert cpu_class(cpu_flags(CPUINFO.format(flags)), "x86_64") == expected


def test_an_x86_cpu_without_avx2_cannot_build():
    with pytest.raises(Unavailable, match="lacks avx2"):
        cpu_class(cpu_flags(CPUINFO.format("fpu sse sse2 avx fma f16c bmi2")), "x86_64")


def test_other_architectures_build_natively_keyed_by_their_exact_features():
    neoverse = cpu_flags("processor\t: 0\nFeatures\t: fp asimd aes crc32 atomics asimddp sve i8mm\n")
    older = cpu_flags("processor\t: 0\nFeatures\t: fp asimd aes crc32\n")
    a, b = cpu_class(neoverse, "aarch64"), cpu_class(older, "aarch64")
    assert a.startswith("native-aarch64-") and b.startswith("native-aarch64-") and a != b
    assert "-DGGML_NATIVE=ON" in build_flags(a)


def test_x86_builds_name_every_switch_and_are_never_native():
    avx2, avx512 = build_flags("avx2"), build_flags("avx512vnni")
    for flags in (avx2, avx512):
        assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags and "-DGGML_FMA=ON" in flags
    assert "-DGGML_AVX512=OFF" in avx2 and "-DGGML_AVX512_VNNI=OFF" in avx2
    assert "-DGGML_AVX512=ON" in avx512 and "-DGGML_AVX512_VNNI=ON" in avx512
    with pytest.raises(Unavailable, match="unknown CPU class"):
        build_flags("avx9")


def test_a_build_is_found_again_only_by_its_version_class_and_flags():
    key = build_key("0.3.36", "avx2", build_flags("avx2"))
    assert key == build_key("0.3.36", "avx2", build_flags("avx2"))
    assert key.startswith("0.3.36-avx2-")
    others = {
        build_key("0.3.36", "avx512vnni", build_flags("avx512vnni")),
        build_key("0.3.35", "avx2", build_flags("avx2")),
        build_key("0.3.36", "avx2", build_flags("avx2") + ("-DGGML_LLAMAFILE=OFF",)),
    }
    assert key not in others and len(others) == 3


def test_which_builds_run_where():
    rome, spr = cpu_flags(CPUINFO.format(EPYC_ROME)), cpu_flags(CPUINFO.format(XEON_SPR))
    assert supports(spr, "avx2") and supports(spr, "avx512vnni") and supports(rome, "avx2")
    assert not supports(rome, "avx512vnni")


def test_a_machine_that_cannot_build_skips_with_the_reason_but_ci_fails(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    args = ["--venv", str(venv), "--wheels", str(tmp_path / "wheels"), "--cpu-class", "avx9"]
    monkeypatch.delenv("CI", raising=False)
    assert llamabuild.main(args) == 0
    assert "avx9" in (venv / llamabuild.UNAVAILABLE).read_text()
    assert not (venv / llamabuild.STAMP).exists()
    monkeypatch.setenv("CI", "true")
    assert llamabuild.main(args) == 1
    assert not (tmp_path / "wheels").exists()  # nothing was built
