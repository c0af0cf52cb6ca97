# Sourced by the scripts: lets mpirun start more ranks than cores, as root too (CI,
# containers), with one BLAS thread per rank.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
# One-sided components, OpenMPI 4: osc/sm where all ranks of a window share a node (the
# window memory comes from MPI_Win_allocate, so an accumulate is a plain memory operation),
# else osc/pt2pt. The default for the rest, osc/rdma, applies an MPI_Accumulate with an
# indexed target datatype element by element through lock round trips. Measured on the gssp
# top-k exchange (LeNet-5, 0.4-1.5% of 61,706 values to 3 peers, every 8 pushes, 20 ranks
# on 2 cores): median 4.63 ms with rdma, 0.46-0.99 ms with pt2pt, 0.21-0.41 ms with sm.
# Kept when the caller chose components; OpenMPI 5 has no pt2pt and is left alone.
if [ -z "${OMPI_MCA_osc:-}" ] && command -v ompi_info >/dev/null 2>&1 \
    && ompi_info 2>/dev/null | grep -q "MCA osc: pt2pt"; then
    export OMPI_MCA_osc=sm,pt2pt
fi
# NVRTC from scripts/nvrtc.sh's cache, where it was installed: the CUDA backend compiles
# kernels/*.cu with it (a CUDA toolkit's own libnvrtc on the loader's path works as well).
nvrtc_lib=${GSSP_CACHE:-$HOME/.cache/gssp}/nvrtc-13.0.88/nvidia/cu13/lib
if [ -f "$nvrtc_lib/libnvrtc.so.13" ]; then
    case ":${LD_LIBRARY_PATH:-}:" in
        *":$nvrtc_lib:"*) ;;
        *) export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
    esac
fi
unset nvrtc_lib
