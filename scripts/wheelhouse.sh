#!/usr/bin/env bash
# Download the wheels that training, collection and fidelity evaluation need on a CUDA
# machine that has Python 3.12, torch and numpy but no package registry (DESIGN §5 "The
# GPU machine": it already has torch, numpy, safetensors, typer, rich, opencv-python-
# headless, pyyaml, cloudpickle, packaging, typing-extensions, pillow, scipy, imageio).
#
#   scripts/wheelhouse.sh DIR        # on a machine with registry access
#
# manylinux x86-64 cp312 wheels, versions pinned by uv.lock, no dependencies resolved
# (the list below is the full set, found by importing the training, collection and
# evaluation code with ray and lerobot blocked; tests/test_gpu_recipe.py checks it).
# Fails if the wheels exceed 40 MB.
set -euo pipefail
DIR=${1:?usage: scripts/wheelhouse.sh DIR}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
PACKAGES=(
    zarr numcodecs donfig msgspec google-crc32c   # the episode store
    gymnasium farama-notifications gym-pusht      # the ground-truth env
    pymunk cffi pycparser pygame shapely          # gym-pusht's physics and drawing
)
pins=$("$PY" - "$REPO/uv.lock" "${PACKAGES[@]}" <<'PYEOF'
import sys, tomllib
lock = tomllib.load(open(sys.argv[1], "rb"))
versions = {p["name"]: p["version"] for p in lock["package"]}
missing = [n for n in sys.argv[2:] if n not in versions]
if missing:
    sys.exit(f"not in uv.lock: {missing}")
print(" ".join(f"{n}=={versions[n]}" for n in sys.argv[2:]))
PYEOF
)
platforms=()
for tag in manylinux_2_17 manylinux2014 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux1; do
    platforms+=(--platform "${tag}_x86_64")
done
mkdir -p "$DIR"
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none "${platforms[@]}" --platform any \
    -d "$DIR" $pins
size_kb=$(du -sk "$DIR" | cut -f1)
echo "wheelhouse $DIR: $(ls "$DIR"/*.whl | wc -l) wheels, $((size_kb / 1024)) MB"
if [ "$size_kb" -ge $((40 * 1024)) ]; then
    echo "error: the wheelhouse is over 40 MB" >&2
    exit 1
fi
