# Sourced by the scripts: lets mpirun start more ranks than cores, as root too (CI,
# containers), with one BLAS thread per rank.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
# One-sided component: OpenMPI 4's default (osc/rdma) applies an MPI_Accumulate with an
# indexed target datatype element by element over shared memory; osc/pt2pt ships it as one
# message. Measured on the gssp top-k exchange (LeNet-5, 1.5% of 61,706 values to 3 peers):
# median 4.63 ms with rdma, 0.46 ms with pt2pt. Kept when the caller chose a component;
# OpenMPI 5 has no pt2pt and is left alone.
if [ -z "${OMPI_MCA_osc:-}" ] && command -v ompi_info >/dev/null 2>&1 \
    && ompi_info 2>/dev/null | grep -q "MCA osc: pt2pt"; then
    export OMPI_MCA_osc=pt2pt
fi
