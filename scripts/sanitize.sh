#!/usr/bin/env bash
# Build the C extensions with AddressSanitizer + UndefinedBehaviorSanitizer in a scratch copy
# of the working tree and run the kernel-heavy tests (and a short fuzz run) against them.
#
#   scripts/sanitize.sh [FUZZ_MINUTES] [-- extra pytest args]
#
# Needs gcc (or clang) with libasan/libubsan. The normal build in src/ is not touched: the copy
# lives in ${SANITIZE_DIR:-/tmp/trainscape-sanitize}, is put first on PYTHONPATH, and libasan
# is preloaded into the (uninstrumented) Python interpreter. Any ASan report or UBSan runtime
# error aborts the run (halt_on_error, -fno-sanitize-recover) and the script exits non-zero.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${SANITIZE_DIR:-/tmp/trainscape-sanitize}"
FUZZ_MINUTES="${1:-1}"
shift || true
[ "${1:-}" = "--" ] && shift
PY="${PYTHON:-python}"
CC_BIN="${CC:-gcc}"

LIBASAN="$($CC_BIN -print-file-name=libasan.so)"
if [ ! -e "$LIBASAN" ]; then
    echo "sanitize.sh: $CC_BIN has no libasan.so; install the sanitizer runtime" >&2
    exit 2
fi

echo "== copying the working tree to $DIR"
rm -rf "$DIR"
mkdir -p "$DIR"
(cd "$ROOT" && git ls-files -co --exclude-standard -z | grep -zv '\.so$' \
    | xargs -0 tar cf - ) | (cd "$DIR" && tar xf -)

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
echo "== building the C extensions with: $SAN"
(cd "$DIR" && CC="$CC_BIN" CFLAGS="$SAN -O1" LDFLAGS="-fsanitize=address,undefined" \
    TRAINSCAPE_OPENMP=0 "$PY" setup.py -q build_ext --inplace >build.log 2>&1) || {
    tail -30 "$DIR/build.log" >&2
    exit 1
}
nm -D "$DIR"/src/trainscape/native/_llm*.so | grep -q __asan_init \
    || { echo "sanitize.sh: the extension is not instrumented" >&2; exit 1; }

export PYTHONPATH="$DIR/src${PYTHONPATH:+:$PYTHONPATH}"
# libstdc++ preloaded beside libasan: else ASan's __cxa_throw interceptor fails a CHECK the first
# time a C++ extension (matplotlib's ft2font) throws
LIBSTDCXX="$($CC_BIN -print-file-name=libstdc++.so)"
export LD_PRELOAD="$LIBASAN${LIBSTDCXX:+:$LIBSTDCXX}"
# reports also go to $DIR/asan.<pid> / ubsan.<pid> (pytest captures stderr)
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:verify_asan_link_order=0:log_path=$DIR/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$DIR/ubsan"
export PYTHONDONTWRITEBYTECODE=1
# The sanitizers instrument the C kernels. numba compiles its kernels afresh for the copy's paths
# (a few minutes, once per copy); SANITIZE_NUMBA_JIT=0 runs them as plain Python instead and
# deselects the numba-backend cases (faster, but some numba-only entry points need the JIT).
KSEL=()
if [ "${SANITIZE_NUMBA_JIT:-1}" = "0" ]; then
    export NUMBA_DISABLE_JIT=1
    KSEL=(-k "not numba")
fi

cd "$DIR"
"$PY" -c "import trainscape, sys; assert trainscape.__file__.startswith('$DIR'), trainscape.__file__; \
from trainscape.backends import available_backends as a; ok = a(); print('backends:', ok); \
sys.exit(0 if ok['c'][0] else 1)"

echo "== tests against the sanitized kernels"
"$PY" -m pytest -q -p no:cacheprovider -x \
    tests/test_native_guards.py tests/test_kernel_guard.py tests/test_backends_differential.py \
    tests/test_dlrm_kernels.py tests/test_dlrm_moves.py tests/test_dlrm_menu.py \
    tests/test_sites.py tests/test_comm_dtype.py tests/test_offload.py \
    tests/test_sync_strategies.py tests/test_known_answers_columns.py \
    tests/test_reliability_battery.py tests/test_fuzz.py "${KSEL[@]}" "$@"

if [ "$FUZZ_MINUTES" != "0" ]; then
    echo "== fuzzing for $FUZZ_MINUTES minute(s) against the sanitized kernels"
    "$PY" scripts/fuzz.py --minutes "$FUZZ_MINUTES" --timeout 120
fi
if ls "$DIR"/asan.* "$DIR"/ubsan.* >/dev/null 2>&1; then
    echo "sanitize.sh: sanitizer reports:" >&2
    cat "$DIR"/asan.* "$DIR"/ubsan.* >&2
    exit 1
fi
echo "== sanitizer run clean"
