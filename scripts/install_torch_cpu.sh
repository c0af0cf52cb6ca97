#!/usr/bin/env bash
# Installs CPU PyTorch from PyPI into a cache venv, for scripts/pytorch_reference.py only
# (never in CI; about 4.4 GB and a few minutes). Idempotent: does nothing when the venv
# already imports torch. Prints the venv's python on its last line.
#
#   ./scripts/install_torch_cpu.sh            # venv at ~/.cache/gssp-torch-venv
#   VENV=/scratch/torch ./scripts/install_torch_cpu.sh
#   TORCH_VERSION=2.15.0 ./scripts/install_torch_cpu.sh
#
# Why not a plain `pip install torch`: the PyPI wheel's libraries are linked against the CUDA
# runtime wheels, so torch imports only with them present, and pip would also pull triton,
# which CPU use does not need. So: torch without dependencies, then exactly the nvidia-*
# wheels torch's own metadata names, then its other pure-Python dependencies.
set -euo pipefail
VENV=${VENV:-$HOME/.cache/gssp-torch-venv}
PY=$VENV/bin/python
if [ -x "$PY" ] && "$PY" -c "import torch, numpy" 2>/dev/null; then
    echo "torch $("$PY" -c 'import torch; print(torch.__version__)') already in $VENV"
    echo "$PY"
    exit 0
fi
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" 2>/dev/null; then
    echo "install_torch_cpu: python3 venv support is missing (Debian/Ubuntu: apt-get install python3-venv)" >&2
    exit 1
fi
python3 -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install --quiet --upgrade pip
"$PIP" install --no-deps "torch${TORCH_VERSION:+==$TORCH_VERSION}"
"$PIP" install --quiet packaging
# torch's requirements, evaluated for this machine, triton left out.
mapfile -t REQS < <("$PY" - <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement
for line in md.requires("torch") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.startswith("triton"):
        continue
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    print(f"{req.name}{extras}{req.specifier}")
PY
)
NVIDIA=()
OTHER=()
for r in "${REQS[@]}"; do
    case "$r" in
        nvidia*) NVIDIA+=("$r") ;;
        *) OTHER+=("$r") ;;
    esac
done
# The CUDA runtime wheels, without their own dependencies (which would pull more of CUDA).
if [ ${#NVIDIA[@]} -gt 0 ]; then
    "$PIP" install --no-deps "${NVIDIA[@]}"
fi
# The rest with their dependencies: the pure-Python ones torch needs at import, and the CUDA
# runtime wheels that torch 2.10+ names through cuda-toolkit's extras. numpy for the script.
"$PIP" install "${OTHER[@]}" numpy
"$PY" -c "import torch; print('torch', torch.__version__, 'imports; CPU threads', torch.get_num_threads())"
echo "$PY"
