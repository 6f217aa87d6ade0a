#!/usr/bin/env bash
# GPU validation (issue 6) in one command, for a machine with one GPU (docs/gpu-validation.md).
#
# Beforehand, on a machine with network and this repository's .venv (torch in it), build the wheels the GPU
# machine lacks into .whl/ (ignored by git; carry it along):
#     benchmarks/gpu_validation.sh --build-wheels
# On the GPU machine (no network; Python 3.12 with CUDA torch, no deepspeed/pydantic/hjson/jinja2):
#     benchmarks/gpu_validation.sh [gpu_validation.py options]      # results in $OUT (default runs/gpu-validation)
# It installs .whl/*.whl (if present) with `pip install --target` into a scratch directory, checks that the
# imports work, then runs benchmarks/gpu_validation.py. Nothing is downloaded on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."

DEEPSPEED_VERSION=0.19.8
SITE=${TRAINPLAN_SITE:-/tmp/trainplan-site}   # where the carried wheels are installed
WHEELS=${TRAINPLAN_WHEELS:-.whl}              # where they are carried

build_wheels() {
    # cp312 manylinux wheels of what the GPU machine lacks, and a pure-Python DeepSpeed (DS_BUILD_OPS=0: its ops
    # JIT-compile there if a run needs one; the example trainer needs none).
    local py=${PYTHON:-.venv/bin/python} sdist versions
    sdist=$(mktemp -d)
    mkdir -p "$WHEELS"
    "$py" -m pip download -q --no-deps --no-binary :all: -d "$sdist" "deepspeed==$DEEPSPEED_VERSION"
    DS_BUILD_OPS=0 "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" \
        "$sdist/deepspeed-$DEEPSPEED_VERSION.tar.gz"
    # The versions this repository is tested with (its .venv), so the GPU run plans and renders the same way.
    versions=$("$py" -c 'import importlib.metadata as m; print(" ".join(f"{n}=={m.version(n)}" for n in
        ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions", "hjson",
         "jinja2", "markupsafe")))')
    # shellcheck disable=SC2086  # one word per requirement
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$WHEELS" $versions
    rm -rf "$sdist"
    ls -1 "$WHEELS"
}

if [[ "${1:-}" == "--build-wheels" ]]; then
    build_wheels
    exit 0
fi

PYTHON=${PYTHON:-$(command -v python3 || command -v python)}
shopt -s nullglob
wheels=("$WHEELS"/*.whl)
if (( ${#wheels[@]} )); then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PYTHON" -c 'import deepspeed, pydantic, jinja2, hjson, torch' 2>/dev/null; then
    echo "gpu_validation.sh: missing Python packages:" >&2
    for module in deepspeed pydantic jinja2 hjson torch cpuinfo einops msgpack psutil; do
        "$PYTHON" -c "import $module" 2>/dev/null || echo "  $module" >&2
    done
    echo "build .whl/ with 'benchmarks/gpu_validation.sh --build-wheels' and carry it (docs/gpu-validation.md)" >&2
    exit 2
fi
exec "$PYTHON" benchmarks/gpu_validation.py --out "${OUT:-runs/gpu-validation}" "$@"
